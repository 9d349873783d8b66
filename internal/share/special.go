package share

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/wire"
)

// What a client asks for that the share's host must not have is kept as
// metadata beside the file, in the share's own extended attribute
// metaXattr, and shown in the file's attributes (docs/posix.md):
//
//   - setuid and setgid bits of a regular file (docs/security.md, rule 5:
//     the real file never gets them unless the operator passes
//     --allow-setid): the real file has the other bits asked;
//   - a character or block device: the real file is an empty regular file
//     of mode 0600, never a device node.
//
// A file that carries the attribute has the sticky bit at the share, which
// Linux gives no meaning on a regular file: only then is the attribute
// read, so that a stat or a listing costs no more for other files. The
// attribute records the whole mode shown (the sticky bit included, as the
// client asked it or not) and the device number. Clients can neither read
// nor set it (wire.XattrTravels leaves user.pando. out), and a listing of
// a file's attributes leaves it out.
const metaXattr = wire.XattrShareMeta

// record is what metaXattr holds: the mode shown (type and 07777) and, for
// a device, its number.
type record struct {
	mode uint32
	rdev uint64
}

func (r record) encode() []byte {
	return []byte(fmt.Sprintf("1 %o %d", r.mode, r.rdev))
}

func decodeRecord(b []byte) (record, bool) {
	var r record
	var v int
	var mode string
	if n, err := fmt.Sscanf(string(b), "%d %s %d", &v, &mode, &r.rdev); err != nil || n != 3 || v != 1 {
		return record{}, false
	}
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil {
		return record{}, false
	}
	r.mode = uint32(m)
	switch r.mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFCHR, syscall.S_IFBLK:
		return r, true
	}
	return record{}, false
}

// marked reports whether a file with this stat may carry a record.
func marked(st *unix.Stat_t) bool {
	return st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Mode&syscall.S_ISVTX != 0
}

// shown is the attributes of a file with stat st as clients see them:
// get reads its extended attributes (as getxattr does): its owner record
// (ident.go), and metaXattr when it is marked.
func shown(st *unix.Stat_t, get getter) wire.Attr {
	a := attrOf(st)
	id := readIdent(st, get)
	a.Owner, a.Group = id.owner, id.group
	if setidKept(st.Mode) {
		a.Mode |= id.setid
	}
	if !marked(st) {
		return a
	}
	buf := make([]byte, 64)
	n, err := get(metaXattr, buf)
	if err != nil {
		return a
	}
	if r, ok := decodeRecord(buf[:n]); ok {
		a.Mode, a.Rdev = r.mode, r.rdev
		if r.mode&syscall.S_IFMT != syscall.S_IFREG {
			a.Size, a.Blocks = 0, 0
		}
	}
	return a
}

// shownFd is shown for a descriptor of the file (not O_PATH).
func shownFd(st *unix.Stat_t, fd int) wire.Attr {
	return shown(st, func(name string, buf []byte) (int, error) { return unix.Fgetxattr(fd, name, buf) })
}

// shownAt is shown for the file name of directory dirfd.
func shownAt(st *unix.Stat_t, dirfd int, name string) wire.Attr {
	p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
	return shown(st, func(attr string, buf []byte) (int, error) { return unix.Lgetxattr(p, attr, buf) })
}

// needsRecord reports whether a file of type and mode asked by a client
// (type bits and 07777) must be kept with a record: a device, or a
// regular file with setuid or setgid bits the share may not give it.
func (s *Server) needsRecord(mode uint32) bool {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return true
	case syscall.S_IFREG:
		return !s.cfg.AllowSetID && mode&(syscall.S_ISUID|syscall.S_ISGID) != 0
	}
	return false
}

// realMode is the mode (07777) the share's file gets for what a client
// asked (type bits and 07777).
func (s *Server) realMode(mode uint32) uint32 {
	switch {
	case mode&syscall.S_IFMT == syscall.S_IFCHR, mode&syscall.S_IFMT == syscall.S_IFBLK:
		return 0o600 | syscall.S_ISVTX
	case s.needsRecord(mode):
		return s.safeMode(mode) | syscall.S_ISVTX
	}
	return s.safeMode(mode)
}

// setMode gives the file at p (an O_PATH name, see tree.atPath), whose
// stat is st, the mode a client asked (type bits and 07777, the type being
// the file's own but for a device record): its real mode, and a record
// when it needs one; a record it no longer needs is removed.
func (s *Server) setMode(p string, st *unix.Stat_t, mode, rdev uint32) error {
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return nil
	}
	if setidKept(st.Mode) && !s.cfg.AllowSetID && keepsIdent(st.Mode) {
		// The setuid and setgid bits of a directory, a FIFO or a socket
		// are kept in its owner record.
		id := readIdent(st, pathGetter(p))
		if want := mode & (syscall.S_ISUID | syscall.S_ISGID); id.setid != want {
			id.setid = want
			if err := writeIdent(p, st, id); err != nil {
				return err
			}
		}
	}
	real := s.realMode(mode)
	if st.Mode&0o7777 != real {
		if err := unix.Chmod(p, real); err != nil {
			return err
		}
	}
	if s.needsRecord(mode) {
		return unix.Setxattr(p, metaXattr, record{mode: mode, rdev: uint64(rdev)}.encode(), 0)
	}
	if marked(st) {
		if err := unix.Removexattr(p, metaXattr); err != nil && err != unix.ENODATA {
			return err
		}
	}
	return nil
}

// chmodAsked applies a client's chmod to rel: the type stays the one
// shown (a device record stays a device), the bits are those asked.
func (s *Server) chmodAsked(rel string, perm uint32) error {
	return s.tree.atPath(rel, false, func(p string, _ int, st *unix.Stat_t) error {
		typ := st.Mode & syscall.S_IFMT
		var rdev uint32
		if marked(st) {
			a := shown(st, pathGetter(p))
			typ, rdev = a.Mode&syscall.S_IFMT, uint32(a.Rdev)
		}
		if err := s.setMode(p, st, typ|perm&0o7777, rdev); err != nil {
			return &os.PathError{Op: "chmod", Path: rel, Err: err}
		}
		return nil
	})
}
