package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/wire"
)

// Write delegations (write mode back, under callback). When the share
// grants one with a writable open, no other agent has the file open and
// none will use it without the share recalling the delegation first, so
// this agent keeps the file's writes to itself: close returns once the data
// is in the persistent cache. The data goes to the share when the share
// recalls the delegation (the range the other agent wants first, then the
// rest), backDelay after the last close, before an unlink or rename of the
// file through this agent, and when the agent stops. The delegation is
// trusted only while the back channel's lease is; without it, closes write
// back as in close mode.

// backDelay is how long written data is kept back after the last close of
// a delegated file before it is sent anyway.
const backDelay = 5 * time.Second

// wdeleg is a write delegation this agent holds.
type wdeleg struct {
	g, share, rel, key string

	mu        sync.Mutex          // serialises write-backs of the file
	returning bool                // recalled or given up: closes write back again
	prio      chan wire.ByteRange // during a recall: ranges readers wait for
	mtime     int64               // when data was last kept back (ns)
	timer     *time.Timer
}

// backFor reports whether writes to p may be kept back under a delegation.
func (v *FS) backFor(p string) bool {
	return v.opts.Write == WriteBack && v.opts.policy(p).Mode == Callback
}

// openFlags adds the delegation request to a writable open of p.
func (v *FS) openFlags(p string, flags uint32) uint32 {
	if flags&wire.OpenWrite != 0 && v.backFor(p) {
		flags |= wire.OpenDeleg
	}
	return flags
}

// A delegation can be recalled (for a request of another agent) as soon as
// the share has recorded it, and the recall can reach this agent before
// the reply to the open it was granted with has been processed (NFSv4.1
// has a recall name the open it may refer to, for the same reason).
// Answered "not held", it would end the delegation at the share while this
// agent went on to keep writes back under it. So a recall of a file for
// which an open asking for a delegation is under way waits for that open:
// it is answered once the reply is processed, when the delegation it
// brings, if any, is known.

// delegFile names a file at its share.
type delegFile struct{ share, rel string }

// askingDeleg counts the opens of a file under way that ask for a
// delegation, and keeps the last recall of it that came meanwhile (the
// others are the share sending it again).
type askingDeleg struct {
	n    int
	pl   *poller
	late *wire.Recall
}

// askDeleg notes that an open of p with flags is under way, if it asks
// for a delegation; done is called once its reply is processed (after
// noteDeleg), or it failed.
func (v *FS) askDeleg(ctx context.Context, p string, flags uint32) (done func()) {
	if flags&wire.OpenDeleg == 0 {
		return func() {}
	}
	loc, err := v.c.Locate(ctx, p)
	if err != nil || loc.Share == "" {
		return func() {} // the open fails too
	}
	k := delegFile{loc.Share, loc.Rel}
	v.mu.Lock()
	a := v.asking[k]
	if a == nil {
		a = &askingDeleg{}
		v.asking[k] = a
	}
	a.n++
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		a.n--
		var late *wire.Recall
		if a.n == 0 {
			delete(v.asking, k)
			late = a.late
		}
		v.mu.Unlock()
		if late != nil {
			go v.answerRecall(a.pl, *late)
		}
	}
}

// noteDeleg records the delegation the share granted with f, if any.
func (v *FS) noteDeleg(p, key string, f *client.File) {
	if f == nil || !f.Deleg() {
		return
	}
	loc := f.Loc()
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.wdelegs[p]; d != nil && d.key == key && !d.returning {
		return
	}
	v.wdelegs[p] = &wdeleg{g: p, share: loc.Share, rel: loc.Rel, key: key}
	v.delegsGranted++
	v.log.Debug("write delegation granted", "path", p)
}

// delegFor returns the usable delegation on p for cache key key.
func (v *FS) delegFor(p, key string) *wdeleg {
	v.mu.Lock()
	d := v.wdelegs[p]
	pl := (*poller)(nil)
	if d != nil {
		pl = v.pollers[d.share]
	}
	v.mu.Unlock()
	if d == nil || d.key != key || pl == nil || !pl.leaseOK(time.Now()) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.returning {
		return nil
	}
	return d
}

