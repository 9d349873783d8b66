package vfs

import (
	"context"
	"path"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/consistency"
)

// poller polls one share's invalidation buffer for this agent (GVFS's
// invalidation polling). Cached attributes and listings of that share stay
// valid between polls unless a poll names them; if polls fail, entries
// fall back to the window rule after one missed period, so an unreachable
// share never makes the agent trust old answers for long.
type poller struct {
	v      *FS
	share  string
	gpath  string // a global path of a mount of the share, to address it
	period time.Duration
	// callback: long polls back to back instead of a poll every period;
	// the cache is trusted for the lease after a poll that succeeded, and
	// not at all without one (the share recalls before changes complete).
	callback bool

	mu         sync.Mutex
	since      uint64
	epoch      uint64
	validSince time.Time // entries fetched before this are void (last force)
	lastOK     time.Time // when the last successful poll was sent
	polls      uint64
	kernelHeld bool          // the kernel was given long timeouts (KernelTimeout)
	first      chan struct{} // closed when the first poll was answered, or failed
	firstOnce  sync.Once
	done       chan struct{} // closed when run returns
}

// pollerFor returns the running poller for the share behind p, starting
// one if needed, under p's rule pol (which is polled).
func (v *FS) pollerFor(ctx context.Context, p string, pol consistency.Rule) *poller {
	loc, err := v.c.Locate(ctx, p)
	if err != nil || loc.Share == "" {
		return nil
	}
	return v.pollerAt(loc.Share, loc.Prefix, pol)
}

// pollerAt is pollerFor of a located path.
func (v *FS) pollerAt(share, gpath string, pol consistency.Rule) *poller {
	v.mu.Lock()
	defer v.mu.Unlock()
	if pl := v.pollers[share]; pl != nil {
		return pl
	}
	pl := &poller{v: v, share: share, gpath: gpath, period: pol.PollEvery(), callback: pol.OnChange().Recall,
		first: make(chan struct{}), done: make(chan struct{})}
	v.pollers[share] = pl
	go pl.run()
	return pl
}

// Connect starts, before the file system is used, the polls of the shares
// whose paths are under poll or callback, and waits for their first
// answers until ctx ends; then it validates the listings an earlier run
// persisted (warm.go). A share's first answer voids what was fetched
// before it (the share records changes for the agent only from then on),
// so that a mount used at once would otherwise fetch its first files
// twice.
func (v *FS) Connect(ctx context.Context) {
	mounts, err := v.c.MountTable(ctx)
	if err != nil {
		return
	}
	held := v.persisted(ctx)
	paths := make([]string, 0, len(mounts)+len(v.opts.Policies))
	for _, m := range mounts {
		paths = append(paths, m.Prefix)
	}
	for _, pol := range v.opts.Policies {
		paths = append(paths, pol.Prefix)
	}
	var pls []*poller
	for _, p := range paths {
		if pol := v.opts.rule(p); pol.PollEvery() > 0 {
			if pl := v.pollerFor(ctx, p, pol); pl != nil {
				pls = append(pls, pl)
			}
		}
	}
	for _, pl := range pls {
		select {
		case <-pl.first:
		case <-ctx.Done():
			return
		}
	}
	v.warm(ctx, held)
}

// answered reports whether the poller's first poll was answered (or
// failed: then the cache is not trusted anyway).
func (pl *poller) answered() bool {
	select {
	case <-pl.first:
		return true
	default:
		return false
	}
}

// vouch returns what the poller of p's share says of the cache, for p's
// rule pol to judge by, and the poller (started if need be). It is zero,
// and the poller nil, when pol is not polled or p cannot be located;
// Above for a path above the shares.
func (v *FS) vouch(ctx context.Context, p string, pol consistency.Rule) (consistency.Vouch, *poller) {
	if pol.PollEvery() == 0 {
		return consistency.Vouch{}, nil
	}
	loc, err := v.c.Locate(ctx, p)
	if err != nil {
		return consistency.Vouch{}, nil
	}
	if loc.Share == "" {
		return consistency.Vouch{Above: true}, nil
	}
	pl := v.pollerAt(loc.Share, loc.Prefix, pol)
	return pl.vouch(), pl
}

