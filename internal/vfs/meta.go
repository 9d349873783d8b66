package vfs

import (
	"context"
	"errors"
	"path"
	"syscall"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/wire"
)

// Metadata at WAN latency. Whether cached attributes and listings may be
// used is decided by the path's consistency rule (internal/consistency,
// asked through freshFor), and a
// stale one is revalidated by directory, not by file: the listing of a
// directory comes with its entries' attributes (readdir in protocol.md),
// so one request makes a directory and every entry in it fresh again
// (listParent, readDir). A walk costs at most one round trip per
// directory in every mode but strict, and fewer, as the listings of the
// subdirectories of a directory just listed are fetched ahead, several at
// once (listAhead): a walk lists them next.

// metaCache is what the agent holds in memory of the namespace: the
// attributes and listings of paths, each bounded (Options.MetaEntries,
// least recently used dropped first: lru.go), with the counters that keep
// an answer fetched before an invalidation from being cached after it. An
// entry is used while its path's consistency rule trusts it (freshFor).
// FS.mu guards it.
type metaCache struct {
	attrs *lru[attrEntry] // by global path
	dirs  *lru[dirEntry]
	// known keeps the last attributes and listings fetched of each path,
	// which invalidations and this agent's own changes do not drop: what
	// is served while the path's share is unreachable (see offline.go).
	known     *lru[attrEntry]
	knownDirs *lru[dirEntry]
	// gen counts invalidations: an answer fetched before one must not
	// be cached after it (a lookup racing a rename would resurrect the
	// old name).
	gen uint64
	// drops counts what shares told this agent to drop (recalls, polled
	// invalidations); its own forgets do not count. The reply to a change
	// of this agent's is cached only if nothing was dropped while the
	// change was in flight: the drop may announce another agent's later
	// change that the reply predates.
	drops uint64
	// listing holds the listings being fetched (see listShared).
	listing map[string]*listFlight
}

// newMetaCache makes a metadata cache of at most max attributes, and
// listings of at most max entries in all (each, for fresh and known).
func newMetaCache(max int) metaCache {
	return metaCache{attrs: newLRU[attrEntry](max, nil), dirs: newLRU(max, dirEntry.weight),
		known: newLRU[attrEntry](max, nil), knownDirs: newLRU(max, dirEntry.weight),
		listing: make(map[string]*listFlight)}
}

// freshFor asks p's consistency rule r whether an entry fetched at t may
// be used now, with what the poller of p's share vouches for (vouch).
func (v *FS) freshFor(ctx context.Context, p string, r consistency.Rule, t time.Time) bool {
	vo, _ := v.vouch(ctx, p, r)
	return r.Fresh(t, time.Now(), vo)
}

// listFlight is a listing being fetched from the share, which others who
// want the same listing wait for instead of asking again.
type listFlight struct {
	done    chan struct{}
	gen     uint64 // the generation when it was asked for
	entries []wire.DirEntry
	err     error
}

// listShared fetches the listing of p (fetchListing), or waits for the
// fetch of it under way if nothing was invalidated since that one was
// asked for: an answer from before an invalidation must not be given to a
// caller who came after it (a listing asked for ahead must not hide a file
// this agent has just made).
//
// A listing asked for ahead (since set: when it was queued) is not fetched
// if the walk has listed p since.
func (v *FS) listShared(ctx context.Context, p string, pol consistency.Rule, since time.Time) ([]wire.DirEntry, error) {
	for {
		v.mu.Lock()
		if d, ok := v.dirs.get(p); ok && !since.IsZero() && d.at.After(since) {
			v.mu.Unlock()
			return d.entries, nil
		}
		f := v.listing[p]
		if f == nil || f.gen != v.gen {
			f = &listFlight{done: make(chan struct{}), gen: v.gen}
			v.listing[p] = f
			v.mu.Unlock()
			var fill func()
			f.entries, fill, f.err = v.fetchListing(ctx, p, pol)
			v.mu.Lock()
			if v.listing[p] == f {
				delete(v.listing, p)
			}
			v.mu.Unlock()
			close(f.done)
			if fill != nil {
				// After those waiting have the listing: they
				// need not wait for the cache's disk.
				fill()
			}
			return f.entries, f.err
		}
		v.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
			continue // the fetch was given up by its caller, not this one
		}
		return f.entries, f.err
	}
}

