package vfs

import (
	"context"
	"errors"
	"sort"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/wire"
)

// When the share takes a write delegation back: a recall for another
// agent's request (which may come before the reply to the open that
// brought the delegation), and a reclaim after the share restarted.

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
	if d == nil || r.ID != 0 && d.id.Load() != r.ID {
		// Not held here (any more), or the recall of an earlier
		// delegation of the file, given back already: nothing to send,
		// and the one held now (if any) stays.
		_ = v.c.DelegReturn(ctx, g, r.ID, nil, true)
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
		_ = v.c.DelegReturn(ctx, d.g, d.id.Load(), nil, true)
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
	dirty, mark := v.cache.DirtyAt(d.key)
	ranges := orderWanted(dirty, r)
	v.log.Debug("write delegation recalled", "path", d.g, "want", r, "ranges", ranges)
	err := v.writeRanges(ctx, d, ranges, mark, func(rest []blockcache.Range) error {
		pending := make([]wire.ByteRange, len(rest))
		for i, x := range rest {
			pending[i] = wire.ByteRange{Off: x.Off, Len: x.Len}
		}
		return v.c.DelegReturn(ctx, d.g, d.id.Load(), pending, len(rest) == 0)
	})
	if dropped(err) {
		// Refused for good: nothing to send, now or later. The other
		// agent goes ahead with the share's version.
		v.dropDeleg(d)
		v.refuse(ctx, d.key, d.g, nil, err)
		v.noteSent(d.key)
		d.mu.Unlock()
		_ = v.c.DelegReturn(ctx, d.g, d.id.Load(), nil, true)
		v.invalidate(d.g)
		return
	}
	if err != nil {
		// Kept, with its data: the share sends the recall again, or
		// (restarted) lets this agent reclaim it. When the share refused
		// the data (full, an I/O error), it tells the requests waiting
		// for it why (see failCode).
		d.returning = false
		v.sendLater(d)
		d.mu.Unlock()
		v.noteSendFailure(d.key, d.g, err)
		v.log.Warn("cannot write back a recalled file; its data stays in the cache", "path", d.g, "err", err)
		if code := failCode(err); code != 0 && ctx.Err() == nil {
			if ferr := v.c.DelegFail(ctx, d.g, d.id.Load(), code, reason(err)); ferr != nil {
				v.log.Warn("cannot tell the share why a recalled file cannot be written back", "path", d.g, "err", ferr)
			}
		}
		return
	}
	// writeRanges gave the delegation back (the return with nothing
	// pending): returning it again here once ended the next delegation
	// of the file, granted to this agent in between.
	v.noteSent(d.key)
	v.dropDeleg(d)
	d.mu.Unlock()
	v.log.Debug("write delegation returned", "path", d.g, "dirty left", v.cache.Dirty(d.key))
	v.invalidate(d.g)
}

// failCode is the code a recall that failed with err is answered with
// (see client.DelegFail): the share's own refusal of the data, a full
// disk (ENOSPC) or an I/O error there; 0 for anything else (the network,
// the share's limits on requests), which the recall sent again settles.
func failCode(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) && (we.Code == wire.CodeNoSpace || we.Code == wire.CodeIO) {
		return we.Code
	}
	return 0
}

// reason is what the share is told of a failed write-back: the share's
// own words when it refused the data, err's text otherwise.
func reason(err error) string {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Message
	}
	return err.Error()
}

// orderWanted returns the dirty ranges with the part the recall wants
// first at the front (split at the wanted range's bounds).
func orderWanted(ranges []blockcache.Range, r wire.Recall) []blockcache.Range {
	if len(ranges) == 0 {
		return nil
	}
	var head, rest []blockcache.Range
	if r.Len > 0 {
		wend := r.Off + r.Len
		for _, x := range ranges {
			if x.End() <= r.Off || x.Off >= wend {
				rest = append(rest, x)
				continue
			}
			lo, hi := max(x.Off, r.Off), min(x.End(), wend)
			head = append(head, blockcache.Range{Off: lo, Len: hi - lo})
			if x.Off < lo {
				rest = append(rest, blockcache.Range{Off: x.Off, Len: lo - x.Off})
			}
			if x.End() > hi {
				rest = append(rest, blockcache.Range{Off: hi, Len: x.End() - hi})
			}
		}
	} else {
		rest = ranges
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Off < rest[j].Off })
	if len(head) == 0 {
		// Nothing wanted is dirty: the final size alone lets the other
		// agent go ahead; send an empty head.
		return append([]blockcache.Range{{}}, rest...)
	}
	merged := blockcache.Range{Off: head[0].Off, Len: head[len(head)-1].End() - head[0].Off}
	return append([]blockcache.Range{merged}, rest...)
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
	// A recall of the reclaimed delegation (a reader waited out the grace
	// for it) can come before this open's reply names it: it waits for
	// the reply (askDeleg), so that it is taken for the delegation held.
	flags := wire.OpenRead | wire.OpenWrite | wire.OpenDeleg | wire.OpenReclaim
	done := v.askDeleg(ctx, d.g, flags)
	f, err := v.data.Open(ctx, d.g, flags)
	if err == nil {
		defer f.Close(context.Background())
		if f.Deleg() {
			d.id.Store(f.DelegID())
		}
	}
	done()
	dirty := v.cache.Unsent(d.key)
	switch {
	case err == nil && f.Deleg() && (f.Attr().Version == base || !dirty):
		v.log.Info("write delegation reclaimed", "path", d.g)
		return
	case err == nil && (f.Attr().Version == base || !dirty):
		v.log.Debug("write delegation not reclaimed; sending its data", "path", d.g)
		_ = v.sendBack(d, true)
	case wire.Permanent(err):
		// The share will not take this agent's writes to the file any
		// more: what was kept back goes (see refuse).
		d.mu.Lock()
		d.returning = true
		d.mu.Unlock()
		v.dropDeleg(d)
		if dirty {
			v.refuse(ctx, d.key, d.g, nil, err)
		}
	default:
		d.mu.Lock()
		d.returning = true
		d.mu.Unlock()
		v.dropDeleg(d)
		v.lost.Add(1)
		v.log.Warn("a file written here under a delegation that was lost changed at its share meanwhile; the retry of unsent data settles it (nothing to send if the share holds this agent's bytes, else the local version is kept beside it)",
			"path", d.g, "err", err)
		select {
		case v.rp.kickChan() <- struct{}{}: // the retry of unsent data keeps it beside
		default:
		}
	}
}
