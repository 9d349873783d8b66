package share

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
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
	now      func() time.Time
}

type invSession struct {
	recs     []invRec // oldest first, at most capacity
	lost     uint64   // records with stamps up to this were dropped
	lastPoll time.Time
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
)

func newInvTable(now func() time.Time) *invTable {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &invTable{epoch: binary.LittleEndian.Uint64(b[:]) | 1, clock: 1, capacity: invCapacity,
		sessions: make(map[string]*invSession), now: now}
}

// record notes that paths changed, for every session but src (the one that
// made the change and knows it). Changes seen by watching the directory
// have no source: they also echo pando's own changes, which costs their
// maker one revalidation, and is never wrong.
func (t *invTable) record(src string, paths ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range paths {
		t.clock++
		for id, s := range t.sessions {
			if id == src {
				continue
			}
			s.add(invRec{t.clock, p}, t.capacity)
		}
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

// poll returns the paths changed after since for session id.
func (t *invTable) poll(id string, since uint64, max int) (paths []string, stamp uint64, force, again bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for sid, s := range t.sessions {
		if now.Sub(s.lastPoll) > invIdle {
			delete(t.sessions, sid)
		}
	}
	s := t.sessions[id]
	if s == nil {
		if len(t.sessions) >= invMaxSession {
			return nil, t.clock, true, false // no room: the agent revalidates
		}
		s = &invSession{}
		t.sessions[id] = s
		force = true
	}
	s.lastPoll = now
	if since == 0 || since < s.lost || since > t.clock {
		force = true
	}
	if force {
		s.recs = s.recs[:0]
		s.lost = t.clock
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
