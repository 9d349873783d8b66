package vfs

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// FS is the namespace as a file system. It is safe for concurrent use.
type FS struct {
	c     remote.Namespace // names: where paths live, attributes, listings, changes
	data  remote.Data      // bytes: files opened at their locations
	cache blockcache.Cache
	opts  Options

	mu sync.Mutex
	// metaCache holds the attributes and listings, guarded by mu (see
	// meta.go).
	metaCache
	opened map[string]uint64 // cache key -> version the kernel's page cache holds
	// opening holds handles whose share handle is being opened, by path.
	opening map[string]map[*Handle]struct{}

	rp    replayState  // unsent data from before: replay, conflicts
	fails sendFailures // why unsent data waits, per file (see unsent.go)

	pollers map[string]*poller // by share, for paths under poll
	// Write delegations held (write mode back), by global path.
	wdelegs       map[string]*wdeleg
	asking        map[delegFile]*askingDeleg // opens under way that ask for one, by file
	delegsGranted uint64
	recalls       atomic.Uint64
	listFilled    atomic.Uint64 // files cached from the contents listings brought
	lost          atomic.Uint64 // delegations lost with data kept back
	refusals      atomic.Uint64 // files whose refused data was dropped (see refuse)
	quit          chan struct{}
	log           *slog.Logger
	started       time.Time // when this run began (see validated)
	// notify, if set, tells the kernel to forget a path, or a path and
	// everything under it (set by the edge).
	notify func(g string, tree bool)

	// Listings to fetch ahead of a walk (see listAhead).
	aheadQ      chan aheadJob
	aheadStart  sync.Once
	aheadCtx    context.Context // ended by Close
	aheadStop   context.CancelFunc
	aheadWG     sync.WaitGroup
	listedAhead atomic.Uint64
	warmed      atomic.Uint64 // persisted listings a share confirmed at start (warm.go)
}

// SetNotifier lets the edge drop the kernel's cached entry for a path
// when a poll or a recall says it changed (tree false), or for a path and
// everything under it (tree true: the share forced a drop of everything,
// or the callback lease ran out). fn must not wait for FUSE requests.
func (v *FS) SetNotifier(fn func(g string, tree bool)) {
	v.mu.Lock()
	v.notify = fn
	v.mu.Unlock()
}

func (v *FS) notifyKernel(g string, tree bool) {
	v.mu.Lock()
	fn := v.notify
	v.mu.Unlock()
	if fn != nil {
		fn(g, tree)
	}
}

// Close stops the pollers and the listings fetched ahead (it waits for
// those under way to end), and ends the callback sessions at their
// shares (bounded by goodbyeBound).
func (v *FS) Close() {
	v.mu.Lock()
	select {
	case <-v.quit:
		v.mu.Unlock()
		return
	default:
		close(v.quit)
	}
	var pls []*poller
	for _, pl := range v.pollers {
		if pl.callback {
			pls = append(pls, pl)
		}
	}
	v.mu.Unlock()
	v.aheadStop()
	v.aheadWG.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), goodbyeBound)
	defer cancel()
	var wg sync.WaitGroup
	for _, pl := range pls {
		wg.Go(func() { pl.goodbye(ctx) })
	}
	wg.Wait()
}

// goodbyeBound bounds Close's wait for the long polls in flight (each
// returns within callbackWait) and the last polls that end the callback
// sessions.
const goodbyeBound = 2*callbackWait + time.Second

func (v *FS) openingAdd(h *Handle) {
	m := v.opening[h.path]
	if m == nil {
		m = make(map[*Handle]struct{})
		v.opening[h.path] = m
	}
	m[h] = struct{}{}
}

func (v *FS) openingDel(h *Handle) {
	if m := v.opening[h.path]; m != nil {
		delete(m, h)
		if len(m) == 0 {
			delete(v.opening, h.path)
		}
	}
}

