package share

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"time"

	"pando.dev/pando/internal/wire"
)

// Write delegations (callback sessions only). One session may hold a write
// delegation on a file that no other agent has open: it keeps the writes
// to itself (write mode back) and answers everything about the file from
// its cache. Any request of another client that touches the file recalls
// the delegation over the holder's long poll and waits: until the holder
// has written the wanted range and set the final size (requests that only
// read, and need none of the bytes still to come, go ahead then), or until
// it has written everything (requests that change the file), or until the
// holder's lease ran out (the delegation is revoked; the holder finds its
// data in conflict when it comes back).
//
// Delegations are listed in a file beside the share's state, so that after
// a restart the share gives their holders a grace period to reclaim them:
// until it ends (or the holder reclaims and is recalled), other clients'
// requests on those files wait.

type wdeleg struct {
	id        uint64 // names it to its holder (0 until a listed one is reclaimed)
	holder    string
	recalling bool
	want      wire.ByteRange
	sent      time.Time // when the recall was last sent
	returned  bool      // first step done: final size at the share
	pending   []wire.ByteRange
	asked     []wire.ByteRange // pending ranges reads wait for, already asked of the holder
	quiet     bool             // changes by the holder during the return, not yet recorded
	wantQ     []wire.ByteRange // ... and not sent to it yet
	reclaim   bool             // listed from before a restart; not reclaimed yet
	// failed is the holder's answer to the recall when it could not
	// write its data back (see DelegReturnReq.Code): requests waiting
	// for the delegation fail with it until the holder returns it.
	failed *wire.Error
}

// Limits of write delegations.
const (
	maxWriteDelegs = 1 << 14
	// graceDelegs is how long a restarted share waits for the holders of
	// the delegations it listed to reclaim them.
	graceDelegs = 5 * time.Second
	// recallResend: a recall not answered for this long is sent again
	// (its reply may have been lost with a connection).
	recallResend = 2 * time.Second
)

// firstBlock is the range wanted first by a request that names no range.
var firstBlock = wire.ByteRange{Off: 0, Len: 1 << 20}

type delegRecord struct {
	Path   string `json:"path"`
	Holder string `json:"holder"`
}

// loadDelegs lists the delegations held before a restart (t.mu not needed:
// called before serving).
func (t *invTable) loadDelegs(file string) {
	t.delegFile = file
	if file == "" {
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	var recs []delegRecord
	if json.Unmarshal(b, &recs) != nil {
		return
	}
	t.grace = t.now().Add(graceDelegs)
	for _, r := range recs {
		if t.wdelegs == nil {
			t.wdelegs = make(map[string]*wdeleg)
		}
		t.wdelegs[r.Path] = &wdeleg{holder: r.Holder, reclaim: true}
	}
	t.delegCount.Store(int32(len(t.wdelegs)))
}

// delegsChanged counts the delegations and rewrites their list (t.mu
// held). The list is not synced: it is for restarts of the share process, which keep the page
// cache; after a machine crash the agents' dirty data is replayed as a
// conflict check instead.
func (t *invTable) delegsChanged() {
	t.delegCount.Store(int32(len(t.wdelegs)))
	if t.delegFile == "" {
		return
	}
	recs := make([]delegRecord, 0, len(t.wdelegs))
	for p, d := range t.wdelegs {
		recs = append(recs, delegRecord{Path: p, Holder: d.holder})
	}
	if len(recs) == 0 {
		_ = os.Remove(t.delegFile)
		return
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Path < recs[j].Path })
	b, _ := json.Marshal(recs)
	tmp := t.delegFile + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, t.delegFile)
	}
}

// grantWrite gives session id a write delegation on path if nobody else
// holds one, and returns its id (0: not granted); reclaim marks the
// reclaim of one held before a restart. The caller has checked that no
// other agent has the file open. A session that holds the delegation
// already is given the same one.
func (t *invTable) grantWrite(id, path string, reclaim bool) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil || !s.callback {
		return 0
	}
	if d := t.wdelegs[path]; d != nil {
		if d.holder != id || d.recalling {
			return 0
		}
		if d.reclaim {
			d.reclaim = false
			d.id = t.nextDelegID()
			t.signal() // requests waiting for the grace period recall it now
		}
		return d.id
	}
	if reclaim && t.now().Before(t.grace) {
		return 0 // it was not listed: someone else may have changed it
	}
	if len(t.wdelegs) >= maxWriteDelegs {
		return 0
	}
	if t.wdelegs == nil {
		t.wdelegs = make(map[string]*wdeleg)
	}
	d := &wdeleg{id: t.nextDelegID(), holder: id}
	t.wdelegs[path] = d
	t.delegsChanged()
	return d.id
}

