package vfs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Write delegations (write mode back, under callback). When the share
// grants one with a writable open, no other agent has the file open and
// none will use it without the share recalling the delegation first, so
// this agent keeps the file's writes to itself: close returns once the data
// is in the persistent blockcache. The data goes to the share when the share
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
	// id names the delegation at the share (wire.OpenResp.DelegID): a
	// recall of an earlier one of the same file is not this one's, and
	// this one's return leaves a later one alone.
	id atomic.Uint64

	mu        sync.Mutex          // serialises write-backs of the file
	returning bool                // recalled or given up: closes write back again
	prio      chan wire.ByteRange // during a recall: ranges readers wait for
	mtime     int64               // when data was last kept back (ns)
	timer     *time.Timer
}

// backFor reports whether writes to p may be kept back under a delegation.
func (v *FS) backFor(p string) bool {
	return v.opts.Write == WriteBack && v.opts.rule(p).OnChange().Recall
}

// openFlags adds the delegation request to a writable open of p.
func (v *FS) openFlags(p string, flags uint32) uint32 {
	if flags&wire.OpenWrite != 0 && v.backFor(p) {
		flags |= wire.OpenDeleg
	}
	return flags
}

// noteDeleg records the delegation the share granted with f, if any.
func (v *FS) noteDeleg(p, key string, f remote.File) {
	if f == nil || !f.Deleg() {
		return
	}
	loc := f.Loc()
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.wdelegs[p]; d != nil && d.key == key && !d.returning {
		d.id.Store(f.DelegID()) // the same one, or the share's newer one
		return
	}
	d := &wdeleg{g: p, share: loc.Share, rel: loc.Rel, key: key}
	d.id.Store(f.DelegID())
	v.wdelegs[p] = d
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
		d = v.heldWhileDown(context.Background(), h.path, h.key)
	}
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
	// keep it, so that the next stat asks nobody. Its mode and owner are
	// the latest this agent knows (a chmod since the open, such as the
	// kernel's clearing of setuid on a write, changed them).
	base := h.attr
	v.mu.Lock()
	if k, ok := v.known.get(h.path); ok && !k.neg && k.a.Ino == base.Ino && k.a.Version > base.Version {
		base = k.a
	}
	v.mu.Unlock()
	v.setAttr(h.path, v.localAttr(h.path, base))
	return true
}

// localAttr corrects the share's attributes of p with what this agent
// keeps back under a delegation (size and modification time).
func (v *FS) localAttr(p string, a wire.Attr) wire.Attr {
	if v.opts.Write != WriteBack {
		return a
	}
	v.mu.Lock()
	d := v.wdelegs[p]
	v.mu.Unlock()
	if d == nil || !v.cache.Unsent(d.key) {
		return a
	}
	d.mu.Lock()
	mtime := d.mtime
	d.mu.Unlock()
	return v.unsentAttr(d.key, a, mtime)
}

// unsentAttr corrects the share's attributes a of the file cached as key,
// which holds data the share has not got, with the size of this agent's
// copy, the blocks the share will allocate for it (whole 4 KiB blocks, as
// most file systems do), and mtime, the time it was last written here, if
// later.
func (v *FS) unsentAttr(key string, a wire.Attr, mtime int64) wire.Attr {
	if _, size, ok := v.cache.Version(key); ok && size != a.Size {
		a.Size, a.Blocks = size, (size+4095)/4096*8
	}
	if mtime > a.Mtime {
		a.Mtime, a.Ctime = mtime, mtime
	}
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
	ranges, mark := v.cache.DirtyAt(d.key)
	err := v.writeRanges(ctx, d, ranges, mark, nil)
	refused := dropped(err)
	switch {
	case refused:
		// Never sent again: dropped, and the delegation given back
		// (nothing is kept back under it any more).
		d.returning, giveUp = true, true
		v.dropDeleg(d)
		v.refuse(ctx, d.key, d.g, nil, err)
		v.noteSent(d.key)
	case err != nil:
		v.noteSendFailure(d.key, d.g, err)
		v.log.Warn("cannot send data kept back under a write delegation; it stays in the cache", "path", d.g, "err", err)
		if !giveUp {
			v.sendLater(d)
		}
	default:
		v.noteSent(d.key)
	}
	if giveUp {
		v.dropDeleg(d)
		if err == nil || refused {
			if rerr := v.c.DelegReturn(ctx, d.g, d.id.Load(), nil, true); err == nil {
				err = rerr
			}
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
// of this agent's session (which no delegation holds up), to a stage
// committed at once with the file's size and the time it was last written
// here (sent later, it would otherwise carry the time it reached the
// share, and other agents would see another mtime than this one's programs
// saw): the share's file is the old version until all of it is there, and
// stays so if the write-back fails. The ranges were dirty at mark
// (blockcache.DirtyAt): what the file's programs write meanwhile stays dirty.
// first, if set (a recall), runs once the data is committed, with nothing
// left pending.
func (v *FS) writeRanges(ctx context.Context, d *wdeleg, ranges []blockcache.Range, mark uint64, first func(rest []blockcache.Range) error) error {
	stage, _ := v.cache.StageOf(d.key)
	if len(ranges) == 0 && first == nil && !v.cache.IsCut(d.key) && stage == "" {
		return nil
	}
	drops := v.dropCount()
	f, err := v.data.Open(ctx, d.g, wire.OpenRead|wire.OpenWrite)
	if err != nil {
		return fmt.Errorf("writing %s back to its share: %w", d.g, err)
	}
	defer f.Close(context.Background())
	fetch := func(ctx context.Context, p []byte, off int64) (int, error) { return f.ReadAt(ctx, p, off) }
	_, size, _ := v.cache.Version(d.key)
	var a wire.Attr
	if a, err = f.Stat(ctx); err != nil {
		return fmt.Errorf("writing %s back to its share: %w", d.g, err)
	}
	if len(ranges) > 0 || stage != "" || a.Size != size || d.mtime > 0 && a.Mtime != d.mtime {
		mtime := d.mtime
		if mtime < 0 {
			mtime = 0
		}
		a, err = v.commitRanges(ctx, d.key, d.g, f, ranges, remote.Commit{Size: size, Mtime: mtime}, fetch, func() { fault.Crash("vfs.deleg.sent-block") })
		if err != nil {
			return err
		}
	}
	// What this agent wrote is recorded before the share hears of it:
	// after a crash from here, the share's new version is not taken for
	// another agent's change.
	v.cache.MarkClean(d.key, ranges, mark, a.Version, a.Size)
	if err := v.cache.Persist(d.key); err != nil {
		v.log.Warn("cannot record in the cache that data reached the share", "path", d.g, "err", err)
	}
	if first != nil {
		if err := first(nil); err != nil {
			return err
		}
		fault.Crash("vfs.deleg.first-return")
		// That return was the last: the file is no longer this agent's
		// to touch (another agent may be changing it now), so no
		// attributes are kept.
		return nil
	}
	// Still held: what the share has now is what this agent knows.
	v.setOwn(d.g, a, drops)
	v.mu.Lock()
	v.opened[d.key] = a.Version
	v.mu.Unlock()
	return nil
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