// waitOpens waits for background opens of p: an unlink or rename through
// this agent must not overtake an open(2) that returned before it.
func (v *FS) waitOpens(ctx context.Context, p string) {
	v.mu.Lock()
	var hs []*Handle
	for h := range v.opening[p] {
		hs = append(hs, h)
	}
	v.mu.Unlock()
	for _, h := range hs {
		h.waitOpen(ctx)
	}
}

type attrEntry struct {
	a   wire.Attr
	at  time.Time
	neg bool // the path does not exist
}

// New makes a file system over a namespace, a data path and a blockcache. The
// namespace's health hook is the file system's from now on (it logs each
// share going down or coming back).
func New(ns remote.Namespace, data remote.Data, ch blockcache.Cache, opts Options) *FS {
	if opts.Consistency == (consistency.Consistency{}) {
		opts.Consistency = consistency.Default
	}
	if opts.ReadAhead <= 0 {
		opts.ReadAhead = 16
		if opts.ReadAheadMax <= 0 {
			opts.ReadAheadMax = int(max(1, (64<<20)/ch.BlockSize()))
		}
	}
	opts.ReadAheadMax = max(opts.ReadAheadMax, opts.ReadAhead)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MetaEntries <= 0 {
		opts.MetaEntries = DefaultMetaEntries
	}
	v := &FS{c: ns, data: data, cache: ch, opts: opts, metaCache: newMetaCache(opts.MetaEntries), opened: make(map[string]uint64),
		opening: make(map[string]map[*Handle]struct{}), pollers: make(map[string]*poller), wdelegs: make(map[string]*wdeleg),
		asking: make(map[delegFile]*askingDeleg), aheadQ: make(chan aheadJob, listAheadQueue), quit: make(chan struct{}), log: opts.Log, started: time.Now()}
	v.aheadCtx, v.aheadStop = context.WithCancel(context.Background())
	ns.SetHealthHook(v.logHealth)
	return v
}

// Options returns the options in force.
func (v *FS) Options() Options { return v.opts }

// Key returns the cache key of a file: its share and inode, so that
// renames and hard links keep their cached data.
func (v *FS) Key(ctx context.Context, p string, a wire.Attr) (string, error) {
	loc, err := v.c.Locate(ctx, p)
	if err != nil {
		return "", err
	}
	return loc.Share + "/" + strconv.FormatUint(a.Ino, 10), nil
}

// forget drops cached attributes of p and the listing and attributes of
// its parent (whose version the change moved on: a listing persisted
// before it must not pass for current).
func (v *FS) forget(p string) {
	v.mu.Lock()
	v.gen++
	v.attrs.del(p)
	v.dirs.del(p)
	v.dirs.del(path.Dir(p))
	v.attrs.del(path.Dir(p))
	v.mu.Unlock()
	v.cache.PutMeta(blockcache.MetaAttr, p, nil)
	v.cache.PutMeta(blockcache.MetaDir, p, nil)
	v.cache.PutMeta(blockcache.MetaDir, path.Dir(p), nil)
	v.cache.PutMeta(blockcache.MetaAttr, path.Dir(p), nil)
}

// forgetLinks drops the cached attributes of every other name of a file
// with attributes a that has more than one: a link made or removed through
// one name changes the link count and ctime seen through all of them.
func (v *FS) forgetLinks(a wire.Attr) {
	if a.Nlink < 2 || a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return
	}
	var names []string
	v.mu.Lock()
	v.gen++
	v.attrs.drop(func(k string, e attrEntry) bool {
		if !e.neg && e.a.Ino == a.Ino {
			names = append(names, k)
			return true
		}
		return false
	})
	v.mu.Unlock()
	for _, k := range names {
		v.cache.PutMeta(blockcache.MetaAttr, k, nil)
	}
}

