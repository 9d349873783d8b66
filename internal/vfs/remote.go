package vfs

import (
	"context"
	"syscall"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// The share handles behind an open file: opened in the background at
// open(2), or when first needed, and a second, read-only one beside a
// write-only handle.

// openRemote opens the share's handle in the background, so that open(2)
// costs no round trip while the file stays usable after it is unlinked or
// renamed over (unlinks through this agent wait for it, see waitOpens).
func (h *Handle) openRemote() {
	h.opening = make(chan struct{})
	h.v.mu.Lock()
	h.v.openingAdd(h)
	h.v.mu.Unlock()
	go func() {
		defer func() {
			h.v.mu.Lock()
			h.v.openingDel(h)
			h.v.mu.Unlock()
			close(h.opening)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = h.remoteFile(ctx, wantsWrite(h.flags) && h.v.opts.Write == WriteThrough)
	}()
}

// waitOpen waits until the background open (if any) is done.
func (h *Handle) waitOpen(ctx context.Context) {
	if h.opening == nil {
		return
	}
	select {
	case <-h.opening:
	case <-ctx.Done():
	}
}

// openedRemote waits for the background open and returns the share
// handle, or nil if there is none (it could not be opened).
func (h *Handle) openedRemote(ctx context.Context) remote.File {
	h.waitOpen(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.remote
}

// remoteFile returns a share handle that can write (write set) or read,
// opening or reopening it as needed. Opens are serialised by openMu, and
// h.mu is not held across their round trip: reads from the cache,
// flushes and stats of the handle do not wait for the share.
func (h *Handle) remoteFile(ctx context.Context, write bool) (remote.File, error) {
	h.openMu.Lock()
	defer h.openMu.Unlock()
	h.mu.Lock()
	f, writeOnly, err := h.held(write)
	h.mu.Unlock()
	if f != nil || err != nil {
		return f, err
	}
	if writeOnly {
		// A write-only handle: read through a second one.
		f, err := h.v.data.Open(ctx, h.path, wire.OpenRead)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		h.reader = f
		h.mu.Unlock()
		return f, nil
	}
	flags := wire.OpenRead
	if write || wantsWrite(h.flags) {
		flags = wire.OpenRead | wire.OpenWrite
	}
	done := h.v.askDeleg(ctx, h.path, h.v.openFlags(h.path, flags))
	defer done()
	if size := h.attr.Size; flags == wire.OpenRead && size > 0 && size <= firstMax && !h.v.cache.Present(h.key, 0) {
		// A small file not cached: its bytes come with the open, and a
		// cold read costs one round trip instead of two (see fetch).
		f, err = h.v.data.OpenFirst(ctx, h.path, h.v.openFlags(h.path, flags), int(min(size, h.v.cache.BlockSize())))
	} else {
		f, err = h.v.data.Open(ctx, h.path, h.v.openFlags(h.path, flags))
	}
	if err != nil && flags&wire.OpenWrite != 0 {
		// Write without read permission on the file itself.
		flags = wire.OpenWrite
		f, err = h.v.data.Open(ctx, h.path, h.v.openFlags(h.path, flags))
		if wire.Permanent(err) {
			// Writing is refused for good: writes through this handle
			// fail from now on (see writable); reads go on through a
			// handle that only reads.
			h.mu.Lock()
			h.writeErr = err
			h.mu.Unlock()
			if !write {
				flags = wire.OpenRead
				f, err = h.v.data.Open(ctx, h.path, flags)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	h.v.noteDeleg(h.path, h.key, f)
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.remote; old != nil {
		if h.reader == nil && h.rflags&wire.OpenRead != 0 {
			h.reader = old // still readable, and maybe in use: keep it until Release
		} else {
			go old.Close(context.Background())
		}
	}
	h.remote, h.rflags = f, flags
	return f, nil
}

// held returns the open share handle that serves write, if there is one,
// or whether the one missing is a second, read-only handle beside a
// write-only one. h.mu is held.
func (h *Handle) held(write bool) (f remote.File, writeOnly bool, err error) {
	switch {
	case h.closed && h.remote == nil && h.reader == nil:
		return nil, false, syscall.EBADF
	case write && h.remote != nil && h.rflags&wire.OpenWrite != 0:
		return h.remote, false, nil
	case write:
		return nil, false, nil
	case h.remote != nil && h.rflags&wire.OpenRead != 0:
		return h.remote, false, nil
	case h.reader != nil:
		return h.reader, false, nil
	}
	return nil, h.remote != nil, nil
}

// firstMax is the largest file whose bytes an open asks for with it.
const firstMax = 256 << 10
