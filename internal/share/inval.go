package share

import (
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/wire"
)

// invTable keeps, per agent session, a bounded circular buffer of the
// paths that changed, stamped with a logical clock (GVFS's invalidation
// buffers). Agents poll it with the last stamp they saw; a session that
// fell behind its buffer, a new session and a restarted share (new epoch)
// are told to drop everything instead.
type invTable struct {
	mu       sync.Mutex
	epoch    uint64
	clock    uint64
	capacity int
	sessions map[string]*invSession
	// callbacks counts the callback sessions, so that requests need not
	// take the lock to grant holds when there are none.
	callbacks atomic.Int32
	now       func() time.Time
	// wake is closed (and replaced) whenever records are added or a
	// session acknowledges: long polls and recalls wait on it.
	wake chan struct{}
	// recent remembers who changed a path through the share, so that the
	// directory watcher's echo of that change is not sent back to its
	// maker as news.
	recent map[string]maker

	// Write delegations (deleg.go): by share-relative path.
	wdelegs    map[string]*wdeleg
	delegCount atomic.Int32
	delegFile  string
	delegSeq   uint64    // the last delegation id given
	grace      time.Time // until then, listed delegations may be reclaimed

	log *slog.Logger // may be nil
}

type maker struct {
	src string
	at  time.Time
}

// echoWindow is how long after a change through the share a change the
// watcher sees on the same path is taken for its echo.
const echoWindow = 2 * time.Second

type invSession struct {
	id       string
	recs     []invRec // oldest first, at most capacity
	lost     uint64   // records with stamps up to this were dropped
	lastPoll time.Time
	// Callback sessions long-poll; changes wait for their acknowledgement.
	callback bool
	lease    time.Duration
	acked    uint64 // every record up to this stamp was acknowledged
	owed     uint64 // a change waits until it acknowledges up to this stamp
	broken   bool   // missed a recall: its next poll is told to drop everything
	// holds are the paths a callback session may have cached (read
	// delegations): only their changes are recalled from it. A hold on a
	// directory covers its listing and its entries. all: too many to
	// track, every change is recalled.
	holds map[string]struct{}
	all   bool
}

// maxHolds bounds the delegations tracked per session.
const maxHolds = 1 << 18

// hold grants session id a read delegation on path. It must be called
// before what the session is told about path is read, so that a change
// racing with the read is recalled.
func (t *invTable) hold(id, path string) {
	if t.callbacks.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil || !s.callback || s.all {
		return
	}
	if len(s.holds) >= maxHolds {
		s.all, s.holds = true, nil
		return
	}
	if s.holds == nil {
		s.holds = make(map[string]struct{})
	}
	s.holds[path] = struct{}{}
}

// recalled reports whether a change of p concerns callback session s, and
// gives up the delegations it breaks (s must fetch again to hold again).
// A change of an entry breaks the hold on its directory too: the listing
// showed the entry's attributes.
func (s *invSession) recalled(p string) (self, dir bool) {
	if s.all {
		return true, p != ""
	}
	if _, ok := s.holds[p]; ok {
		self = true
		delete(s.holds, p)
	}
	if p != "" {
		if _, ok := s.holds[parentOf(p)]; ok {
			self, dir = true, true
			delete(s.holds, parentOf(p))
		}
	}
	return self, dir
}

type invRec struct {
	stamp uint64
	path  string
}

// Limits of the invalidation state, per share.
const (
	invCapacity   = 4096             // records per session
	invMaxSession = 4096             // sessions
	invIdle       = 30 * time.Minute // a session not polled for this long is forgotten
	maxLease      = 30 * time.Second // the longest lease a callback session may ask
	maxWait       = 30 * time.Second // the longest a long poll is held
	leaseMargin   = 500 * time.Millisecond
)

func newInvTable(now func() time.Time) *invTable {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &invTable{epoch: binary.LittleEndian.Uint64(b[:]) | 1, clock: 1, capacity: invCapacity,
		sessions: make(map[string]*invSession), now: now, wake: make(chan struct{})}
}