// forgetTree drops everything cached at or below p (after a rename).
func (v *FS) forgetTree(p string) {
	v.mu.Lock()
	v.gen++
	v.attrs.drop(func(k string, _ attrEntry) bool { return k == p || strings.HasPrefix(k, p+"/") })
	v.dirs.drop(func(k string, _ dirEntry) bool { return k == p || strings.HasPrefix(k, p+"/") })
	v.dirs.del(path.Dir(p))
	v.attrs.del(path.Dir(p))
	v.mu.Unlock()
	v.cache.PutMeta(blockcache.MetaAttr, p, nil)
	v.cache.PutMeta(blockcache.MetaDir, p, nil)
	v.cache.PutMeta(blockcache.MetaDir, path.Dir(p), nil)
	v.cache.PutMeta(blockcache.MetaAttr, path.Dir(p), nil)
}

func (v *FS) setAttr(p string, a wire.Attr) {
	v.setIf(p, a, func() bool { return true })
}

// setFetched caches attributes fetched when the generation was g, unless
// something was invalidated since.
func (v *FS) setFetched(p string, a wire.Attr, g uint64) {
	v.setIf(p, a, func() bool { return v.gen == g })
}

// setOwn caches attributes that a change of this agent's got in reply,
// unless a share told the agent to drop something since the change was
// sent (d, from dropCount). Answers fetched before the change (a listing
// of p's directory under way) are not cached after it either: they may
// hold p's attributes from before it.
func (v *FS) setOwn(p string, a wire.Attr, d uint64) {
	v.setIf(p, a, func() bool {
		v.gen++
		return v.drops == d
	})
}

// setIf caches a as p's attributes if ok (called under v.mu) holds.
func (v *FS) setIf(p string, a wire.Attr, ok func() bool) {
	v.mu.Lock()
	if !ok() {
		v.mu.Unlock()
		return
	}
	v.attrs.put(p, attrEntry{a: a, at: time.Now()})
	v.known.put(p, v.attrs.peek(p))
	v.mu.Unlock()
	v.persistAttr(p, a)
}

func (v *FS) generation() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.gen
}

// dropCount is taken before a change is sent; see setOwn.
func (v *FS) dropCount() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.drops
}

func (v *FS) persistAttr(p string, a wire.Attr) {
	if b, err := wire.Marshal(a); err == nil {
		v.cache.PutMeta(blockcache.MetaAttr, p, b)
	}
}

// persisted returns what an earlier run knew about p.
func (v *FS) persistedAttr(p string) (wire.Attr, bool) {
	b := v.cache.GetMeta(blockcache.MetaAttr, p)
	var a wire.Attr
	if b == nil || wire.Unmarshal(b, &a) != nil {
		return a, false
	}
	return a, true
}

// GetAttr returns the attributes of p (not following a final symlink),
// from the attribute cache while it is fresh under p's consistency mode.
// While p's share is unreachable, what is cached is served however old
// (see offline.go).
func (v *FS) GetAttr(ctx context.Context, p string) (wire.Attr, error) {
	return v.getAttr(ctx, p, true)
}

