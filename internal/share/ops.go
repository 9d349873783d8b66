package share

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Serve dispatches one request, and records a refusal in the audit log.
func (s *Server) Serve(ctx context.Context, req *rpc.Request) (rpc.Reply, error) {
	rep, err := s.serve(ctx, req)
	s.audited(req, err)
	return rep, err
}

func (s *Server) serve(ctx context.Context, req *rpc.Request) (rpc.Reply, error) {
	if int(req.Op) < len(s.counts) {
		s.counts[req.Op].Add(1)
	}
	switch req.Op {
	case wire.OpPing:
		return rpc.Reply{}, nil
	case wire.OpAuth:
		return s.authenticate(req)
	case wire.OpGetAttr, wire.OpUnlink, wire.OpRmdir, wire.OpReadlink, wire.OpStatFS:
		return s.pathOp(req)
	case wire.OpReadDir:
		return s.list(req)
	case wire.OpOpen, wire.OpCreate:
		return s.open(req)
	case wire.OpRead:
		return s.read(req)
	case wire.OpWrite:
		return s.write(req)
	case wire.OpClose, wire.OpFsync, wire.OpFGetAttr:
		return s.handleOp(req)
	case wire.OpLock:
		return s.lock(req)
	case wire.OpTruncate:
		return s.truncate(req)
	case wire.OpRename, wire.OpLink:
		return s.twoPathOp(req)
	case wire.OpMkdir:
		return s.mkdir(req)
	case wire.OpSymlink:
		return s.symlink(req)
	case wire.OpMknod:
		return s.mknod(req)
	case wire.OpSetAttr:
		return s.setattr(req)
	case wire.OpGetXattr:
		return s.getXattr(req)
	case wire.OpListXattr:
		return s.listXattr(req)
	case wire.OpSetXattr:
		return s.setXattr(req)
	case wire.OpRemoveXattr:
		return s.removeXattr(req)
	case wire.OpGetInv:
		return s.getInv(req)
	case wire.OpDelegReturn:
		return s.delegReturn(req)
	case wire.OpValidate:
		return s.validate(req)
	case wire.OpSum:
		return s.sum(req)
	case wire.OpGetFile:
		return s.getFile(req)
	case wire.OpPutFile:
		return s.putFile(req)
	case wire.OpPush:
		return s.push(ctx, req)
	case wire.OpStage:
		return s.openStage(req)
	case wire.OpCommit:
		return s.commit(req)
	case wire.OpTicket:
		return s.issueTicket(req)
	}
	return rpc.Reply{}, wire.Errorf(wire.CodeUnknownOp, "share %s does not serve %s requests", s.cfg.Name, req.Op)
}

func (s *Server) pathOp(req *rpc.Request) (rpc.Reply, error) {
	var r wire.PathReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	need := map[wire.Op]auth.Rights{
		wire.OpGetAttr: auth.List, wire.OpReadlink: auth.List, wire.OpStatFS: auth.List,
		wire.OpUnlink: auth.Delete, wire.OpRmdir: auth.Delete,
	}[req.Op]
	_, rel, err := s.reach(req, r.Tok, r.Path, req.Op == wire.OpStatFS, need)
	if err != nil {
		return rpc.Reply{}, err
	}
	var msg any
	switch req.Op {
	case wire.OpGetAttr:
		var a wire.Attr
		a, err = s.lstat(rel)
		msg = wire.AttrResp{Attr: a}
	case wire.OpReadlink:
		var target string
		target, err = s.tree.readlink(rel)
		msg = wire.ReadlinkResp{Target: target}
	case wire.OpStatFS:
		msg, err = s.statfs()
	case wire.OpUnlink, wire.OpRmdir:
		if err = s.remove(req.Op, rel); err == nil {
			s.changed(req, rel, parentOf(rel))
		}
	}
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	return rpc.Reply{Msg: msg}, nil
}

func (s *Server) remove(op wire.Op, rel string) error {
	if rel == "" {
		return wire.Errorf(wire.CodeBusyRoot, "the root of a share cannot be removed")
	}
	a, err := s.lstat(rel)
	if err != nil {
		return err
	}
	isDir := a.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if op == wire.OpUnlink && isDir {
		return syscall.EISDIR
	}
	if op == wire.OpRmdir && !isDir {
		return syscall.ENOTDIR
	}
	return s.tree.remove(rel, isDir)
}

