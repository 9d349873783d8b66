package share

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Stages: a file at the share is its old version or its new one, never a
// mix. Writes meant to replace a file's data as a whole (a write-back, a
// close-mode flush, pando put) go to a stage, a hidden file in the share's
// root, and reach the file only when the stage is complete: the commit
// makes the stage durable, reserves the file's space for every byte to
// come (so that a full disk fails it before the file changes), then copies
// the bytes in and sets the size, with reads of the file through the share
// waiting meanwhile. The file keeps its inode, so that agents' caches,
// handles and inode numbers keep naming it. A stage whose handle is closed
// or whose connection is lost is removed; those a stopped share left
// behind are removed when it starts.

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
	ranges []wire.ByteRange // written so far, merged
}

// wrote records n bytes written at off.
func (st *stage) wrote(off, n int64) {
	if n <= 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ranges = mergeRange(st.ranges, wire.ByteRange{Off: off, Len: n})
}

// mergeRange adds r to the sorted, disjoint rs.
func mergeRange(rs []wire.ByteRange, r wire.ByteRange) []wire.ByteRange {
	out := make([]wire.ByteRange, 0, len(rs)+1)
	for _, x := range rs {
		if x.Off+x.Len < r.Off || r.Off+r.Len < x.Off {
			out = append(out, x)
			continue
		}
		end := max(x.Off+x.Len, r.Off+r.Len)
		r.Off = min(x.Off, r.Off)
		r.Len = end - r.Off
	}
	out = append(out, r)
	slices.SortFunc(out, func(a, b wire.ByteRange) int { return int(min(max(a.Off-b.Off, -1), 1)) })
	return out
}

// release closes the handle's files; a stage not committed is removed.
func (h *handle) release(s *Server) error {
	if h.gate != nil {
		h.gate()
	}
	err := h.f.Close()
	if st := h.stage; st != nil {
		st.target.Close()
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
	sh, a, err := s.newStage(req, h)
	if err != nil {
		return rpc.Reply{}, err
	}
	id := s.addHandle(sh)
	return rpc.Reply{Msg: wire.OpenResp{Handle: id, Attr: a}}, nil
}

// newStage makes a stage for the file of h (not registered as a handle).
func (s *Server) newStage(req *rpc.Request, h *handle) (*handle, wire.Attr, error) {
	if !h.writing || h.stage != nil {
		return nil, wire.Attr{}, wire.Errorf(wire.CodeBadHandle, "%s %s: a stage is made for a handle open for writing, not for a read-only handle or another stage", req.Op, "/"+h.rel)
	}
	a, err := fileAttr(h.f)
	if err != nil {
		return nil, a, toWire(req.Op, h.rel, err)
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, a, toWire(req.Op, h.rel, syscall.EISDIR)
	}
	// The file anew, without the handle's O_APPEND (the commit writes at
	// offsets), also when its name is gone.
	target, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", h.f.Fd()), os.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
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

// inlineStage stages the data of an inline commit (see wire.CommitReq)
// for the file of h.
func (s *Server) inlineStage(req *rpc.Request, h *handle, r wire.CommitReq) (*handle, error) {
	var total int64
	for _, rg := range r.Ranges {
		if rg.Off < 0 || rg.Len < 0 || rg.Len > wire.MaxData {
			return nil, wire.Errorf(wire.CodeInvalid, "commit %s: range of %d bytes at %d out of bounds", "/"+h.rel, rg.Len, rg.Off)
		}
		total += rg.Len
	}
	if total != int64(len(req.Data)) {
		return nil, wire.Errorf(wire.CodeInvalid, "commit %s: the ranges hold %d bytes, the request %d", "/"+h.rel, total, len(req.Data))
	}
	if err := checkSum(h.rel, req, r.Sum); err != nil {
		return nil, err
	}
	sh, _, err := s.newStage(req, h)
	if err != nil {
		return nil, err
	}
	data := req.Data
	for _, rg := range r.Ranges {
		if _, err := sh.f.WriteAt(data[:rg.Len], rg.Off); err != nil {
			_ = sh.release(s)
			return nil, toWire(req.Op, h.rel, err)
		}
		sh.stage.wrote(rg.Off, rg.Len)
		data = data[rg.Len:]
	}
	return sh, nil
}

// commit answers OpCommit (see wire.CommitReq).
func (s *Server) commit(req *rpc.Request) (rpc.Reply, error) {
	var r wire.CommitReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Size < 0 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "commit %s: negative size %d", "/"+h.rel, r.Size)
	}
	if r.Inline {
		if h, err = s.inlineStage(req, h, r); err != nil {
			return rpc.Reply{}, err
		}
		defer h.release(s)
	} else if len(req.Data) > 0 || len(r.Ranges) > 0 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "commit %s: data or ranges with a commit that is not inline", "/"+h.rel)
	}
	st := h.stage
	if st == nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeBadHandle, "commit %s: the handle is not a stage (open one with a stage request, or commit inline)", "/"+h.rel)
	}
	ranges, err := s.applyStage(h, holderOf(req), r)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	a, err := fileAttr(st.target)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	fault.Crash("share.commit.after-apply-before-reply")
	if !r.Inline {
		if _, err := s.dropHandle(req, r.Handle); err == nil {
			_ = h.release(s)
		}
	}
	for _, rg := range ranges {
		s.inv.wroteDeleg(invSessionOf(req), h.rel, rg.Off, rg.Len)
	}
	s.changedData(req, h.rel)
	return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
}

