package share

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// lock takes, releases or tests a byte-range lock for a handle (see
// wire.OpLock): an open-file-description lock on the handle's descriptor,
// so the kernel of the share's machine arbitrates between handles, agents
// and local programs alike, and drops the locks when the handle closes.
func (s *Server) lock(req *rpc.Request) (rpc.Reply, error) {
	var r wire.LockReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Type != wire.LockUnlock {
		// Releasing needs no right: what was taken can always be let go.
		if _, err := s.allow(req, r.Tok, h.rel, auth.Lock); err != nil {
			return rpc.Reply{}, err
		}
	}
	switch {
	case r.Type != wire.LockRead && r.Type != wire.LockWrite && r.Type != wire.LockUnlock:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "unknown lock type %d", r.Type)
	case r.Start < 0 || r.Len < 0 || r.Start > (1<<63-1)-r.Len:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "lock range %d+%d is out of bounds", r.Start, r.Len)
	}
	fl := unix.Flock_t{Type: int16(r.Type), Whence: io.SeekStart, Start: r.Start, Len: r.Len}
	cmd := unix.F_OFD_SETLK
	if r.Test {
		cmd = unix.F_OFD_GETLK
	}
	err = unix.FcntlFlock(h.f.Fd(), cmd, &fl)
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
		return rpc.Reply{}, wire.Errorf(wire.CodeLocked, "/%s: bytes from %d are locked by another holder", h.rel, r.Start)
	case errors.Is(err, unix.EBADF):
		return rpc.Reply{}, wire.Errorf(wire.CodeBadHandle, "/%s: a write lock needs the file open for writing, a read lock open for reading", h.rel)
	case err != nil:
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	if !r.Test {
		return rpc.Reply{Msg: wire.LockResp{Type: r.Type, Start: r.Start, Len: r.Len}}, nil
	}
	return rpc.Reply{Msg: wire.LockResp{Type: uint8(fl.Type), Start: fl.Start, Len: fl.Len}}, nil
}