// keepBack reports whether the handle's dirty data may stay in the cache
// at close (a usable delegation), and schedules its write-back.
func (v *FS) keepBack(h *Handle) bool {
	if !v.backFor(h.path) {
		return false
	}
	d := v.delegFor(h.path, h.key)
	if d == nil {
		return false
	}
	// The close acknowledges the data: it must survive a crash of the
	// agent (it is sent when the agent comes back).
	if err := v.cache.Persist(h.key); err != nil {
		v.log.Warn("cannot make kept back data durable in the cache; sending it now", "path", h.path, "err", err)
		return false
	}
	d.mu.Lock()
	d.mtime = time.Now().UnixNano()
	if d.timer != nil {
		d.timer.Stop()
	}
	v.sendLater(d)
	d.mu.Unlock()
	// Under the delegation this agent's view of the file is the truth:
	// keep it, so that the next stat asks nobody.
	v.setAttr(h.path, v.localAttr(h.path, h.attr))
	return true
}

// blocksFor is the 512-byte blocks a file of size bytes will take at its
// share, as most file systems allocate: whole 4 KiB blocks.
func blocksFor(size int64) int64 { return (size + 4095) / 4096 * 8 }

// localAttr corrects the share's attributes of p with what this agent
// keeps back under a delegation (size and modification time).
func (v *FS) localAttr(p string, a wire.Attr) wire.Attr {
	if v.opts.Write != WriteBack {
		return a
	}
	v.mu.Lock()
	d := v.wdelegs[p]
	v.mu.Unlock()
	if d == nil || len(v.cache.Dirty(d.key)) == 0 {
		return a
	}
	if _, size, ok := v.cache.Version(d.key); ok && size != a.Size {
		a.Size, a.Blocks = size, blocksFor(size)
	}
	d.mu.Lock()
	if d.mtime > a.Mtime {
		a.Mtime, a.Ctime = d.mtime, d.mtime
	}
	d.mu.Unlock()
	return a
}

// sendBack writes d's kept-back data to the share; with giveUp, the
// delegation is then given back (DelegReturn, done) and forgotten.
// Without it (the timer after the last close), it sends only while the
// delegation is trusted, and tries again later when it cannot.
func (v *FS) sendBack(d *wdeleg, giveUp bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if giveUp {
		d.returning = true
	} else {
		v.mu.Lock()
		held, pl := v.wdelegs[d.g] == d, v.pollers[d.share]
		v.mu.Unlock()
		if !held || d.returning {
			return nil
		}
		if pl == nil || !pl.leaseOK(time.Now()) {
			// Not trusted now (the share may have restarted): the
			// reclaim decides; look again later.
			v.sendLater(d)
			return nil
		}
	}
	err := v.writeRanges(ctx, d, v.cache.Dirty(d.key), nil)
	if err != nil {
		v.log.Warn("cannot send data kept back under a write delegation; it stays in the cache", "path", d.g, "err", err)
		if !giveUp {
			v.sendLater(d)
		}
	}
	if giveUp {
		v.dropDeleg(d)
		if err == nil {
			err = v.c.DelegReturn(ctx, d.g, nil, true)
		}
	}
	return err
}

// prioCh is the channel of ranges wanted first (nil outside a recall:
// receiving from it never succeeds).
func (d *wdeleg) prioCh() chan wire.ByteRange { return d.prio }

// sendLater arms d's write-back timer (d.mu held).
func (v *FS) sendLater(d *wdeleg) {
	d.timer = time.AfterFunc(backDelay, func() { v.sendBack(d, false) })
}

// dropDeleg forgets d.
func (v *FS) dropDeleg(d *wdeleg) {
	v.mu.Lock()
	if v.wdelegs[d.g] == d {
		delete(v.wdelegs, d.g)
	}
	v.mu.Unlock()
}