// vouch is what the poller knows now of its share.
func (pl *poller) vouch() consistency.Vouch {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.vouchLocked()
}

// vouchLocked is vouch with pl.mu held.
func (pl *poller) vouchLocked() consistency.Vouch {
	return consistency.Vouch{LastOK: pl.lastOK, ValidSince: pl.validSince, Every: pl.period, Recalls: pl.callback}
}

// leaseOK reports whether the back channel's lease holds now.
func (pl *poller) leaseOK(now time.Time) bool {
	return pl.vouch().LeaseHeld(now)
}

// Staleness is how old the newest confirmation from the share is.
func (pl *poller) staleness(now time.Time) time.Duration {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.lastOK.IsZero() {
		return -1
	}
	return now.Sub(pl.lastOK)
}

func (pl *poller) run() {
	defer close(pl.done)
	if pl.callback {
		go pl.watchLease()
		pl.listen()
		return
	}
	pl.poll() // at once: the first poll sets up the session
	pl.firstOnce.Do(func() { close(pl.first) })
	t := time.NewTicker(pl.period)
	defer t.Stop()
	for {
		select {
		case <-pl.v.quit:
			return
		case <-t.C:
			pl.poll()
		}
	}

}

// listen keeps a long poll outstanding at the share: the back channel of
// callback mode, riding the agent's own connection. When it fails, the
// cache is not trusted (every answer is revalidated) until it works again.
func (pl *poller) listen() {
	for {
		select {
		case <-pl.v.quit:
			return
		default:
		}
		err := pl.poll()
		pl.firstOnce.Do(func() { close(pl.first) })
		if err != nil {
			select {
			case <-pl.v.quit:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// goodbye ends a callback session at the share: a poll with no wait and
// no lease acknowledges everything and tells the share that this agent
// trusts nothing any more, so that changes and recalls stop waiting for
// this session (otherwise they would wait for its lease to run out). The
// share then ends the long poll it holds for the session; once that has
// returned, the goodbye is said again, in case the poller had sent another
// long poll meanwhile.
func (pl *poller) goodbye(ctx context.Context) {
	if pl.v.c.DownErr(pl.share) != nil {
		return // it cannot be told; it waits out the lease, as for a crash
	}
	say := func() error {
		pl.mu.Lock()
		since := pl.since
		pl.mu.Unlock()
		_, err := pl.v.c.GetInvWait(ctx, pl.gpath, since, 0, 0, 0)
		return err
	}
	if err := say(); err != nil {
		pl.v.log.Debug("ending the callback session failed; the share waits out its lease", "share", pl.share, "err", err)
		return
	}
	select {
	case <-pl.done:
	case <-ctx.Done():
		return
	}
	_ = say()
}

func (pl *poller) poll() error {
	for round := 0; round < 64; round++ {
		sent := time.Now()
		pl.mu.Lock()
		since := pl.since
		pl.mu.Unlock()
		var wait, lease time.Duration
		if pl.callback {
			wait, lease = callbackWait, consistency.Lease
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(pl.period, 10*time.Second)+wait)
		resp, err := pl.v.c.GetInvWait(ctx, pl.gpath, since, 4096, wait, lease)
		cancel()
		if err != nil {
			pl.v.log.Debug("invalidation poll failed", "share", pl.share, "err", err)
			return err
		}
		pl.mu.Lock()
		force := resp.Force || (pl.epoch != 0 && resp.Epoch != pl.epoch)
		pl.epoch, pl.since = resp.Epoch, resp.Stamp
		pl.polls++
		pl.mu.Unlock()
		for _, r := range resp.Recalls {
			go pl.v.recall(pl, r)
		}
		// Under callback the kernel forgets what changed before the
		// next poll acknowledges it (kernel.go).
		var kernel []<-chan struct{}
		if force {
			pl.v.forgetShare(pl.share)
			if pl.callback {
				pl.mu.Lock()
				pl.kernelHeld = false
				pl.mu.Unlock()
				kernel = append(kernel, pl.v.forgetShareKernel(pl.share))
			}
			if pl.callback {
				go pl.v.reclaimDelegs(pl.share)
			}
			pl.mu.Lock()
			pl.validSince = sent
			if pl.callback {
				// Changes are recorded for this session only from when
				// the share handled this poll: trust only what is
				// fetched after its reply.
				pl.validSince = time.Now()
			}
			pl.mu.Unlock()
		} else {
			for _, rel := range resp.Paths {
				for _, g := range pl.v.globals(pl.share, rel) {
					if d := pl.v.invalidate(g); d != nil {
						kernel = append(kernel, d)
					}
				}
			}
		}
		waitKernel(kernel)
		pl.mu.Lock()
		pl.lastOK = sent
		pl.mu.Unlock()
		if !resp.Again {
			return nil
		}
	}
	return nil
}

// globals maps a share-relative path to the global paths that show it.
func (v *FS) globals(share, rel string) []string {
	mounts, err := v.c.MountTable(context.Background())
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		if m.Share != share {
			continue
		}
		sp := strings.Trim(m.SharePath, "/")
		switch {
		case sp == "":
			out = append(out, path.Join(m.Prefix, rel))
		case rel == sp:
			out = append(out, m.Prefix)
		case strings.HasPrefix(rel, sp+"/"):
			out = append(out, path.Join(m.Prefix, strings.TrimPrefix(rel, sp+"/")))
		}
	}
	return out
}

// invalidate drops what is cached about global path g (its attributes and,
// for a directory, its listing), here and persisted, and tells the kernel.
// Under callback the kernel is told on a goroutine of its own (kernel.go),
// and the channel returned is closed when it has been; nil otherwise.
func (v *FS) invalidate(g string) <-chan struct{} {
	v.mu.Lock()
	v.gen++
	v.drops++
	v.attrs.del(g)
	// The listing also gave the entries' attributes: they go with it (a
	// recall of a directory covers what its listing said).
	var kids []string
	if d, ok := v.dirs.get(g); ok {
		for _, e := range d.entries {
			kid := path.Join(g, e.Name)
			v.attrs.del(kid)
			kids = append(kids, kid)
		}
	}
	v.dirs.del(g)
	v.mu.Unlock()
	notify := func() {
		v.notifyKernel(g, false)
		for _, kid := range kids {
			v.notifyKernel(kid, false)
		}
	}
	if v.opts.rule(g).OnChange().Recall {
		done := make(chan struct{})
		go func() {
			defer close(done)
			notify()
		}()
		return done
	}
	notify()
	return nil
}

// forgetShare drops everything cached about a share's paths.
func (v *FS) forgetShare(share string) {
	v.mu.Lock()
	v.drops++
	v.mu.Unlock()
	mounts, _ := v.c.MountTable(context.Background())
	for _, m := range mounts {
		if m.Share == share {
			v.forgetTree(m.Prefix)
		}
	}
}

// Staleness reports, per share under poll, how long ago the share last
// confirmed the agent's cache (-1 before the first poll).
func (v *FS) Staleness() map[string]time.Duration {
	v.mu.Lock()
	ps := make([]*poller, 0, len(v.pollers))
	for _, p := range v.pollers {
		ps = append(ps, p)
	}
	v.mu.Unlock()
	out := make(map[string]time.Duration, len(ps))
	now := time.Now()
	for _, p := range ps {
		out[p.share] = p.staleness(now)
	}
	return out
}