// clipRanges cuts rs at size.
func clipRanges(rs []wire.ByteRange, size int64) []wire.ByteRange {
	var out []wire.ByteRange
	for _, r := range rs {
		if r.Off >= size {
			break
		}
		out = append(out, wire.ByteRange{Off: r.Off, Len: min(r.Len, size-r.Off)})
	}
	return out
}

// applyStage copies the ranges written to h's stage into its file and
// sets its size and mtime; it returns the ranges. Everything that can
// fail for want of room fails before the file changes.
func (s *Server) applyStage(h *handle, holder string, r wire.CommitReq) ([]wire.ByteRange, error) {
	st := h.stage
	size := r.Size
	st.mu.Lock()
	ranges := clipRanges(st.ranges, size)
	st.mu.Unlock()
	if r.Sync {
		if err := h.f.Sync(); err != nil {
			return nil, err
		}
	}
	tfd := int(st.target.Fd())
	for _, rg := range ranges {
		err := unix.Fallocate(tfd, unix.FALLOC_FL_KEEP_SIZE, rg.Off, rg.Len)
		if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			break // a file system that cannot reserve: the copy may still fail
		}
		if err != nil {
			// Give back what was reserved beyond the end: the file
			// is as it was.
			var fst unix.Stat_t
			if unix.Fstat(tfd, &fst) == nil {
				_ = unix.Ftruncate(tfd, fst.Size)
			}
			return nil, err
		}
	}
	defer s.commits.commit(h.rel, holder)()
	a, err := fileAttr(st.target)
	if err != nil {
		return nil, err
	}
	if r.KeepLonger && a.Size > size {
		size = a.Size
	}
	if err := s.writeRecord(commitRecord{Stage: st.name, Target: h.rel, Ino: a.Ino, Ranges: ranges, Size: size, Mtime: r.Mtime}, r.Sync); err != nil {
		return nil, err
	}
	defer s.dropRecord(st.name, r.Sync)
	return ranges, copyStage(h.f, st.target, ranges, size, r.Mtime, r.Sync)
}

// commitGate keeps each reader through the share to one version of a
// file: a commit waits (up to readerWait) for the read-only handles other
// clients hold on the file to be closed, new opens of it waiting for the
// commit meanwhile; reads wait while it copies. A reader that keeps its
// handle longer than that may see the file change under it, as a program
// at the share may.
type commitGate struct {
	mu    sync.Mutex
	cond  *sync.Cond
	files map[string]*gateState
}

type gateState struct {
	readers    map[string]int // holder -> read-only handles open
	committing bool           // a commit is under way: opens wait
	copying    bool           // it copies: reads wait
}

// readerWait bounds how long a commit waits for readers to close.
var readerWait = 5 * time.Second

func (c *commitGate) state(rel string) *gateState {
	if c.cond == nil {
		c.cond = sync.NewCond(&c.mu)
		c.files = make(map[string]*gateState)
	}
	g := c.files[rel]
	if g == nil {
		g = &gateState{readers: make(map[string]int)}
		c.files[rel] = g
	}
	return g
}

func (c *commitGate) tidy(rel string, g *gateState) {
	if !g.committing && len(g.readers) == 0 {
		delete(c.files, rel)
	}
}

// open waits for a commit to rel and registers a read-only handle of
// holder on it; done unregisters it.
func (c *commitGate) open(rel, holder string) (done func()) {
	c.mu.Lock()
	g := c.state(rel)
	for g.committing {
		c.cond.Wait()
	}
	g.readers[holder]++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if g.readers[holder]--; g.readers[holder] <= 0 {
			delete(g.readers, holder)
		}
		c.tidy(rel, g)
		c.mu.Unlock()
		c.cond.Broadcast()
	}
}

// read waits for a commit's copy into rel to end before a read of it.
func (c *commitGate) read(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.state(rel)
	for g.copying {
		c.cond.Wait()
	}
	c.tidy(rel, g)
}

// commit waits for another commit to rel, then for the readers other than
// holder to close (up to readerWait), and holds rel (opens and reads
// wait) until done.
func (c *commitGate) commit(rel, holder string) (done func()) {
	c.mu.Lock()
	g := c.state(rel)
	for g.committing {
		c.cond.Wait()
	}
	g.committing = true
	timeout := time.AfterFunc(readerWait, func() {
		c.mu.Lock() // wake the waiter below once its time is up
		c.mu.Unlock()
		c.cond.Broadcast()
	})
	t0 := time.Now()
	for others(g, holder) && time.Since(t0) < readerWait {
		c.cond.Wait()
	}
	timeout.Stop()
	g.copying = true
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		g.committing, g.copying = false, false
		c.tidy(rel, g)
		c.mu.Unlock()
		c.cond.Broadcast()
	}
}

func others(g *gateState, holder string) bool {
	for h := range g.readers {
		if h != holder {
			return true
		}
	}
	return false
}

// holderOf names the client a request comes from, for the gate: its
// agent's session, else its connection.
func holderOf(req *rpc.Request) string {
	if id := invSessionOf(req); id != "" {
		return id
	}
	return fmt.Sprintf("conn-%p", req.Conn)
}