func (s *Server) open(req *rpc.Request) (rpc.Reply, error) {
	var r wire.OpenReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	rel, err := s.resolve(r.Path, r.Flags&wire.OpenFollow != 0)
	if err != nil {
		return rpc.Reply{}, err
	}
	if rel == "" {
		return rpc.Reply{}, wire.Errorf(wire.CodeIsDir, "the root of share %s is a directory", s.cfg.Name)
	}
	var need auth.Rights
	created := false
	if r.Flags&wire.OpenRead != 0 || r.Flags&(wire.OpenWrite|wire.OpenAppend) == 0 {
		need |= auth.Read
	}
	if r.Flags&(wire.OpenWrite|wire.OpenAppend|wire.OpenTrunc) != 0 {
		need |= auth.Write
	}
	osFlags := 0
	switch {
	case r.Flags&wire.OpenRead != 0 && r.Flags&(wire.OpenWrite|wire.OpenAppend) != 0:
		osFlags = os.O_RDWR
	case r.Flags&(wire.OpenWrite|wire.OpenAppend) != 0:
		osFlags = os.O_WRONLY
	}
	if r.Flags&wire.OpenAppend != 0 {
		osFlags |= os.O_APPEND
	}
	if r.Flags&wire.OpenTrunc != 0 {
		osFlags |= os.O_TRUNC
	}
	if req.Op == wire.OpCreate {
		osFlags |= os.O_CREATE
		if r.Flags&wire.OpenExcl != 0 {
			osFlags |= os.O_EXCL
		}
		// Creating needs insert; opening an existing file for writing needs write.
		if _, err := s.lstat(rel); err != nil {
			need = (need &^ auth.Write) | auth.Insert
			created = true
		} else if r.Flags&wire.OpenExcl != 0 {
			return rpc.Reply{}, toWire(req.Op, rel, fs.ErrExist)
		}
	}
	t, err := s.allowReached(req, r.Tok, r.Path, rel, need)
	if err != nil {
		return rpc.Reply{}, err
	}
	who, err := claim(t, rel, r.Owner, r.Group)
	if err != nil && created {
		return rpc.Reply{}, err
	}
	id := invSessionOf(req)
	if r.Flags&wire.OpenTrunc != 0 && s.inv.delegCount.Load() > 0 {
		if err := s.inv.awaitDeleg(id, rel, wire.ByteRange{}, true); err != nil {
			return rpc.Reply{}, err
		}
	}
	// Opening names a file, never a symlink: the mount's kernel resolves
	// links itself, the CLI asks the share to (OpenFollow, resolved above),
	// and a name that became a link since is refused (O_NOFOLLOW: ELOOP).
	reserved, err := s.reserveHandle(req)
	if err != nil {
		return rpc.Reply{}, err
	}
	// A reader sees one version: a commit to the file waits for it (see
	// commitGate), and it for a commit under way.
	gate := func() {}
	if osFlags&(os.O_WRONLY|os.O_RDWR) == 0 {
		gate = s.commits.open(rel, holderOf(req))
	}
	undo := func() { gate(); reserved() }
	f, err := s.tree.openFile(rel, osFlags, s.realMode(syscall.S_IFREG|r.Mode&0o7777))
	if err == nil && created {
		if err = s.own(t, rel, syscall.S_IFREG|r.Mode&0o7777, 0, who); err != nil {
			f.Close()
		}
	}
	if err != nil {
		undo()
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	a, err := fileAttr(f)
	if err != nil {
		f.Close()
		undo()
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR && osFlags&(os.O_WRONLY|os.O_RDWR) != 0 {
		f.Close()
		undo()
		return rpc.Reply{}, toWire(req.Op, rel, syscall.EISDIR)
	}
	if req.Op == wire.OpCreate || r.Flags&wire.OpenTrunc != 0 {
		s.changed(req, rel, parentOf(rel))
	}
	writing := osFlags&(os.O_WRONLY|os.O_RDWR) != 0
	hid := s.addHandle(&handle{f: f, owner: req.Conn.State.(*session).peer.String(), session: id, conn: req.Conn, rel: rel, flags: r.Flags,
		writing: writing, gate: gate})
	var deleg uint64
	if r.Flags&wire.OpenDeleg != 0 && writing && id != "" && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		deleg = s.grantWrite(req, id, rel, r.Flags&wire.OpenReclaim != 0)
	}
	resp := wire.OpenResp{Handle: hid, Attr: a, Deleg: deleg != 0, DelegID: deleg}
	if r.First == 0 || osFlags&os.O_WRONLY != 0 || a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return rpc.Reply{Msg: resp}, nil
	}
	// The file's first bytes with the open, read as read reads them.
	n := min(r.First, wire.MaxData)
	if s.inv.delegCount.Load() > 0 {
		if s.inv.awaitDeleg(id, rel, wire.ByteRange{Len: int64(n)}, false) != nil {
			return rpc.Reply{Msg: resp}, nil // the open stands; the read says why
		}
	}
	buf, release := rpc.DataBuf(int(n))
	k, sum, err := readSummed(f, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		release()
		return rpc.Reply{Msg: resp}, nil // the open stands; the client reads as usual
	}
	if a, err := fileAttr(f); err == nil {
		resp.Attr = a
	}
	resp.EOF = err != nil
	return rpc.Reply{Msg: resp, Data: buf[:k], Release: release, DataSum: &sum}, nil
}