// nextDelegID names a new delegation (t.mu held): never 0, and never one
// that this share process or an earlier one (another epoch) gave.
func (t *invTable) nextDelegID() uint64 {
	if t.delegSeq == 0 {
		t.delegSeq = t.epoch << 20
	}
	t.delegSeq++
	if t.delegSeq == 0 {
		t.delegSeq++
	}
	return t.delegSeq
}

// delegsNear returns the delegated paths that a request on rel must wait
// for: rel itself and, for a listing, the entries of rel.
func (t *invTable) delegsNear(rel string, listing bool) []string {
	if t.delegCount.Load() == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	if _, ok := t.wdelegs[rel]; ok {
		out = append(out, rel)
	}
	if listing {
		for p := range t.wdelegs {
			if p != rel && parentOf(p) == rel {
				out = append(out, p)
			}
		}
	}
	return out
}

// awaitDeleg returns once session id may go ahead with a request on path:
// nobody else holds a write delegation on it, or the holder has returned
// enough of it (mutate: everything; otherwise the final size and want).
// It fails with the holder's reason when the holder answered the recall
// that it cannot write its data back (see failReturn).
func (t *invTable) awaitDeleg(id, path string, want wire.ByteRange, mutate bool) error {
	for {
		t.mu.Lock()
		d := t.wdelegs[path]
		if d == nil || d.holder == id {
			t.mu.Unlock()
			return nil
		}
		now := t.now()
		var until time.Time
		if d.reclaim {
			if !now.Before(t.grace) {
				delete(t.wdelegs, path)
				t.delegsChanged()
				t.mu.Unlock()
				continue
			}
			until = t.grace
		} else {
			if d.returned && !mutate && !overlapsAny(want, d.pending) {
				t.mu.Unlock()
				return nil
			}
			if d.returned && !mutate && want.Len > 0 && !overlapsAny(want, d.asked) && len(d.asked) < 1024 {
				// A read waits for bytes still to come: have the holder
				// send them next, not in their turn.
				d.asked = append(d.asked, want)
				d.wantQ = append(d.wantQ, want)
				t.signal()
			}
			s := t.sessions[d.holder]
			var exp time.Time
			if s != nil && s.callback && !s.broken {
				exp = s.lastPoll.Add(s.lease + leaseMargin)
			}
			if !now.Before(exp) {
				// The holder has not asked for a lease: it no longer
				// trusts the delegation. Revoke it.
				if s != nil {
					t.markBroken(s, now, "a delegation it held was recalled")
				}
				quiet := d.quiet
				delete(t.wdelegs, path)
				t.delegsChanged()
				t.signal()
				t.mu.Unlock()
				if quiet {
					t.record(d.holder, path) // what it wrote of its return
				}
				return nil
			}
			if d.failed != nil && !d.returned {
				// The holder answered that it cannot write its data
				// back (it is recalled again meanwhile).
				err := d.failed
				t.mu.Unlock()
				return err
			}
			if !d.recalling {
				d.recalling, d.want, d.sent = true, want, time.Time{}
				t.signal() // wake the holder's long poll
			}
			until = exp
		}
		ch := t.wake
		t.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(until.Sub(now)):
		}
	}
}

// recallsFor returns the recalls to send to session id now (t.mu held).
func (t *invTable) recallsFor(id string, now time.Time) []wire.Recall {
	var out []wire.Recall
	for p, d := range t.wdelegs {
		if d.holder == id && d.returned {
			for _, w := range d.wantQ {
				out = append(out, wire.Recall{Path: p, Off: w.Off, Len: w.Len, ID: d.id})
			}
			d.wantQ = nil
			continue
		}
		if d.holder != id || !d.recalling || d.returned {
			continue
		}
		if !d.sent.IsZero() && now.Sub(d.sent) < recallResend {
			continue
		}
		d.sent = now
		out = append(out, wire.Recall{Path: p, Off: d.want.Off, Len: d.want.Len, ID: d.id})
	}
	return out
}

