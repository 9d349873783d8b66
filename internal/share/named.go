package share

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"sync"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Named stages. A stage asked for by name (wire.HandleReq.Name) outlives
// its handle, its connection and its client's restart: an agent that
// sends a large file ahead of its close (to make room in its cache) puts
// the parts into a stage it names and records, attaches to it again for
// each part and for the commit, and after a restart finds it again (the
// ranges it holds come with the attach) to finish it or throw it away.
//
// A name is the client's, and hostile input: it is checked (length and
// characters), never used as a path (the stage's file is named by a hash
// of the principal and the name), and looked up among the stages of the
// request's principal only: another principal's stage of the same name
// is another stage, which it can neither see, attach, write nor commit.
// A stage is attached through a handle open for writing on its file: the
// share's rights checks are those of that handle, and a stage attached
// through a handle of another file is refused. Each principal keeps at
// most Limits.Stages of them, with Limits.StageBytes written to them all
// together; past either the request is refused (EDQUOT) and nothing
// changes. A stage nobody has attached for Limits.StageIdle is removed,
// as are all of them when the share starts (a client attaching then
// finds an empty stage, and sends everything again or gives up).

// namedPrefix names the files of named stages in the share's root.
const namedPrefix = stagePrefix + "n-"

// namedStage is a stage kept by name for a principal.
type namedStage struct {
	key   string // namedKey(owner, name)
	owner string
	name  string // the client's name for it
	file  string // its file in the root
	ino   uint64 // the inode of the file it is for
	rel   string // that file's path when made, for logs

	// Guarded by the server's mu.
	users int // handles attached
	timer *time.Timer

	mu     sync.Mutex
	ranges []wire.ByteRange // written, merged
	gone   bool             // thrown away, committed or expired (set under the server's mu too)
}

func (ns *namedStage) isGone() bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.gone
}

func (ns *namedStage) bytes() int64 {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var n int64
	for _, r := range ns.ranges {
		n += r.Len
	}
	return n
}

func namedKey(owner, name string) string { return owner + "\x00" + name }

// checkStageName refuses a name that is empty, too long, or holds
// anything but letters, digits, '.', '_' and '-'.
func checkStageName(name string) error {
	if len(name) > wire.MaxStageName {
		return wire.Errorf(wire.CodeInvalid, "the stage name of %d bytes is too long: name a stage with at most %d letters, digits, '.', '_' or '-'", len(name), wire.MaxStageName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return wire.Errorf(wire.CodeInvalid, "the stage name %q holds a character other than letters, digits, '.', '_' or '-': name it with those only", name)
		}
	}
	return nil
}

