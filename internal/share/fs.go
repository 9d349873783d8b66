package share

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/wire"
)

// osName turns a share-relative path into the name os.Root expects.
func osName(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// attrOf converts a stat result into a wire.Attr.
func attrOf(st *unix.Stat_t) wire.Attr {
	ctime := st.Ctim.Nano()
	return wire.Attr{
		Ino:     st.Ino,
		Mode:    st.Mode,
		Nlink:   uint32(st.Nlink),
		Size:    st.Size,
		Blocks:  st.Blocks,
		Atime:   st.Atim.Nano(),
		Mtime:   st.Mtim.Nano(),
		Ctime:   ctime,
		Version: uint64(ctime),
	}
}

func fileAttr(f *os.File) (wire.Attr, error) {
	var st unix.Stat_t
	var serr error
	rc, err := f.SyscallConn()
	if err != nil {
		return wire.Attr{}, err
	}
	var a wire.Attr
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.Fstat(int(fd), &st); serr == nil {
			a = shownFd(&st, int(fd))
		}
	}); err != nil {
		return wire.Attr{}, err
	}
	if serr != nil {
		return wire.Attr{}, serr
	}
	return a, nil
}

// lstat returns the attributes of rel without following a final symlink.
func (s *Server) lstat(rel string) (wire.Attr, error) {
	if rel == "" {
		return fileAttr(s.tree.dir)
	}
	var a wire.Attr
	err := s.tree.at(rel, func(dirfd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: rel, Err: err}
		}
		a = shownAt(&st, dirfd, name)
		return nil
	})
	return a, err
}

func statAt(d *os.File, name string) (wire.Attr, error) {
	var st unix.Stat_t
	var serr error
	rc, err := d.SyscallConn()
	if err != nil {
		return wire.Attr{}, err
	}
	var a wire.Attr
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.Fstatat(int(fd), name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil {
			a = shownAt(&st, int(fd), name)
		}
	}); err != nil {
		return wire.Attr{}, err
	}
	if serr != nil {
		return wire.Attr{}, &fs.PathError{Op: "lstat", Path: name, Err: serr}
	}
	return a, nil
}

func splitRel(rel string) (dir, name string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// readDir lists one page of rel: the names after after, in bytewise
// order, at most max of them, with the attributes of every entry and, if
// ld is set, the contents of the small files it takes (see listData.add).
func (s *Server) readDir(rel, after string, max int, ld *listData) (wire.ReadDirResp, error) {
	d, err := s.tree.openDir(rel)
	if err != nil {
		return wire.ReadDirResp{}, err
	}
	defer d.Close()
	dirAttr, err := fileAttr(d)
	if err != nil {
		return wire.ReadDirResp{}, err
	}
	if dirAttr.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return wire.ReadDirResp{}, &fs.PathError{Op: "readdir", Path: rel, Err: syscall.ENOTDIR}
	}
	names, err := s.names.get(rel, dirAttr, d)
	if err != nil {
		return wire.ReadDirResp{}, err
	}
	if rel == "" && slices.ContainsFunc(names, isStaging) {
		// The share's own (see resolve): never listed.
		names = slices.DeleteFunc(slices.Clone(names), isStaging)
	}
	if max <= 0 || max > wire.ReadDirPage {
		max = wire.ReadDirPage
	}
	first, _ := slices.BinarySearch(names, after)
	if after != "" && first < len(names) && names[first] == after {
		first++
	}
	page := names[first:min(first+max, len(names))]
	resp := wire.ReadDirResp{Dir: dirAttr, Entries: make([]wire.DirEntry, 0, len(page)), More: first+len(page) < len(names)}
	for _, n := range page {
		a, err := statAt(d, n)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while we listed
			}
			return wire.ReadDirResp{}, err
		}
		e := wire.DirEntry{Name: n, Attr: a}
		if ld != nil {
			e.Data = ld.add(d, n, joinRel(rel, n), a)
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

func (s *Server) statfs() (wire.StatFSResp, error) {
	var st unix.Statfs_t
	var serr error
	rc, err := s.tree.dir.SyscallConn()
	if err != nil {
		return wire.StatFSResp{}, err
	}
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &st) }); err != nil {
		return wire.StatFSResp{}, err
	}
	if serr != nil {
		return wire.StatFSResp{}, serr
	}
	return wire.StatFSResp{
		Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail, Files: st.Files, Ffree: st.Ffree,
		Bsize: uint32(st.Bsize), NameLen: uint32(st.Namelen),
	}, nil
}

// toWire converts a local error into the error the client sees: no local
// paths, the errno kept, and escapes from the root named as such.
func toWire(op wire.Op, rel string, err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	shown := "/" + rel
	if strings.Contains(err.Error(), "path escapes from parent") || errors.Is(err, syscall.EXDEV) && op != wire.OpRename && op != wire.OpLink {
		return &wire.Error{Code: wire.CodeEscape, Message: fmt.Sprintf("%s %s: the path leads outside the share (a symlink or '..' leaving its root); refused", op, shown)}
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errno = syscall.ENOENT
		case errors.Is(err, fs.ErrExist):
			errno = syscall.EEXIST
		case errors.Is(err, fs.ErrPermission):
			errno = syscall.EACCES
		default:
			errno = syscall.EIO
		}
	}
	return &wire.Error{Code: wire.Code(errno), Message: fmt.Sprintf("%s %s: %s", op, shown, errno.Error())}
}

// renameAt renames with renameat2 on parent descriptors: unlike os.Rename
// it replaces an empty directory, as rename(2) does, and RENAME_NOREPLACE
// is atomic.
func (s *Server) renameAt(oldRel, newRel string, noReplace bool) error {
	var flags uint = 0
	if noReplace {
		flags = unix.RENAME_NOREPLACE
	}
	return s.tree.at(oldRel, func(oldfd int, oldName string) error {
		return s.tree.at(newRel, func(newfd int, newName string) error {
			if err := unix.Renameat2(oldfd, oldName, newfd, newName, flags); err != nil {
				return &fs.PathError{Op: "rename", Path: oldRel, Err: err}
			}
			return nil
		})
	})
}

// utimes sets times without following a final symlink.
func (s *Server) utimes(rel string, atime, mtime int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime), unix.NsecToTimespec(mtime)}
	if rel == "" {
		return s.tree.at("", func(fd int, _ string) error { return unix.UtimesNanoAt(fd, ".", ts, 0) })
	}
	return s.tree.at(rel, func(fd int, name string) error {
		if err := unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "utimes", Path: rel, Err: err}
		}
		return nil
	})
}