// record notes that paths changed, for every session but src (the one that
// made the change and knows it). Changes seen by watching the directory
// have no source: they also echo pando's own changes, which costs their
// maker one revalidation, and is never wrong.
// Callback sessions get only the records of paths they hold. It returns
// the stamp of the last record and the callback sessions that must
// acknowledge it.
func (t *invTable) record(src string, paths ...string) (uint64, []*invSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var recall []*invSession
	if t.recent == nil || len(t.recent) > 65536 {
		t.recent = make(map[string]maker)
	}
	for _, p := range paths {
		t.clock++
		if src != "" {
			t.recent[p] = maker{src, now}
		}
		for id, s := range t.sessions {
			if id == src {
				continue
			}
			if !s.callback {
				s.add(invRec{t.clock, p}, t.capacity)
				continue
			}
			self, dir := s.recalled(p)
			if !self {
				// It does not hold p now, but a recall it has not yet
				// acknowledged may have taken its hold (the watcher's
				// echo, say): until it acknowledges, it may still answer
				// from what it cached, so this change waits for it too.
				if n := len(s.recs); n > 0 && s.recs[n-1].stamp > s.acked {
					recall = append(recall, s)
				}
				continue
			}
			s.add(invRec{t.clock, p}, t.capacity)
			if dir {
				s.add(invRec{t.clock, parentOf(p)}, t.capacity)
			}
			recall = append(recall, s)
		}
	}
	for _, s := range recall {
		s.owed = max(s.owed, t.clock)
	}
	t.signal()
	return t.clock, recall
}

// recordLocal records changes the directory watcher saw; one that echoes
// a recent change through the share is not sent back to its maker.
func (t *invTable) recordLocal(paths ...string) {
	t.mu.Lock()
	now := t.now()
	bySrc := make(map[string][]string)
	for _, p := range paths {
		src := ""
		if m, ok := t.recent[p]; ok && now.Sub(m.at) < echoWindow {
			src = m.src
		}
		bySrc[src] = append(bySrc[src], p)
	}
	t.mu.Unlock()
	for src, ps := range bySrc {
		t.record(src, ps...)
	}
}

// signal wakes everyone waiting on the table (t.mu held).
func (t *invTable) signal() {
	close(t.wake)
	t.wake = make(chan struct{})
}

// waitAcked returns once every callback session but src has acknowledged
// the records up to stamp (the recall is done), or has gone its lease
// without asking; those are marked broken and will drop their whole cache.
func (t *invTable) waitAcked(stamp uint64, recalled []*invSession) {
	if len(recalled) == 0 {
		return
	}
	for {
		t.mu.Lock()
		now := t.now()
		var late []*invSession
		var until time.Time
		for _, s := range recalled {
			if !s.callback || s.broken || s.acked >= stamp {
				continue
			}
			exp := s.lastPoll.Add(s.lease + leaseMargin)
			if !now.Before(exp) {
				// Its agent has not asked for a lease: it trusts nothing
				// now, and will be told to drop everything.
				t.markBroken(s, now, "a change waited for its acknowledgement")
				continue
			}
			late = append(late, s)
			if exp.After(until) {
				until = exp
			}
		}
		if len(late) == 0 {
			t.mu.Unlock()
			return
		}
		ch := t.wake
		t.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(until.Sub(now)):
		}
	}
}

// markBroken notes that callback session s went its lease without asking
// (t.mu held): it trusts nothing now and will be told to drop everything.
func (t *invTable) markBroken(s *invSession, now time.Time, why string) {
	s.broken = true
	if t.log != nil {
		t.log.Warn("a callback session went its lease without asking; it will drop everything it cached",
			"session", s.id, "since_last_poll", now.Sub(s.lastPoll).Round(time.Millisecond), "lease", s.lease, "when", why)
	}
}

func (s *invSession) add(r invRec, capacity int) {
	if n := len(s.recs); n > 0 && s.recs[n-1].path == r.path {
		s.recs[n-1] = r // coalesce repeats
		return
	}
	s.recs = append(s.recs, r)
	if len(s.recs) > capacity {
		// Drop the oldest quarter at once, so that the copy is rare.
		drop := len(s.recs) - capacity + capacity/4
		s.lost = s.recs[drop-1].stamp
		s.recs = append(make([]invRec, 0, capacity+1), s.recs[drop:]...)
	}
}

