package vfs

import (
	"context"
	"slices"
	"sync"
	"time"

	"pando.dev/pando/internal/cache"
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

// heldListing is a persisted listing to validate.
type heldListing struct {
	p, rel string
	l      listing
}

// warm validates the persisted listings not in memory, one request per
// share (per wire.ValidateMax directories or warmBatchBytes of paths), the
// shares at once. Under poll and callback it needs the share's poller to
// have had its first answer (Connect waits for it); a share whose poller
// did not is left cold.
func (v *FS) warm(ctx context.Context) {
	byShare := make(map[string][]heldListing)
	addr := make(map[string]string)
	for _, p := range v.cache.MetaKeys(cache.MetaDir) {
		pol := v.opts.policy(p)
		if pol.Mode == Strict || pol.Mode == Immutable {
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
		if pol.Mode == Poll || pol.Mode == Callback {
			pl := v.pollerFor(ctx, p, pol)
			if pl == nil || !pl.answered() {
				continue
			}
		}
		byShare[loc.Share] = append(byShare[loc.Share], heldListing{p: p, rel: loc.Rel, l: l})
		addr[loc.Share] = loc.Prefix
	}
	var wg sync.WaitGroup
	for share, hs := range byShare {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.warmShare(ctx, share, addr[share], hs)
		}()
	}
	wg.Wait()
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
			checks[i] = wire.DirCheck{Path: h.rel, Sum: wire.ListingSum(h.l.Dir, h.l.Entries)}
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
// as of sent, unless an invalidation came since the request was sent
// (generation g): it may concern any of them. The others are dropped
// from the cache's disk. It returns how many were confirmed.
func (v *FS) warmBatch(batch []heldListing, resp wire.ValidateResp, sent time.Time, g uint64) int {
	var changed []string
	n := 0
	v.mu.Lock()
	if v.gen != g {
		v.mu.Unlock()
		return 0
	}
	for i, h := range batch {
		if !resp.Same(i) {
			changed = append(changed, h.p)
			continue
		}
		if _, ok := v.dirs.get(h.p); ok {
			continue // listed meanwhile
		}
		n++
		v.dirs.put(h.p, dirEntry{entries: h.l.Entries, at: sent})
		v.knownDirs.put(h.p, v.dirs.peek(h.p))
		v.putEntries(h.p, h.l.Entries, sent)
		v.attrs.put(h.p, attrEntry{a: h.l.Dir, at: sent})
		v.known.put(h.p, v.attrs.peek(h.p))
	}
	v.mu.Unlock()
	for _, p := range changed {
		v.cache.PutMeta(cache.MetaDir, p, nil)
	}
	return n
}

// Warmed counts the persisted listings the shares confirmed at start.
func (v *FS) Warmed() uint64 { return v.warmed.Load() }