// Listing ahead: when a listing is fetched from the share, the listings of
// its subdirectories are fetched too, listAheadDepth levels down, at most
// listAheadWorkers at once. Jobs beyond listAheadQueue waiting are
// dropped (the walk lists those directories itself), and so are
// directories larger than listAheadMax (as stat gives their size: about
// 100 entries a 4 KiB block), those whose listing is fresh or
// under way, and everything under strict. Under callback a listing
// fetched ahead takes a hold on its directory, as the walk's own listing
// would.
const (
	listAheadDepth   = 2
	listAheadWorkers = 16
	listAheadQueue   = 512
	listAheadTimeout = 30 * time.Second
	listAheadMax     = 256 << 10
)

type aheadJob struct {
	p      string
	depth  int
	queued time.Time
}

// listAhead queues the subdirectories of p (whose listing is entries) to
// be listed ahead, each with depth-1 levels more below it: those not
// listed, or whose listing is stale and was used (a walk again), and is
// not being fetched. One fetched ahead and never used is not fetched
// again (`watch ls` of a directory does not keep its subdirectories'
// listings fresh). A walk that finds a listing fetched ahead calls it
// again, so that a level the queue had no room for is listed ahead then.
func (v *FS) listAhead(p string, entries []wire.DirEntry, depth int) {
	if depth <= 0 {
		return
	}
	for _, e := range entries {
		if e.Attr.Mode&syscall.S_IFMT != syscall.S_IFDIR || e.Attr.Size > listAheadMax {
			continue
		}
		kid := path.Join(p, e.Name)
		pol := v.opts.rule(kid)
		if !pol.Caches() {
			continue
		}
		v.mu.Lock()
		d, listed := v.dirs.get(kid)
		_, busy := v.listing[kid]
		v.mu.Unlock()
		if busy || listed && (!d.used || v.freshFor(v.aheadCtx, kid, pol, d.at)) {
			continue
		}
		if !v.aheadWorkers() {
			return
		}
		select {
		case v.aheadQ <- aheadJob{p: kid, depth: depth - 1, queued: time.Now()}:
		default:
			return // enough queued: the walk will list the rest itself
		}
	}
}

// aheadWorkers starts the workers that list ahead, once, unless the file
// system is closed; it reports whether they run.
func (v *FS) aheadWorkers() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.quit:
		return false
	default:
	}
	v.aheadStart.Do(func() {
		v.aheadWG.Add(listAheadWorkers)
		for range listAheadWorkers {
			go v.aheadWorker()
		}
	})
	return true
}

// aheadWorker lists the directories queued ahead until the file system
// is closed.
func (v *FS) aheadWorker() {
	defer v.aheadWG.Done()
	for {
		select {
		case <-v.quit:
			return
		case j := <-v.aheadQ:
			v.listAheadOne(j)
		}
	}
}

func (v *FS) listAheadOne(j aheadJob) {
	pol := v.opts.rule(j.p)
	v.mu.Lock()
	d, ok := v.dirs.get(j.p)
	_, busy := v.listing[j.p]
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(v.aheadCtx, listAheadTimeout)
	defer cancel()
	if busy || ok && v.freshFor(ctx, j.p, pol, d.at) || v.isDown(ctx, j.p) {
		return
	}
	v.listedAhead.Add(1)
	if entries, err := v.listShared(ctx, j.p, pol, j.queued); err == nil {
		v.listAhead(j.p, entries, j.depth)
	}
}

// ListedAhead counts the listings fetched ahead of a walk.
func (v *FS) ListedAhead() uint64 { return v.listedAhead.Load() }