// longPoll is poll for callback sessions: with nothing to report it waits
// up to wait for a change. Each call acknowledges the records up to since.
func (t *invTable) longPoll(id string, since uint64, max int, wait, lease time.Duration) (paths []string, recalls []wire.Recall, stamp uint64, force, again bool) {
	wait, lease = min(wait, maxWait), min(lease, maxLease)
	deadline := time.Now().Add(wait)
	for first := true; ; first = false {
		if !first && wait > 0 && t.ended(id) {
			// The session ended its callbacks meanwhile (its agent
			// stopped): this poll must not declare it a callback session
			// again. Its answer goes nowhere.
			return nil, nil, since, false, false
		}
		paths, stamp, force, again = t.poll(id, since, max, wait > 0, lease)
		t.mu.Lock()
		if !force {
			recalls = t.recallsFor(id, t.now())
		}
		ch := t.wake
		pending := stamp != t.clock
		_, resend := t.recallsDue(id, t.now())
		// A change waits for this session although nothing new concerns
		// it (a recall it had not acknowledged yet when the change was
		// made): answer now, so that its next poll acknowledges the
		// change, instead of at the end of the wait.
		owed := false
		if s := t.sessions[id]; s != nil && s.owed > since {
			owed = true
		}
		t.mu.Unlock()
		if force || len(paths) > 0 || len(recalls) > 0 || wait <= 0 {
			return
		}
		left := time.Until(deadline)
		if pending || left <= 0 {
			if left <= 0 {
				return
			}
			continue
		}
		if owed {
			return
		}
		if !resend.IsZero() {
			// Wake up to send again a recall left unanswered.
			left = min(left, time.Until(resend)+time.Millisecond)
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// ended reports whether session id is no callback session (any more).
func (t *invTable) ended(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	return s == nil || !s.callback
}

// poll returns the paths changed after since for session id.
func (t *invTable) poll(id string, since uint64, max int, callback bool, lease time.Duration) (paths []string, stamp uint64, force, again bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for sid, s := range t.sessions {
		if now.Sub(s.lastPoll) > invIdle {
			if s.callback {
				t.callbacks.Add(-1)
			}
			delete(t.sessions, sid)
			t.dropDelegs(sid)
		}
	}
	s := t.sessions[id]
	if s == nil {
		if len(t.sessions) >= invMaxSession {
			return nil, t.clock, true, false // no room: the agent revalidates
		}
		s = &invSession{id: id}
		t.sessions[id] = s
		force = true
	}
	s.lastPoll = now
	if callback != s.callback {
		if callback {
			t.callbacks.Add(1)
		} else {
			t.callbacks.Add(-1)
			// Its agent said goodbye (a poll without wait): wake its
			// long poll still held, which then ends.
			defer t.signal()
		}
	}
	s.callback, s.lease = callback, lease
	if since == 0 || since < s.lost || since > t.clock || s.broken {
		force = true
	}
	if !force && since > s.acked {
		s.acked = since
		t.signal()
	}
	if force {
		if s.broken {
			// It went its lease without asking: it trusts no delegation.
			t.dropDelegs(id)
		}
		s.recs = s.recs[:0]
		s.lost = t.clock
		s.broken = false
		s.holds, s.all = nil, false // it drops everything: it holds nothing
		return nil, t.clock, true, false
	}
	// What the agent has seen (stamps up to since) can go.
	k := 0
	for k < len(s.recs) && s.recs[k].stamp <= since {
		k++
	}
	s.recs = s.recs[k:]
	seen := make(map[string]bool)
	stamp = since
	for _, r := range s.recs {
		if r.stamp <= since {
			continue
		}
		if max > 0 && len(paths) >= max {
			return paths, stamp, false, true
		}
		if !seen[r.path] {
			seen[r.path] = true
			paths = append(paths, r.path)
		}
		stamp = r.stamp
	}
	return paths, t.clock, false, false
}

// parentOf is the share-relative parent directory of rel ("" for the root).
func parentOf(rel string) string {
	dir, _ := splitRel(rel)
	return dir
}