// recallsDue reports whether session id has recalls to be sent (t.mu held).
func (t *invTable) recallsDue(id string, now time.Time) (due bool, next time.Time) {
	for _, d := range t.wdelegs {
		if d.holder == id && len(d.wantQ) > 0 {
			return true, now
		}
		if d.holder != id || !d.recalling || d.returned {
			continue
		}
		at := d.sent.Add(recallResend)
		if d.sent.IsZero() || !now.Before(at) {
			return true, now
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return false, next
}

// returnDeleg applies a DelegReturn of session id; it reports whether
// changes the holder made during the return are still to be recorded.
func (t *invTable) returnDeleg(id, path string, delegID uint64, pending []wire.ByteRange, done bool) (record bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.wdelegs[path]
	if d == nil || d.holder != id || delegID != 0 && d.id != delegID {
		// Not held (any more), or the return of an earlier delegation
		// of the file, answered late: the one held now stays.
		return false
	}
	d.failed = nil
	if done {
		record = d.quiet
		delete(t.wdelegs, path)
		t.delegsChanged()
	} else {
		d.recalling, d.returned = true, true
		d.pending = append([]wire.ByteRange(nil), pending...)
	}
	t.signal()
	return record
}

// failReturn applies a DelegReturn of session id that reports a failure
// to write its data back: the delegation stays the holder's (and is
// recalled again, every recallResend), and the requests waiting for it
// fail with why, at once, until the holder returns it. It reports whether
// id holds a recalled delegation on path.
func (t *invTable) failReturn(id, path string, delegID uint64, why *wire.Error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.wdelegs[path]
	if d == nil || d.holder != id || !d.recalling || d.returned || delegID != 0 && d.id != delegID {
		return false
	}
	d.failed = why
	t.signal()
	return true
}

// delegated reports whether some session holds a write delegation on path.
func (t *invTable) delegated(path string) bool {
	if t.delegCount.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.wdelegs[path]
	return ok
}

// returningBy reports whether session id holds the delegation on path and
// has made its first return step; its change is then noted for the end.
func (t *invTable) returningBy(id, path string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.wdelegs[path]
	if d == nil || d.holder != id || !d.returned {
		return false
	}
	d.quiet = true
	return true
}

// wroteDeleg notes that the holder of a returning delegation wrote
// [off, off+n): those bytes are no longer pending.
func (t *invTable) wroteDeleg(id, path string, off, n int64) {
	if t.delegCount.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.wdelegs[path]
	if d == nil || d.holder != id || !d.returned || n <= 0 {
		return
	}
	d.pending = subtractRange(d.pending, wire.ByteRange{Off: off, Len: n})
	t.signal()
}

// dropDelegs forgets the delegations of session id (it was told to drop
// everything, or it is gone) (t.mu held).
func (t *invTable) dropDelegs(id string) {
	changed := false
	for p, d := range t.wdelegs {
		if d.holder == id && !d.reclaim {
			delete(t.wdelegs, p)
			changed = true
		}
	}
	if changed {
		t.delegsChanged()
		t.signal()
	}
}

func overlapsAny(r wire.ByteRange, rs []wire.ByteRange) bool {
	if r.Len <= 0 {
		return false
	}
	for _, x := range rs {
		if x.Len > 0 && r.Off < x.Off+x.Len && x.Off < r.Off+r.Len {
			return true
		}
	}
	return false
}

// subtractRange removes r from the ranges rs.
func subtractRange(rs []wire.ByteRange, r wire.ByteRange) []wire.ByteRange {
	var out []wire.ByteRange
	end := r.Off + r.Len
	for _, x := range rs {
		xe := x.Off + x.Len
		if xe <= r.Off || x.Off >= end {
			out = append(out, x)
			continue
		}
		if x.Off < r.Off {
			out = append(out, wire.ByteRange{Off: x.Off, Len: r.Off - x.Off})
		}
		if xe > end {
			out = append(out, wire.ByteRange{Off: end, Len: xe - end})
		}
	}
	return out
}

// delegFileFor names the list of delegations of a share's state.
// commitDirFor is where share name keeps its commit records (see
// recordStore), beside its state.
func commitDirFor(stateDir, name string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(stateDir, "share-"+name+".commits")
}

func delegFileFor(stateDir, name string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(stateDir, "share-"+name+".delegations")
}