// attachStage answers OpStage with a name: the principal's stage of that
// name for the file of h, made if it has none.
func (s *Server) attachStage(req *rpc.Request, h *handle, name string) (rpc.Reply, error) {
	if err := checkStageName(name); err != nil {
		return rpc.Reply{}, err
	}
	target, err := s.targetOf(req, h)
	if err != nil {
		return rpc.Reply{}, err
	}
	a, err := fileAttr(target)
	if err != nil {
		target.Close()
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	ns, f, err := s.namedFor(h, name, a.Ino)
	if err != nil {
		target.Close()
		return rpc.Reply{}, err
	}
	ns.mu.Lock()
	ranges := slices.Clone(ns.ranges)
	ns.mu.Unlock()
	sh := &handle{f: f, owner: h.owner, session: h.session, conn: req.Conn, rel: h.rel, flags: wire.OpenWrite, writing: true,
		stage: &stage{target: target, name: ns.file, named: ns}}
	id := s.addHandle(sh)
	return rpc.Reply{Msg: wire.OpenResp{Handle: id, Attr: a, Ranges: ranges}}, nil
}

// namedFor finds or makes the stage name of h's principal for the file of
// inode ino, counts one more user of it and opens its file.
func (s *Server) namedFor(h *handle, name string, ino uint64) (*namedStage, *os.File, error) {
	key := namedKey(h.owner, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.named[key]
	if ns != nil && ns.ino != ino {
		return nil, nil, wire.Errorf(wire.CodeInvalid, "the stage %q is for another file (/%s), not /%s: name another stage, or close that one", name, ns.rel, h.rel)
	}
	if ns == nil {
		count, bytes := s.stagesOfLocked(h.owner)
		if count >= s.limits.Stages {
			return nil, nil, wire.Errorf(wire.CodeAgain, "%s keeps %d stages at share %s, the limit: commit or close some, and try again (a stage nobody attaches is removed after %s)", h.owner, count, s.cfg.Name, s.limits.StageIdle)
		}
		if bytes >= s.limits.StageBytes {
			return nil, nil, wire.Errorf(wire.CodeQuota, "%s keeps %s in stages at share %s, the limit: commit or close some (a stage nobody attaches is removed after %s)", h.owner, mib(bytes), s.cfg.Name, s.limits.StageIdle)
		}
		sum := sha256.Sum256([]byte(key))
		ns = &namedStage{key: key, owner: h.owner, name: name, file: namedPrefix + hex.EncodeToString(sum[:16]), ino: ino, rel: h.rel}
		f, err := s.tree.openFile(ns.file, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, nil, toWire(wire.OpStage, h.rel, err)
		}
		s.named[key] = ns
		ns.users++
		return ns, f, nil
	}
	f, err := s.tree.openFile(ns.file, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, toWire(wire.OpStage, h.rel, err)
	}
	if ns.timer != nil {
		ns.timer.Stop()
		ns.timer = nil
	}
	ns.users++
	return ns, f, nil
}

// stagesOfLocked counts the named stages of owner and the bytes written
// to them (s.mu held).
func (s *Server) stagesOfLocked(owner string) (int, int64) {
	var count int
	var bytes int64
	for _, ns := range s.named {
		if ns.owner == owner {
			count++
			bytes += ns.bytes()
		}
	}
	return count, bytes
}

// stageRoom refuses a write of n bytes at off to the handle h, if h is
// attached to a named stage, when its principal's stages would hold more
// than Limits.StageBytes with it.
func (s *Server) stageRoom(h *handle, off, n int64) error {
	if h.stage == nil || h.stage.named == nil || n <= 0 {
		return nil
	}
	ns := h.stage.named
	ns.mu.Lock()
	before := int64(0)
	for _, r := range ns.ranges {
		before += r.Len
	}
	var after int64
	for _, r := range remote.AddRange(ns.ranges, wire.ByteRange{Off: off, Len: n}) {
		after += r.Len
	}
	ns.mu.Unlock()
	if after == before {
		return nil
	}
	s.mu.Lock()
	_, bytes := s.stagesOfLocked(h.owner)
	s.mu.Unlock()
	if bytes+after-before > s.limits.StageBytes {
		return wire.Errorf(wire.CodeQuota, "write %s: %s keeps %s in stages at share %s, and this write would pass the limit of %s; commit or close some stages",
			"/"+h.rel, h.owner, mib(bytes), s.cfg.Name, mib(s.limits.StageBytes))
	}
	return nil
}

// detachStage counts a handle of ns released: thrown away with discard
// (or if it is gone already), else kept for Limits.StageIdle after its
// last user.
func (s *Server) detachStage(ns *namedStage, discard bool) {
	s.mu.Lock()
	ns.users--
	if discard {
		s.dropNamedLocked(ns)
	}
	if !ns.gone && ns.users == 0 {
		ns.timer = time.AfterFunc(s.limits.StageIdle, func() { s.expireStage(ns) })
	}
	s.mu.Unlock()
}

// expireStage removes ns if nobody attached it since its timer was set.
func (s *Server) expireStage(ns *namedStage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns.users == 0 && !ns.gone {
		s.log.Info("a stage nobody attached for a while is removed", "principal", ns.owner, "stage", ns.name, "file", "/"+ns.rel, "idle", s.limits.StageIdle)
		s.dropNamedLocked(ns)
	}
}

// dropNamedLocked forgets ns and removes its file (s.mu held); handles
// still attached keep reading it, and can no longer commit it.
func (s *Server) dropNamedLocked(ns *namedStage) {
	ns.mu.Lock()
	already := ns.gone
	ns.gone = true
	ns.mu.Unlock()
	if already {
		return
	}
	if s.named[ns.key] == ns {
		delete(s.named, ns.key)
	}
	if ns.timer != nil {
		ns.timer.Stop()
		ns.timer = nil
	}
	if err := s.tree.remove(ns.file, false); err != nil && !os.IsNotExist(err) {
		s.log.Warn("cannot remove a stage", "stage", ns.file, "err", err)
	}
}

// stopStageTimers stops the expiry of every named stage (the share is
// closing; its next start removes them).
func (s *Server) stopStageTimers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range s.named {
		if ns.timer != nil {
			ns.timer.Stop()
			ns.timer = nil
		}
	}
}
