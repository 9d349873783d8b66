package vfs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"pando.dev/pando/internal/wire"
)

// Byte-range locks (fcntl and flock) are held by the share, for the share
// handle of the open file they are taken through (see wire.OpLock), so they
// hold across agents. As NFS does, the agent makes them mean something for
// the data as well: taking a lock revalidates the file, so that what the
// previous holder wrote is read; releasing one first sends what was written
// under it.

// LockRange is a lock's type (wire.LockRead, LockWrite or LockUnlock) and
// its bytes: Len from Start, 0 meaning to the end of the file.
type LockRange struct {
	Type       uint8
	Start, Len int64
}

// Lock takes or releases a lock. A conflicting lock fails it with
// wire.CodeLocked, unless wait is set: then it tries again until the lock
// is free, or fails with EINTR once interrupted is closed (the caller was
// interrupted by a signal). flock marks a lock taken by flock(2), which
// lasts until the last close of the open file rather than the first (see
// CloseLocks).
func (h *Handle) Lock(ctx context.Context, l LockRange, wait bool, interrupted <-chan struct{}, flock bool) error {
	if l.Type == wire.LockUnlock {
		// What was written under the lock reaches the share before
		// another holder can take it.
		if err := h.Flush(ctx); err != nil {
			return err
		}
	}
	f, err := h.remoteFile(ctx, l.Type == wire.LockWrite)
	if err != nil {
		return err
	}
	g := h.v.generation()
	for pause := 2 * time.Millisecond; ; pause = min(2*pause, 250*time.Millisecond) {
		err = f.Lock(ctx, l.Type, l.Start, l.Len)
		if !wait || wire.CodeOf(err) != wire.CodeLocked {
			break
		}
		select {
		case <-interrupted:
			return syscall.EINTR
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	switch {
	case l.Type == wire.LockUnlock && l.Start == 0 && l.Len == 0:
		h.posixLocks, h.flocks = false, false
	case l.Type != wire.LockUnlock && flock:
		h.flocks = true
	case l.Type != wire.LockUnlock:
		h.posixLocks = true
	}
	h.mu.Unlock()
	if l.Type == wire.LockUnlock {
		return nil
	}
	// Taken: read what the previous holder left, not a cached copy.
	a, err := f.Stat(ctx)
	if err != nil {
		return nil // the lock stands; the file is revalidated as its mode says
	}
	_, old := h.Opened()
	h.v.setFetched(h.path, a, g)
	h.v.follow(h.key, h.path, a, g)
	if a.Version != old.Version {
		h.v.notifyKernel(h.path, false)
	}
	return nil
}

// TestLock returns a lock that would conflict with l, or one of Type
// wire.LockUnlock.
func (h *Handle) TestLock(ctx context.Context, l LockRange) (LockRange, error) {
	f, err := h.remoteFile(ctx, l.Type == wire.LockWrite)
	if err != nil {
		return LockRange{}, err
	}
	r, err := f.TestLock(ctx, l.Type, l.Start, l.Len)
	return LockRange{Type: r.Type, Start: r.Start, Len: r.Len}, err
}

// CloseLocks is called at each close(2) of the file, after Flush: POSIX
// locks go with the first close of the file by their process, flock locks
// only with the last (Release closes the share handle, and with it every
// lock). A handle holding both keeps them until then.
func (h *Handle) CloseLocks(ctx context.Context) error {
	h.mu.Lock()
	posix, flocks, f := h.posixLocks, h.flocks, h.remote
	h.mu.Unlock()
	if !posix || flocks || f == nil {
		return nil
	}
	err := f.Lock(ctx, wire.LockUnlock, 0, 0)
	if err != nil && !errors.Is(err, syscall.EBADF) {
		return err
	}
	h.mu.Lock()
	h.posixLocks = false
	h.mu.Unlock()
	return nil
}