func (s *Server) read(req *rpc.Request) (rpc.Reply, error) {
	var r wire.ReadReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Length > wire.MaxData {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a read of %d bytes exceeds the limit of %d", r.Length, wire.MaxData)
	}
	if r.Offset < 0 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "negative read offset %d", r.Offset)
	}
	if s.inv.delegCount.Load() > 0 {
		if err := s.inv.awaitDeleg(invSessionOf(req), h.rel, wire.ByteRange{Off: r.Offset, Len: int64(r.Length)}, false); err != nil {
			return rpc.Reply{}, err
		}
	}
	if h.stage == nil {
		s.commits.read(h.rel)
	}
	if req.Conn.CanSendFile() && r.Length >= sendFileMin {
		// A clear data channel: sum the range, then let the kernel send
		// it from its page cache.
		n, sum, err := sumRange(h.f, r.Offset, int(r.Length))
		if err != nil && !errors.Is(err, io.EOF) {
			return rpc.Reply{}, toWire(req.Op, h.rel, err)
		}
		a, _ := fileAttr(h.f)
		return rpc.Reply{Msg: wire.ReadResp{EOF: err != nil, Attr: a}, File: &rpc.FileData{F: h.f, Off: r.Offset, Len: n, Sum: sum}}, nil
	}
	buf, release := rpc.DataBuf(int(r.Length))
	n, sum, err := readSummed(h.f, buf, r.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		release()
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	a, _ := fileAttr(h.f)
	return rpc.Reply{Msg: wire.ReadResp{EOF: err != nil, Attr: a}, Data: buf[:n], Release: release, DataSum: &sum}, nil
}

func (s *Server) write(req *rpc.Request) (rpc.Reply, error) {
	var r wire.WriteReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if !h.writing {
		return rpc.Reply{}, wire.Errorf(wire.CodeBadHandle, "write %s: the file was opened read-only", "/"+h.rel)
	}
	if err := checkSum(h.rel, req, r.Sum); err != nil {
		return rpc.Reply{}, err
	}
	if err := s.stageRoom(h, r.Offset, int64(len(req.Data))); err != nil {
		return rpc.Reply{}, err
	}
	var n int
	if h.flags&wire.OpenAppend != 0 {
		n, err = h.f.Write(req.Data)
	} else {
		if r.Offset < 0 {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "negative write offset %d", r.Offset)
		}
		n, err = h.f.WriteAt(req.Data, r.Offset)
	}
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	if h.stage != nil {
		// Nothing changed yet: the commit applies it.
		h.stage.wrote(r.Offset, int64(n))
		fault.Crash("share.write.after-apply-before-reply")
		return rpc.Reply{Msg: wire.WriteResp{N: uint32(n)}}, nil
	}
	s.inv.wroteDeleg(invSessionOf(req), h.rel, r.Offset, int64(n))
	s.changedData(req, h.rel)
	a, err := fileAttr(h.f)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	fault.Crash("share.write.after-apply-before-reply")
	return rpc.Reply{Msg: wire.WriteResp{N: uint32(n), Attr: a}}, nil
}

func (s *Server) handleOp(req *rpc.Request) (rpc.Reply, error) {
	var r wire.HandleReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if req.Op == wire.OpClose {
		// Closing needs no valid token: an expired session must still be
		// able to release what it holds.
		h, err := s.dropHandle(req, r.Handle)
		if err != nil {
			return rpc.Reply{}, err
		}
		if h.stage != nil && !r.Keep {
			h.stage.discard = true
		}
		if err := h.release(s); err != nil {
			return rpc.Reply{}, toWire(req.Op, h.rel, err)
		}
		return rpc.Reply{}, nil
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if req.Op == wire.OpFGetAttr {
		a, err := fileAttr(h.f)
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, h.rel, err)
		}
		return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
	}
	if err := h.f.Sync(); err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	return rpc.Reply{}, nil
}