// getAttr is GetAttr; stale says whether an unreachable share's cached
// attributes may be given.
func (v *FS) getAttr(ctx context.Context, p string, stale bool) (wire.Attr, error) {
	pol := v.opts.rule(p)
	v.mu.Lock()
	e, ok := v.attrs.get(p)
	v.mu.Unlock()
	if ok && v.freshFor(ctx, p, pol, e.at) {
		if e.neg {
			return wire.Attr{}, syscall.ENOENT
		}
		return v.localAttr(p, e.a), nil
	}
	if v.unlisted(ctx, p, pol) {
		return wire.Attr{}, syscall.ENOENT
	}
	if err := v.downErr(ctx, p); err != nil {
		if !stale {
			return wire.Attr{}, err
		}
		return v.staleAttr(p, e, ok, err)
	}
	if v.listParent(ctx, p, pol) {
		v.mu.Lock()
		e, ok := v.attrs.get(p)
		v.mu.Unlock()
		if ok && !e.neg && v.freshFor(ctx, p, pol, e.at) {
			return v.localAttr(p, e.a), nil
		}
		if v.unlisted(ctx, p, pol) {
			return wire.Attr{}, syscall.ENOENT
		}
	}
	if !ok && !pol.Revalidates() {
		// Immutable data is never revalidated: what an earlier run of
		// the agent learnt is still true.
		if a, found := v.persistedAttr(p); found {
			v.mu.Lock()
			v.attrs.put(p, attrEntry{a: a, at: time.Now()})
			v.mu.Unlock()
			return a, nil
		}
	}
	g := v.generation()
	a, err := v.c.Stat(ctx, p)
	if err != nil {
		if stale && unreachable(err) {
			return v.staleAttr(p, e, ok, err)
		}
		if errors.Is(err, fs.ErrNotExist) && pol.Caches() {
			v.mu.Lock()
			if v.gen == g {
				v.attrs.put(p, attrEntry{at: time.Now(), neg: true})
			}
			v.known.del(p)
			v.mu.Unlock()
		}
		return wire.Attr{}, err
	}
	v.setFetched(p, a, g)
	if a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		if key, err := v.Key(ctx, p, a); err == nil {
			v.follow(key, p, a, g)
		}
	}
	return v.localAttr(p, a), nil
}

// KernelTimeout is how long the kernel may keep p's entry and attributes,
// as p's consistency rule says given the attributes the agent holds and
// what the share's poller vouches for. A long timeout under callback is
// noted at the poller, so that a lease that runs out makes the kernel
// forget (kernel.go).
func (v *FS) KernelTimeout(p string) time.Duration {
	pol := v.opts.rule(p)
	var at time.Time
	v.mu.Lock()
	if e, ok := v.attrs.get(p); ok {
		at = e.at
	}
	v.mu.Unlock()
	vo, pl := v.vouch(context.Background(), p, pol)
	d := pol.KernelTimeout(at, time.Now(), vo)
	if d > 0 && pl != nil && pol.OnChange().Recall {
		pl.mu.Lock()
		pl.kernelHeld = true
		pl.mu.Unlock()
	}
	return d
}

// follow keeps the cached data of a file in step with attributes just
// fetched from its share and about to be given to the kernel: data of an
// older version is dropped (the kernel drops its pages when it sees the
// new modification time), so that reads never mix a new size with old
// bytes. Files with unsent data are left alone, and so is everything when
// an invalidation came after a was fetched (generation g). p may be out of date (the
// path an open file was opened with): it is only updated if it still
// names the same file.
func (v *FS) follow(key, p string, a wire.Attr, g uint64) {
	if v.generation() != g {
		return // something was invalidated since a was fetched: it may be old
	}
	ver, _, ok := v.cache.Version(key)
	// Only ever forward: attributes cached before this agent's own
	// write-back moved the data's version on are older, not newer.
	if !ok || a.Version <= ver || v.cache.Unsent(key) {
		return
	}
	v.cache.Validate(key, a.Version, a.Size, "")
	// The path's cached attributes must not take the file back to the
	// older version at the next open.
	v.mu.Lock()
	if e, ok := v.attrs.get(p); ok && v.gen == g && !e.neg && e.a.Ino == a.Ino && e.a.Version != a.Version {
		v.attrs.put(p, attrEntry{a: a, at: time.Now()})
		v.known.put(p, v.attrs.peek(p))
	}
	v.mu.Unlock()
}

// Creator is who a new entry belongs to (see remote.Creator); the mount
// names it for each request it makes on a local user's behalf.
type Creator struct{ Owner, Group string }

// WithCreator returns ctx carrying the creator of what a request makes.
func WithCreator(ctx context.Context, c Creator) context.Context {
	return remote.WithCreator(ctx, remote.Creator(c))
}
