package vfs

import (
	"context"
	"slices"
	"sync"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/wire"
)

// Warm restarts. The listings an agent fetched are persisted (with their
// entries' attributes); a restarted agent on the same cache asks each
// share, in one request (OpValidate), which of them are still what a
// readdir would return: it sends the sum of each listing (wire.ListingSum)
// and the share compares it with the sum of the listing it would give now.
// Those unchanged are fresh again as if fetched when the request was sent
// (window=D: for D from then); those changed are dropped and listed again
// when used. Under poll and callback the request follows the session's
// first poll, so that a change made after the share compared is reported
// by the next poll, or (callback) recalled: the share holds the agent as
// having listed each directory it compared, as a readdir would. Strict
// paths are not validated (they trust nothing), nor immutable ones (they
// trust what was persisted as it is).

// warmBatchBytes bounds the paths one validation request carries (well
// under wire.MaxMeta); more directories take more requests.
const warmBatchBytes = 512 << 10

// heldListing is a persisted listing to validate, or (attr) the
// persisted attributes of a path (l.Dir) whose listing is not held: a
// mount's root, which the kernel looks up before any walk below it.
type heldListing struct {
	p, rel string
	l      listing
	attr   bool
}

// warmSet is what an earlier run persisted that a restarted agent
// validates, by share, and a global path to address each share.
type warmSet struct {
	byShare map[string][]heldListing
	addr    map[string]string
}

// persisted gathers the persisted listings (and mount roots' attributes)
// not in memory whose modes validate them, no more entries in all than
// memory keeps (Options.MetaEntries), until ctx ends. Connect takes it
// before the first polls: a first poll's force drops what is persisted of
// each mount's root, which the validation, comparing after the session
// began, may make trusted again.
func (v *FS) persisted(ctx context.Context) warmSet {
	ws := warmSet{byShare: make(map[string][]heldListing), addr: make(map[string]string)}
	weight := 0
	for _, p := range v.cache.MetaKeys(blockcache.MetaDir) {
		if ctx.Err() != nil || weight >= v.opts.MetaEntries {
			break // no more than memory keeps (Options.MetaEntries)
		}
		if !v.validates(p) {
			continue
		}
		v.mu.Lock()
		_, have := v.dirs.get(p)
		v.mu.Unlock()
		if have {
			continue
		}
		l, found := v.persistedListing(p)
		if !found || l.Dir.Ino == 0 || (dirEntry{entries: l.Entries}).weight() > v.opts.MetaEntries ||
			slices.ContainsFunc(l.Entries, func(e wire.DirEntry) bool { return e.Attr.Ino == 0 }) {
			continue // a mount nested in it shows in it: not the share's alone
		}
		loc, err := v.c.Locate(ctx, p)
		if err != nil || loc.Share == "" {
			continue
		}
		weight += dirEntry{entries: l.Entries}.weight()
		ws.byShare[loc.Share] = append(ws.byShare[loc.Share], heldListing{p: p, rel: loc.Rel, l: l})
		ws.addr[loc.Share] = loc.Prefix
	}
	v.persistedRoots(ctx, ws)
	return ws
}

// warm validates ws, one request per share (per wire.ValidateMax
// directories or warmBatchBytes of paths), the shares at once. Under poll
// and callback a path is validated only once its share's poller had its
// first answer (Connect waits for it); the others are left cold.
func (v *FS) warm(ctx context.Context, ws warmSet) {
	var wg sync.WaitGroup
	for share, hs := range ws.byShare {
		hs = slices.DeleteFunc(hs, func(h heldListing) bool { return !v.ready(ctx, h.p) })
		if len(hs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.warmShare(ctx, share, ws.addr[share], hs)
		}()
	}
	wg.Wait()
}

// validates reports whether what is persisted of p is validated: not
// under strict (nothing is trusted) nor immutable (trusted as it is).
func (v *FS) validates(p string) bool {
	pol := v.opts.rule(p)
	return pol.Caches() && pol.Revalidates()
}

// ready reports whether p may be validated now: under poll and callback,
// once its share's first poll was answered.
func (v *FS) ready(ctx context.Context, p string) bool {
	pol := v.opts.rule(p)
	if pol.PollEvery() == 0 {
		return true
	}
	pl := v.pollerFor(ctx, p, pol)
	return pl != nil && pl.answered()
}