func (s *Server) truncate(req *rpc.Request) (rpc.Reply, error) {
	var r wire.TruncateReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if r.Size < 0 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "negative size %d", r.Size)
	}
	var f *os.File
	rel := r.Path
	if r.Handle != 0 {
		h, err := s.tokenHandle(req, r.Tok, r.Handle)
		if err != nil {
			return rpc.Reply{}, err
		}
		if !h.writing {
			return rpc.Reply{}, wire.Errorf(wire.CodeBadHandle, "truncate %s: the file was opened read-only", "/"+h.rel)
		}
		f, rel = h.f, h.rel
	} else {
		var err error
		if _, rel, err = s.reach(req, r.Tok, r.Path, false, auth.Write); err != nil {
			return rpc.Reply{}, err
		}
		f, err = s.tree.openFile(rel, os.O_WRONLY, 0)
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
		defer f.Close()
	}
	if err := f.Truncate(r.Size); err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	s.changedData(req, rel)
	a, err := fileAttr(f)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
}

func (s *Server) twoPathOp(req *rpc.Request) (rpc.Reply, error) {
	var r wire.RenameReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	// A hard link is a second name for the same file, through which it is
	// read and written: making one needs the rights that reading and
	// writing the file need, not only seeing its name.
	oldNeed := auth.Delete
	if req.Op == wire.OpLink {
		oldNeed = auth.List | auth.Read | auth.Write
	}
	_, oldRel, err := s.reach(req, r.Tok, r.Old, false, oldNeed)
	if err != nil {
		return rpc.Reply{}, err
	}
	_, newRel, err := s.reach(req, r.Tok, r.New, false, auth.Insert)
	if err != nil {
		return rpc.Reply{}, err
	}
	if oldRel == "" || newRel == "" {
		return rpc.Reply{}, wire.Errorf(wire.CodeBusyRoot, "the root of a share cannot be renamed or linked")
	}
	if req.Op == wire.OpLink {
		if err := s.tree.link(oldRel, newRel); err != nil {
			return rpc.Reply{}, toWire(req.Op, newRel, err)
		}
		s.changed(req, newRel, parentOf(newRel), oldRel)
		a, err := s.lstat(newRel)
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, newRel, err)
		}
		return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
	}
	if err := s.renameAt(oldRel, newRel, r.NoReplace); err != nil {
		return rpc.Reply{}, toWire(req.Op, oldRel, err)
	}
	s.changed(req, oldRel, newRel, parentOf(oldRel), parentOf(newRel))
	return rpc.Reply{}, nil
}

func (s *Server) setattr(req *rpc.Request) (rpc.Reply, error) {
	var r wire.SetAttrReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	// The mount names the object itself (its kernel follows links before
	// it asks), so a setattr acts on the last name as it is: lutimes on a
	// link; chmod and truncate of a link fail with ELOOP.
	t, rel, err := s.reach(req, r.Tok, r.Path, false, auth.Write)
	if err != nil {
		return rpc.Reply{}, err
	}
	before, berr := s.lstat(rel)
	if err := s.chownAsked(t, rel, r); err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	if r.Valid&wire.SetMode != 0 {
		if err := s.chmodAsked(rel, r.Mode); err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
	}
	if r.Valid&(wire.SetAtime|wire.SetMtime) != 0 {
		cur, err := s.lstat(rel)
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
		at, mt := time.Unix(0, cur.Atime), time.Unix(0, cur.Mtime)
		if r.Valid&wire.SetAtime != 0 {
			at = time.Unix(0, r.Atime)
		}
		if r.Valid&wire.SetMtime != 0 {
			mt = time.Unix(0, r.Mtime)
		}
		if err := s.utimes(rel, at.UnixNano(), mt.UnixNano()); err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
	}
	if r.Valid&wire.SetSize != 0 {
		f, err := s.tree.openFile(rel, os.O_WRONLY, 0)
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
		err = f.Truncate(r.Size)
		f.Close()
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
	}
	s.changed(req, rel)
	a, err := s.lstat(rel)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	resp := wire.AttrResp{Attr: a}
	if berr == nil && r.Valid&(wire.SetSize|wire.SetMtime) == 0 && before.Ino == a.Ino && before.Size == a.Size && before.Mtime == a.Mtime {
		resp.Prior = before.Version
	}
	return rpc.Reply{Msg: resp}, nil
}

// attrReply answers with the attributes of rel.
func (s *Server) attrReply(op wire.Op, rel string) (rpc.Reply, error) {
	a, err := s.lstat(rel)
	if err != nil {
		return rpc.Reply{}, toWire(op, rel, err)
	}
	return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
}