// writeRanges sends the ranges of d's cached file through a share handle
// of this agent's session (which no delegation holds up); first, if set,
// runs once the first half of the work — the ranges of the first group —
// and the final size are at the share (see recall).
func (v *FS) writeRanges(ctx context.Context, d *wdeleg, ranges []cache.Range, first func(rest []cache.Range) error) error {
	if len(ranges) == 0 && first == nil {
		return nil
	}
	drops := v.dropCount()
	f, err := v.c.Open(ctx, d.g, wire.OpenRead|wire.OpenWrite)
	if err != nil {
		return fmt.Errorf("writing %s back to its share: %w", d.g, err)
	}
	defer f.Close(context.Background())
	fetch := func(ctx context.Context, p []byte, off int64) (int, error) { return f.ReadAt(ctx, p, off) }
	buf := make([]byte, 4<<20)
	sendChunk := func(c cache.Range) error {
		got, err := v.cache.ReadAt(ctx, d.key, buf[:c.Len], c.Off, fetch)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading %s from the cache: %w", d.g, err)
		}
		if _, err := f.WriteAt(ctx, buf[:got], c.Off); err != nil {
			return fmt.Errorf("writing %s back to its share: %w", d.g, err)
		}
		// The share's version is now one this agent made: a crash from
		// here on must not take it for someone else's change.
		_, size, _ := v.cache.Version(d.key)
		v.cache.MarkClean(d.key, []cache.Range{c}, f.Attr().Version, size)
		fault.Crash("vfs.deleg.sent-block")
		return nil
	}
	// send writes rs in pieces of the buffer's size, in order, except that
	// pieces a waiting reader wants (asked on prio) go first.
	send := func(rs []cache.Range) error {
		var chunks []cache.Range
		for _, r := range rs {
			for off := r.Off; off < r.End(); off += int64(len(buf)) {
				chunks = append(chunks, cache.Range{Off: off, Len: min(int64(len(buf)), r.End()-off)})
			}
		}
		done := make([]bool, len(chunks))
		var wants []wire.ByteRange
		next := 0
		for range chunks {
			for more := true; more; {
				select {
				case w := <-d.prioCh():
					wants = append(wants, w)
				default:
					more = false
				}
			}
			i := -1
			for len(wants) > 0 && i < 0 {
				w := wants[0]
				for j, c := range chunks {
					if !done[j] && c.Off < w.Off+w.Len && w.Off < c.End() {
						i = j
						break
					}
				}
				if i < 0 {
					wants = wants[1:] // all of it is sent
				}
			}
			if i < 0 {
				for done[next] {
					next++
				}
				i = next
			}
			done[i] = true
			if err := sendChunk(chunks[i]); err != nil {
				return err
			}
		}
		return nil
	}
	// setSize gives the share's file the size this agent's copy has and,
	// once the last of the data is there (last), the time it was last
	// written here: sent later, it would otherwise carry the time it
	// reached the share, and other agents would see another mtime than
	// this one's programs saw.
	setSize := func(last bool) (wire.Attr, error) {
		_, size, _ := v.cache.Version(d.key)
		a, err := f.Stat(ctx)
		if err != nil {
			return a, err
		}
		mtime := d.mtime
		if !last || mtime <= 0 || a.Mtime == mtime {
			mtime = 0
		}
		if a.Size == size && mtime == 0 {
			return a, nil
		}
		if a.Size != size {
			if err := f.Truncate(ctx, size); err != nil {
				return a, err
			}
		}
		if mtime != 0 {
			if _, err := v.c.SetAttr(ctx, d.g, wire.SetAttrReq{Valid: wire.SetMtime, Mtime: mtime}); err != nil {
				return a, err
			}
		}
		if a, err = f.Stat(ctx); err == nil {
			v.cache.MarkClean(d.key, nil, a.Version, size)
		}
		return a, err
	}
	head, rest := ranges, []cache.Range(nil)
	if first != nil && len(ranges) > 0 {
		head, rest = ranges[:1], ranges[1:] // see orderWanted
	}
	if err := send(head); err != nil {
		return err
	}
	if first != nil {
		a, err := setSize(len(rest) == 0)
		if err != nil {
			return err
		}
		// What this agent wrote is recorded before the share hears of
		// it: after a crash from here, the share's new version is not
		// taken for another agent's change.
		v.cache.MarkClean(d.key, head, a.Version, a.Size)
		if err := v.cache.Persist(d.key); err != nil {
			return err
		}
		if err := first(rest); err != nil {
			return err
		}
		fault.Crash("vfs.deleg.first-return")
		if len(rest) == 0 {
			// That return was the last: the file is no longer this
			// agent's to touch (another agent may be changing it now),
			// so no size is set again and no attributes are kept.
			v.cache.MarkClean(d.key, ranges, a.Version, a.Size)
			return v.cache.Persist(d.key)
		}
		if err := send(rest); err != nil {
			return err
		}
	}
	a, err := setSize(true)
	if err != nil {
		return fmt.Errorf("writing %s back to its share: %w", d.g, err)
	}
	v.cache.MarkClean(d.key, ranges, a.Version, a.Size)
	if err := v.cache.Persist(d.key); err != nil {
		v.log.Warn("cannot record in the cache that data reached the share", "path", d.g, "err", err)
	}
	if first == nil {
		// Still held: what the share has now is what this agent knows.
		v.setOwn(d.g, a, drops)
		v.mu.Lock()
		v.opened[d.key] = a.Version
		v.mu.Unlock()
	}
	return nil
}

