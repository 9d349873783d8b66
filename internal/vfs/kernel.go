package vfs

import (
	"context"
	"time"
)

// The kernel's cache under callback. While a share's back channel holds
// its lease, everything the agent caches of that share is held at the
// share too (a read delegation: the share recalls it before a change
// through any agent completes, and at once for a change at the share), so
// the kernel may keep the entries and attributes the agent gives it for
// long (consistency.CallbackKernel; KernelTimeout notes it at the poller):
// a walk again does not reach the agent at all.
// What keeps that from weakening the promise is the agent telling the
// kernel to forget:
//   - a recall (a changed path, or a directory whose listing changed) has
//     the kernel drop the path's entry, attributes and pages, and those
//     of the entries the agent's listing of it had, before the recall is
//     acknowledged (bounded by kernelWait, below);
//   - a force (the share restarted, or thought this agent gone) has the
//     kernel drop everything of the share;
//   - a lease that runs out (the back channel broken) does too, before the
//     share stops waiting for this agent (it waits the lease plus 0.5 s).
//
// The kernel takes a directory's lock to drop an entry in it (FUSE's
// NOTIFY_INVAL_ENTRY), and a request of this agent's may hold that lock
// while it waits at the share for another agent, which waits for this
// agent's acknowledgement: sent from inside a request, or waited for
// without bound, a notification could deadlock. So notifications run on
// their own goroutine, and the acknowledgement waits for them at most
// kernelWait; a notification for something the kernel forgot is a no-op
// (the edge finds no inode for it).
const kernelWait = 500 * time.Millisecond

// watchLease runs beside a callback poller: when the lease runs out while
// the kernel holds entries of the share, the kernel is told to forget
// them all (the agent itself trusts nothing of the share by then: fresh).
func (pl *poller) watchLease() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-pl.v.quit:
			return
		case <-t.C:
		}
		pl.mu.Lock()
		lapsed := pl.kernelHeld && !pl.vouchLocked().LeaseHeld(time.Now())
		if lapsed {
			pl.kernelHeld = false
		}
		pl.mu.Unlock()
		if lapsed {
			pl.v.log.Debug("callback lease ran out; the kernel forgets the share", "share", pl.share)
			pl.v.forgetShareKernel(pl.share)
		}
	}
}

// forgetShareKernel has the kernel forget everything of a share's mounts,
// on its own goroutine; the channel is closed when it is done.
func (v *FS) forgetShareKernel(share string) <-chan struct{} {
	done := make(chan struct{})
	mounts, _ := v.c.MountTable(context.Background())
	var prefixes []string
	for _, m := range mounts {
		if m.Share == share {
			prefixes = append(prefixes, m.Prefix)
		}
	}
	go func() {
		defer close(done)
		for _, p := range prefixes {
			v.notifyKernel(p, true)
		}
	}()
	return done
}

// waitKernel waits for the kernel notifications in dones, at most
// kernelWait in all (see above: they may wait for a directory lock that a
// request waiting at the share holds).
func waitKernel(dones []<-chan struct{}) {
	if len(dones) == 0 {
		return
	}
	t := time.NewTimer(kernelWait)
	defer t.Stop()
	for _, d := range dones {
		select {
		case <-d:
		case <-t.C:
			return
		}
	}
}

// KernelListings reports whether the kernel may keep its own copy of p's
// listing (FUSE's readdir cache) while the agent holds the same listing
// and trusts it (ListingStamp): not where p's rule caches nothing.
func (v *FS) KernelListings(p string) bool { return v.opts.rule(p).Caches() }

// OpenStatTimeout is how long the kernel may keep the attributes of the
// open file at p that it asked for (fstat), if p's rule lets it keep them
// at all (consistency.Rule.KernelOpenStat).
func (v *FS) OpenStatTimeout(p string) (time.Duration, bool) {
	if !v.opts.rule(p).KernelOpenStat() {
		return 0, false
	}
	return v.KernelTimeout(p), true
}
