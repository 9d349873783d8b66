package share

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Stages: a file at the share is its old version or its new one, never a
// mix. Writes meant to replace a file's data as a whole (a write-back, a
// close-mode flush, pando put) go to a stage, a hidden file in the share's
// root (or, up to a frame, come with the commit itself), and reach the file
// only when complete: the commit (commit.go) reserves the file's space for
// every byte to come (so that a full disk fails it before the file
// changes), records what it does (commitlog.go), then copies the bytes in
// and sets the size, with readers through the share kept to one version
// (gate.go). The file keeps its inode, so that agents' caches, handles and
// inode numbers keep naming it. A stage whose handle is closed or whose
// connection is lost is removed (but for a named stage: named.go); those
// a stopped share left behind are removed when it starts.

// stagePrefix names stages in the share's root.
const stagePrefix = ".pando-stage-"

// isStaging reports whether rel names a stage or a commit record: the
// share's own files, not changes anyone should hear of.
func isStaging(rel string) bool {
	return strings.HasPrefix(rel, stagePrefix) || strings.HasPrefix(rel, journalPrefix)
}

// stage is the state of a handle opened by OpStage.
type stage struct {
	target *os.File // the file, opened anew (no O_APPEND) from the handle's descriptor
	name   string   // the stage's name in the root
	mu     sync.Mutex
	ranges []wire.ByteRange // written so far, merged (a named stage keeps them in named)
	// named is the named stage the handle is attached to, if any;
	// discard (set by a close without Keep, or a commit) throws it away
	// when the handle is released, which otherwise keeps it.
	named   *namedStage
	discard bool
}

// wrote records n bytes written at off.
func (st *stage) wrote(off, n int64) {
	if n <= 0 {
		return
	}
	if ns := st.named; ns != nil {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		ns.ranges = remote.AddRange(ns.ranges, wire.ByteRange{Off: off, Len: n})
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ranges = remote.AddRange(st.ranges, wire.ByteRange{Off: off, Len: n})
}

// written returns the ranges written so far.
func (st *stage) written() []wire.ByteRange {
	if ns := st.named; ns != nil {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		return slices.Clone(ns.ranges)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.ranges)
}

// release closes the handle's files; a stage not committed is removed.
func (h *handle) release(s *Server) error {
	if h.gate != nil {
		h.gate()
	}
	err := h.f.Close()
	if st := h.stage; st != nil {
		st.target.Close()
		if st.named != nil {
			s.detachStage(st.named, st.discard)
			return err
		}
		if rerr := s.tree.remove(st.name, false); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			s.log.Warn("cannot remove a stage", "stage", st.name, "err", rerr)
		}
	}
	return err
}

// sweepStages removes the stages a stopped share left in its root.
func (s *Server) sweepStages() {
	d, err := s.tree.openDir("")
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		if strings.HasPrefix(n, stagePrefix) {
			if err := s.tree.remove(n, false); err != nil {
				s.log.Warn("cannot remove a stage left by an earlier run", "stage", n, "err", err)
			}
		}
	}
}

// openStage answers OpStage: a stage for the file of a writable handle.
func (s *Server) openStage(req *rpc.Request) (rpc.Reply, error) {
	var r wire.HandleReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	// A stage's handle counts against its principal's open files.
	undo, err := s.reserveHandle(req)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Name != "" {
		rep, err := s.attachStage(req, h, r.Name)
		if err != nil {
			undo()
		}
		return rep, err
	}
	sh, a, err := s.newStage(req, h)
	if err != nil {
		undo()
		return rpc.Reply{}, err
	}
	id := s.addHandle(sh)
	return rpc.Reply{Msg: wire.OpenResp{Handle: id, Attr: a}}, nil
}

// newStage makes a stage for the file of h (not registered as a handle).
func (s *Server) newStage(req *rpc.Request, h *handle) (*handle, wire.Attr, error) {
	target, err := s.targetOf(req, h)
	if err != nil {
		return nil, wire.Attr{}, err
	}
	a, err := fileAttr(target)
	if err != nil {
		target.Close()
		return nil, a, toWire(req.Op, h.rel, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := stagePrefix + hex.EncodeToString(rnd[:])
	f, err := s.tree.openFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		target.Close()
		return nil, a, toWire(req.Op, h.rel, err)
	}
	return &handle{f: f, owner: h.owner, session: h.session, conn: req.Conn, rel: h.rel, flags: wire.OpenWrite, writing: true,
		stage: &stage{target: target, name: name}}, a, nil
}
