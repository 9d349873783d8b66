package share

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Extended attributes, of the user namespace only (wire.XattrTravels).
//
// The xattr system calls take paths, which could leave the root. The
// share opens the file with O_PATH|O_NOFOLLOW in its parent directory,
// itself opened through the root, and names it /proc/self/fd/N: that path
// leads to the very inode the descriptor holds, the link itself for a
// symlink. The path-based calls are used with it because the f* ones
// refuse O_PATH descriptors, and the l* ones would read the /proc link.
// Only regular files and directories carry user attributes, as on Linux:
// other files (symlinks included) have none, and setting one is EPERM.

// xattrFile runs fn on the xattr path of rel (see above), with its stat.
func (s *Server) xattrFile(rel string, fn func(p string, fd int, st *unix.Stat_t) error) error {
	return s.tree.atPath(rel, true, fn)
}

// carriesXattrs reports whether a file of this mode can have user.* attributes.
func carriesXattrs(mode uint32) bool {
	t := mode & syscall.S_IFMT
	return t == syscall.S_IFREG || t == syscall.S_IFDIR
}

func (s *Server) getXattr(req *rpc.Request) (rpc.Reply, error) {
	var r wire.XattrReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := wire.CheckXattrName(r.Name); err != nil {
		return rpc.Reply{}, err
	}
	_, rel, err := s.reach(req, r.Tok, r.Path, false, auth.Read)
	if err != nil {
		return rpc.Reply{}, err
	}
	var val []byte
	err = s.xattrFile(rel, func(p string, _ int, st *unix.Stat_t) error {
		if !carriesXattrs(st.Mode) {
			return syscall.ENODATA
		}
		var err error
		val, err = sized(wire.XattrValueMax, func(buf []byte) (int, error) { return unix.Getxattr(p, r.Name, buf) })
		return err
	})
	if err != nil {
		return rpc.Reply{}, xattrError(req.Op, rel, r.Name, err)
	}
	return rpc.Reply{Msg: wire.XattrResp{Value: val}}, nil
}

// sized returns what fn writes into a buffer large enough for it: one of
// the size fn reports for an empty buffer, then, if the answer grew
// meanwhile (ERANGE), one of max bytes.
func sized(max int, fn func(buf []byte) (int, error)) ([]byte, error) {
	n, err := fn(nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	for {
		n, err = fn(buf)
		if err == nil {
			return buf[:n], nil
		}
		if !errors.Is(err, syscall.ERANGE) || len(buf) >= max {
			return nil, err
		}
		buf = make([]byte, max)
	}
}

func (s *Server) listXattr(req *rpc.Request) (rpc.Reply, error) {
	var r wire.PathReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	_, rel, err := s.reach(req, r.Tok, r.Path, false, auth.Read)
	if err != nil {
		return rpc.Reply{}, err
	}
	var names []string
	err = s.xattrFile(rel, func(p string, _ int, st *unix.Stat_t) error {
		if !carriesXattrs(st.Mode) {
			return nil
		}
		var err error
		names, err = userXattrs(p)
		return err
	})
	if err != nil {
		return rpc.Reply{}, xattrError(req.Op, rel, "", err)
	}
	return rpc.Reply{Msg: wire.ListXattrResp{Names: names}}, nil
}

// userXattrs lists the user.* names of p; the other namespaces stay here.
func userXattrs(p string) ([]string, error) {
	list, err := sized(wire.XattrListMax, func(buf []byte) (int, error) { return unix.Listxattr(p, buf) })
	if err != nil {
		return nil, err
	}
	var names []string
	for _, b := range bytes.Split(list, []byte{0}) {
		if name := string(b); wire.XattrTravels(name) {
			names = append(names, name)
		}
	}
	return names, nil
}

func (s *Server) setXattr(req *rpc.Request) (rpc.Reply, error) {
	var r wire.SetXattrReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := wire.CheckXattrName(r.Name); err != nil {
		return rpc.Reply{}, err
	}
	if len(r.Value) > wire.XattrValueMax {
		return rpc.Reply{}, wire.Errorf(wire.CodeTooBig, "a value of %d bytes for extended attribute %s exceeds the limit of %d", len(r.Value), r.Name, wire.XattrValueMax)
	}
	if err := wire.CheckXattrFlags(r.Flags); err != nil {
		return rpc.Reply{}, err
	}
	return s.changeXattr(req, r.Tok, r.Path, r.Name, func(p string) error { return unix.Setxattr(p, r.Name, r.Value, int(r.Flags)) })
}

func (s *Server) removeXattr(req *rpc.Request) (rpc.Reply, error) {
	var r wire.XattrReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := wire.CheckXattrName(r.Name); err != nil {
		return rpc.Reply{}, err
	}
	return s.changeXattr(req, r.Tok, r.Path, r.Name, func(p string) error { return unix.Removexattr(p, r.Name) })
}

// changeXattr applies change to rel's attributes after checking the write
// right, records the change (the file's ctime, its version, moved on) and
// answers with the file's attributes.
func (s *Server) changeXattr(req *rpc.Request, tok uint32, named, name string, change func(p string) error) (rpc.Reply, error) {
	_, rel, err := s.reach(req, tok, named, false, auth.Write)
	if err != nil {
		return rpc.Reply{}, err
	}
	var a wire.Attr
	err = s.xattrFile(rel, func(p string, fd int, st *unix.Stat_t) error {
		if !carriesXattrs(st.Mode) {
			return wire.Errorf(wire.CodePerm, "%s /%s: only regular files and directories carry user extended attributes", req.Op, rel)
		}
		if err := change(p); err != nil {
			return err
		}
		if err := unix.Fstat(fd, st); err != nil {
			return err
		}
		a = shown(st, pathGetter(p))
		return nil
	})
	if err != nil {
		return rpc.Reply{}, xattrError(req.Op, rel, name, err)
	}
	s.changed(req, rel)
	return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
}

// xattrError says what an xattr call's errno means for the attribute.
func xattrError(op wire.Op, rel, name string, err error) *wire.Error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return toWire(op, rel, err)
	}
	shown := "/" + rel
	var msg string
	switch errno {
	case syscall.ENODATA:
		msg = "no extended attribute " + name
	case syscall.EEXIST:
		msg = "extended attribute " + name + " exists already"
	case syscall.EOPNOTSUPP:
		msg = "the share's file system does not store user extended attributes"
	case syscall.ENOSPC, syscall.E2BIG:
		msg = "no room for this value of " + name + " on the share's file system (some hold only small values)"
	default:
		return toWire(op, rel, err)
	}
	return &wire.Error{Code: wire.Code(errno), Message: fmt.Sprintf("%s %s: %s", op, shown, msg)}
}
