package share

import (
	"io/fs"
	"syscall"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Requests that make a new entry: a directory, a special file, a symlink.

func (s *Server) mkdir(req *rpc.Request) (rpc.Reply, error) {
	var r wire.MkdirReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	return s.newEntry(req, r.Tok, r.Path, syscall.S_IFDIR|r.Mode&0o7777, 0, r.Owner, r.Group, func(rel string) error { return s.tree.mkdir(rel, s.safeMode(r.Mode)) })
}

// mknod makes a FIFO, a socket or an empty regular file. Devices are
// refused: a client never makes a device node on the share's host.
func (s *Server) mknod(req *rpc.Request) (rpc.Reply, error) {
	var r wire.MknodReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	real := r.Mode&syscall.S_IFMT | s.realMode(r.Mode)
	switch r.Mode & syscall.S_IFMT {
	case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFREG:
	case syscall.S_IFCHR, syscall.S_IFBLK:
		// A record: an empty regular file (see special.go).
		real = syscall.S_IFREG | s.realMode(r.Mode)
	default:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "mknod: mode %#o is no FIFO, socket, device or regular file", r.Mode)
	}
	mode := r.Mode&syscall.S_IFMT | r.Mode&0o7777
	return s.newEntry(req, r.Tok, r.Path, mode, r.Rdev, r.Owner, r.Group, func(rel string) error { return s.tree.mknod(rel, real) })
}

func (s *Server) symlink(req *rpc.Request) (rpc.Reply, error) {
	var r wire.SymlinkReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if len(r.Target) == 0 || len(r.Target) > 4096 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "symlink target must be 1 to 4096 bytes")
	}
	return s.newEntry(req, r.Tok, r.Path, 0, 0, r.Owner, r.Group, func(rel string) error { return s.tree.symlink(r.Target, rel) })
}

// newEntry creates a directory entry with create, after checking the
// insert right and the owner and group asked (see claim), and answers
// with its attributes.
func (s *Server) newEntry(req *rpc.Request, tok uint32, named string, mode, rdev uint32, owner, group string, create func(rel string) error) (rpc.Reply, error) {
	t, rel, err := s.reach(req, tok, named, false, auth.Insert)
	if err != nil {
		return rpc.Reply{}, err
	}
	if rel == "" {
		return rpc.Reply{}, toWire(req.Op, rel, fs.ErrExist)
	}
	who, err := claim(t, rel, owner, group)
	if err != nil {
		return rpc.Reply{}, err
	}
	if err := create(rel); err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	if err := s.own(t, rel, mode, rdev, who); err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	s.changed(req, rel, parentOf(rel))
	return s.attrReply(req.Op, rel)
}
