package share

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Limits of the file contents one listing carries, whatever the client
// asks (ReadDirReq.DataMax, DataBudget): files of at most listFileMax
// bytes, listDataMax bytes in all.
const (
	listFileMax = 1 << 20
	listDataMax = 4 << 20
)

// listData gathers the contents of small files for a listing.
type listData struct {
	fileMax int64
	buf     []byte // the contents so far; cap: the budget, plus one byte
	// may reports whether the content of the entry at rel may be sent
	// (the principal's read right, no write delegation on it).
	may func(rel string) bool
}

// list answers readdir: the entries with their attributes and, if the
// client asks, the contents of the small regular files in it that the
// principal may read, each the bytes of the version its entry reports.
func (s *Server) list(req *rpc.Request) (rpc.Reply, error) {
	var r wire.ReadDirReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	t, rel, err := s.reach(req, r.Tok, r.Path, true, auth.List)
	if err != nil {
		return rpc.Reply{}, err
	}
	var ld *listData
	release := func() {}
	if r.DataMax > 0 && r.DataBudget > 0 {
		budget := int(min(r.DataBudget, listDataMax))
		var buf []byte
		buf, release = rpc.DataBuf(budget + 1)
		ld = &listData{fileMax: int64(min(r.DataMax, listFileMax)), buf: buf[: 0 : budget+1], may: func(rel string) bool {
			return t.RightsAt(rel).Has(auth.Read) && !s.inv.delegated(rel)
		}}
	}
	resp, err := s.readDir(rel, r.After, int(r.Max), ld)
	if err != nil {
		release()
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	if ld == nil || len(ld.buf) == 0 {
		release()
		return rpc.Reply{Msg: resp}, nil
	}
	return rpc.Reply{Msg: resp, Data: ld.buf, Release: release}, nil
}

// add reads the whole content of d's entry name (at rel), whose attributes
// a were just read, after the contents gathered so far, if it is a small
// regular file that fits the budget. It reports whether it did: only if
// the file read is still the one of a, at a's version, so that the bytes
// are that version's.
func (ld *listData) add(d *os.File, name, rel string, a wire.Attr) bool {
	used := len(ld.buf)
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG || a.Size <= 0 || a.Size > ld.fileMax ||
		int64(used)+a.Size+1 > int64(cap(ld.buf)) || !ld.may(rel) {
		return false
	}
	// One byte more than the size: a file that grew is not taken.
	out := ld.buf[used : used+int(a.Size)+1]
	rc, err := d.SyscallConn()
	if err != nil {
		return false
	}
	var b wire.Attr
	n := -1
	if err := rc.Control(func(dfd uintptr) { n, b = readAt(int(dfd), name, out) }); err != nil || n != int(a.Size) {
		return false
	}
	if b.Ino != a.Ino || b.Version != a.Version || b.Size != a.Size || b.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return false // changed while it was read
	}
	if !ld.may(rel) {
		return false // a write delegation granted meanwhile
	}
	ld.buf = ld.buf[:used+int(a.Size)]
	return true
}

// readAt reads the file name of directory dfd into p from its start, and
// returns how many bytes it read (-1 on failure) and the file's attributes
// taken after the read. It opens without following a symlink and without
// blocking (a name that became a FIFO since it was listed).
func readAt(dfd int, name string, p []byte) (int, wire.Attr) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, wire.Attr{}
	}
	defer unix.Close(fd)
	n := 0
	for n < len(p) {
		k, err := unix.Pread(fd, p[n:], int64(n))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return -1, wire.Attr{}
		}
		if k == 0 {
			break
		}
		n += k
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return -1, wire.Attr{}
	}
	return n, shownFd(&st, fd)
}