// recall answers a recall of one of this agent's write delegations: the
// dirty bytes the other agent wants first, and the final size, then a
// first DelegReturn naming what is still to come; then the rest, and the
// final DelegReturn.
func (v *FS) recall(pl *poller, r wire.Recall) {
	v.recalls.Add(1)
	v.mu.Lock()
	if a := v.asking[delegFile{pl.share, r.Path}]; a != nil {
		// It may be for the delegation an open under way brings.
		a.pl, a.late = pl, &r
		v.mu.Unlock()
		return
	}
	v.mu.Unlock()
	v.answerRecall(pl, r)
}

// answerRecall is recall, once no open asking for a delegation on the
// file is under way.
func (v *FS) answerRecall(pl *poller, r wire.Recall) {
	var d *wdeleg
	v.mu.Lock()
	for _, x := range v.wdelegs {
		if x.share == pl.share && x.rel == r.Path {
			d = x
			break
		}
	}
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g := pl.gpath + "/" + r.Path
	if gs := v.globals(pl.share, r.Path); len(gs) > 0 {
		g = gs[0]
	}
	if d == nil {
		// Not held here (any more): nothing to send.
		_ = v.c.DelegReturn(ctx, g, nil, true)
		return
	}
	v.mu.Lock()
	prio := d.prio
	v.mu.Unlock()
	if prio != nil {
		// Being returned: a reader waits for these bytes; send them next.
		select {
		case prio <- wire.ByteRange{Off: r.Off, Len: r.Len}:
		default:
		}
		return
	}
	d.mu.Lock()
	v.mu.Lock()
	held := v.wdelegs[d.g] == d
	v.mu.Unlock()
	if !held {
		// A recall sent again after the first was answered.
		d.mu.Unlock()
		_ = v.c.DelegReturn(ctx, d.g, nil, true)
		return
	}
	d.returning = true
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	v.mu.Lock()
	d.prio = make(chan wire.ByteRange, 64)
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		d.prio = nil
		v.mu.Unlock()
	}()
	ranges := orderWanted(v.cache.Dirty(d.key), r)
	v.log.Debug("write delegation recalled", "path", d.g, "want", r, "ranges", ranges)
	err := v.writeRanges(ctx, d, ranges, func(rest []cache.Range) error {
		pending := make([]wire.ByteRange, len(rest))
		for i, x := range rest {
			pending[i] = wire.ByteRange{Off: x.Off, Len: x.Len}
		}
		return v.c.DelegReturn(ctx, d.g, pending, len(rest) == 0)
	})
	if err != nil {
		// Kept, with its data: the share sends the recall again, or
		// (restarted) lets this agent reclaim it.
		d.returning = false
		v.sendLater(d)
		d.mu.Unlock()
		v.log.Warn("cannot write back a recalled file; its data stays in the cache", "path", d.g, "err", err)
		return
	}
	v.dropDeleg(d)
	d.mu.Unlock()
	if err := v.c.DelegReturn(ctx, d.g, nil, true); err != nil {
		v.log.Warn("cannot return a write delegation", "path", d.g, "err", err)
	}
	v.log.Debug("write delegation returned", "path", d.g, "dirty left", v.cache.Dirty(d.key))
	v.invalidate(d.g)
}

