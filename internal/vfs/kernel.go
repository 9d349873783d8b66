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
// long (callbackKernel): a walk again does not reach the agent at all.
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
const (
	callbackKernel = time.Hour
	kernelWait     = 500 * time.Millisecond
)

// callbackTimeout is how long the kernel may keep p's entry and
// attributes under callback: callbackKernel while the back channel of p's
// share holds its lease (noting that the kernel holds some of the share,
// so that a lease that runs out makes it forget), else nothing. A path
// above the shares (a domain's directory, made of the mount table) is
// held by no share: it is kept for the mode's period, as under window (a
// path walk would otherwise look it up again for every file).
func (v *FS) callbackTimeout(p string, pol Consistency) time.Duration {
	loc, err := v.c.Locate(context.Background(), p)
	if err != nil {
		return 0
	}
	if loc.Share == "" {
		return pol.Period
	}
	pl := v.pollerFor(context.Background(), p, pol)
	if pl == nil {
		return 0
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.callback || pl.lastOK.IsZero() || time.Since(pl.lastOK) >= callbackLease {
		return 0
	}
	pl.kernelHeld = true
	return callbackKernel
}

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
		lapsed := pl.kernelHeld && time.Since(pl.lastOK) >= callbackLease
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