// warmShare validates the listings hs of one share, addressed by gpath.
func (v *FS) warmShare(ctx context.Context, share, gpath string, hs []heldListing) {
	for len(hs) > 0 {
		n, size := 0, 0
		for n < len(hs) && n < wire.ValidateMax && size < warmBatchBytes {
			size += len(hs[n].rel) + wire.ListingSumSize + 8
			n++
		}
		batch := hs[:n]
		hs = hs[n:]
		checks := make([]wire.DirCheck, len(batch))
		for i, h := range batch {
			checks[i] = wire.DirCheck{Path: h.rel, Sum: wire.ListingSum(h.l.Dir, h.l.Entries), Attr: h.attr}
		}
		g := v.generation()
		sent := time.Now()
		resp, err := v.c.Validate(ctx, gpath, checks)
		if err != nil {
			v.log.Debug("validating the persisted listings failed; they are listed again when used", "share", share, "err", err)
			return
		}
		v.warmed.Add(uint64(v.warmBatch(batch, resp, sent, g)))
	}
}

// warmBatch makes the listings of batch the share confirmed (resp) fresh
// as of sent, and persists them again, unless an invalidation came since
// the request was sent (generation g): it may concern any of them. The
// others are dropped from the cache's disk. It returns how many listings
// were confirmed.
func (v *FS) warmBatch(batch []heldListing, resp wire.ValidateResp, sent time.Time, g uint64) int {
	var changed, changedAttrs []string
	var kept []heldListing
	n := 0
	v.mu.Lock()
	if v.gen != g {
		v.mu.Unlock()
		return 0
	}
	for i, h := range batch {
		switch {
		case !resp.Same(i) && h.attr:
			changedAttrs = append(changedAttrs, h.p)
			continue
		case !resp.Same(i):
			changed = append(changed, h.p)
			continue
		case h.attr:
			if _, ok := v.attrs.get(h.p); !ok {
				v.attrs.put(h.p, attrEntry{a: h.l.Dir, at: sent})
				v.known.put(h.p, v.attrs.peek(h.p))
				kept = append(kept, h)
			}
			continue
		}
		if _, ok := v.dirs.get(h.p); ok {
			continue // listed meanwhile
		}
		n++
		kept = append(kept, h)
		v.dirs.put(h.p, dirEntry{entries: h.l.Entries, at: sent})
		v.knownDirs.put(h.p, v.dirs.peek(h.p))
		v.putEntries(h.p, h.l.Entries, sent)
		v.attrs.put(h.p, attrEntry{a: h.l.Dir, at: sent})
		v.known.put(h.p, v.attrs.peek(h.p))
	}
	v.mu.Unlock()
	for _, p := range changed {
		v.cache.PutMeta(blockcache.MetaDir, p, nil)
	}
	for _, p := range changedAttrs {
		v.cache.PutMeta(blockcache.MetaAttr, p, nil)
	}
	// Persisted again: the first poll's force dropped what was persisted
	// of a mount's root, which the next restart would then list again.
	for _, h := range kept {
		if !h.attr {
			if b, err := wire.Marshal(h.l); err == nil {
				v.cache.PutMeta(blockcache.MetaDir, h.p, b)
			}
		}
		v.persistAttr(h.p, h.l.Dir)
	}
	return n
}

// persistedRoots adds to ws the persisted attributes of the roots of the
// mounts whose listings are not held: the kernel looks a mount's root up
// before anything below it.
func (v *FS) persistedRoots(ctx context.Context, ws warmSet) {
	mounts, err := v.c.MountTable(ctx)
	if err != nil {
		return
	}
	for _, m := range mounts {
		p := m.Prefix
		if !v.validates(p) || slices.ContainsFunc(ws.byShare[m.Share], func(h heldListing) bool { return h.p == p }) {
			continue
		}
		a, found := v.persistedAttr(p)
		if !found || a.Ino == 0 {
			continue
		}
		loc, err := v.c.Locate(ctx, p)
		if err != nil || loc.Share == "" {
			continue
		}
		ws.byShare[loc.Share] = append(ws.byShare[loc.Share], heldListing{p: p, rel: loc.Rel, l: listing{Dir: a}, attr: true})
		ws.addr[loc.Share] = loc.Prefix
	}
}

// Warmed counts the persisted listings the shares confirmed at start.
func (v *FS) Warmed() uint64 { return v.warmed.Load() }