// orderWanted returns the dirty ranges with the part the recall wants
// first at the front (split at the wanted range's bounds).
func orderWanted(ranges []cache.Range, r wire.Recall) []cache.Range {
	if len(ranges) == 0 {
		return nil
	}
	var head, rest []cache.Range
	if r.Len > 0 {
		wend := r.Off + r.Len
		for _, x := range ranges {
			if x.End() <= r.Off || x.Off >= wend {
				rest = append(rest, x)
				continue
			}
			lo, hi := max(x.Off, r.Off), min(x.End(), wend)
			head = append(head, cache.Range{Off: lo, Len: hi - lo})
			if x.Off < lo {
				rest = append(rest, cache.Range{Off: x.Off, Len: lo - x.Off})
			}
			if x.End() > hi {
				rest = append(rest, cache.Range{Off: hi, Len: x.End() - hi})
			}
		}
	} else {
		rest = ranges
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Off < rest[j].Off })
	if len(head) == 0 {
		// Nothing wanted is dirty: the final size alone lets the other
		// agent go ahead; send an empty head.
		return append([]cache.Range{{}}, rest...)
	}
	merged := cache.Range{Off: head[0].Off, Len: head[len(head)-1].End() - head[0].Off}
	return append([]cache.Range{merged}, rest...)
}

// settle writes back and gives up the delegation on p, if any, before an
// operation that the delegation cannot cover (unlink, rename, link).
func (v *FS) settle(p string) {
	v.mu.Lock()
	d := v.wdelegs[p]
	v.mu.Unlock()
	if d != nil {
		_ = v.sendBack(d, true)
	}
}

// reclaimDelegs runs after the share behind pl asked this agent to drop
// its cache (it restarted, or thought this agent gone): each delegation
// with data kept back is reclaimed; one that cannot be is given up, its
// data sent if the file is unchanged and kept in the cache as a conflict
// otherwise.
func (v *FS) reclaimDelegs(share string) {
	v.mu.Lock()
	var ds []*wdeleg
	for _, d := range v.wdelegs {
		if d.share == share {
			ds = append(ds, d)
		}
	}
	v.mu.Unlock()
	for _, d := range ds {
		v.reclaim(d)
	}
}

func (v *FS) reclaim(d *wdeleg) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, _, _ := v.cache.Version(d.key)
	f, err := v.c.Open(ctx, d.g, wire.OpenRead|wire.OpenWrite|wire.OpenDeleg|wire.OpenReclaim)
	if err == nil {
		defer f.Close(context.Background())
	}
	dirty := len(v.cache.Dirty(d.key)) > 0
	switch {
	case err == nil && f.Deleg() && (f.Attr().Version == base || !dirty):
		v.log.Info("write delegation reclaimed", "path", d.g)
		return
	case err == nil && (f.Attr().Version == base || !dirty):
		v.log.Debug("write delegation not reclaimed; sending its data", "path", d.g)
		_ = v.sendBack(d, true)
	default:
		d.mu.Lock()
		d.returning = true
		d.mu.Unlock()
		v.dropDeleg(d)
		v.lost.Add(1)
		v.log.Warn("a file written here under a delegation that was lost changed at its share meanwhile; the local version is kept beside it",
			"path", d.g, "err", err)
		select {
		case v.rp.kickChan() <- struct{}{}: // the retry of unsent data keeps it beside
		default:
		}
	}
}

// FlushDelegs sends everything kept back under delegations and gives the
// delegations back (the agent is stopping).
func (v *FS) FlushDelegs() error {
	v.mu.Lock()
	ds := make([]*wdeleg, 0, len(v.wdelegs))
	for _, d := range v.wdelegs {
		ds = append(ds, d)
	}
	v.mu.Unlock()
	var errs []error
	for _, d := range ds {
		if err := v.sendBack(d, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DelegStats counts write delegations: held now, granted, recalled, and
// lost while data was kept back (the share restarted and its grace period
// passed, or the lease ran out, and the file changed meanwhile; the local
// version is then kept beside the file, see Conflicts).
type DelegStats struct {
	Held    int    `json:"held"`
	Granted uint64 `json:"granted"`
	Recalls uint64 `json:"recalls"`
	Lost    uint64 `json:"lost"`
}

// Delegations reports the write delegations of this agent.
func (v *FS) Delegations() DelegStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	return DelegStats{Held: len(v.wdelegs), Granted: v.delegsGranted, Recalls: v.recalls.Load(), Lost: v.lost.Load()}
}
