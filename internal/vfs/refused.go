package vfs

import (
	"context"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// Written data that its share refuses for good (wire.Permanent: rights,
// quota, a read-only share, a file too large, a credential revoked) leaves
// the cache at once: sent again it would meet the same answer, and kept it
// would show this host's readers bytes the share never took. The file
// reverts to the share's version: the blocks the data was written into
// are dropped and fetched anew when read, its attributes are asked for
// again, and the kernel forgets its pages. The program learns it at the
// write (the open for writing was refused: see Handle.writable) or at
// close; when nobody waits for the data any more (replay of unsent data,
// a write delegation sent back later), the agent logs it. Every other
// failure keeps the data and sends it again, as before.

// refuse drops the dirty data of key (global path p) that its share
// refused (err). base is what the share last said of the file, if known:
// used when the share cannot be asked now (the credential was revoked).
func (v *FS) refuse(ctx context.Context, key, p string, base *wire.Attr, err error) {
	if !v.cache.Pinned(key) {
		// Nobody has it open: the next open fetches it as new.
		v.cache.Drop(key)
	} else {
		var ver uint64
		var size int64
		if base != nil {
			ver, size = base.Version, base.Size
		}
		if a, serr := v.c.Stat(ctx, p); serr == nil && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
			if k, kerr := v.Key(ctx, p, a); kerr == nil && k == key {
				ver, size = a.Version, a.Size
			}
		}
		if rerr := v.cache.Revert(key, ver, size); rerr != nil {
			v.log.Warn("cannot record in the cache that refused data was dropped", "path", p, "err", rerr)
		}
	}
	v.mu.Lock()
	// The next open must not keep the kernel's pages: they hold the
	// refused bytes.
	delete(v.opened, key)
	v.mu.Unlock()
	v.forget(p)
	// Not from here: the kernel may hold the pages locked for the very
	// write that is being served.
	go v.notifyKernel(p, false)
	v.log.Warn("the share refused written data; it is dropped and the file is the share's version again", "path", p, "err", err)
	v.refusals.Add(1) // last: who sees it sees the rest done
}

// Refusals counts the files whose written data the agent dropped because
// their share refused it for good.
func (v *FS) Refusals() uint64 { return v.refusals.Load() }

// Writable reports why data may not be written through the handle (see
// writable): an edge that cannot fail a later write with the share's
// refusal (NFS answers a WRITE before its data is sent) asks at open.
func (h *Handle) Writable(ctx context.Context) error { return h.writable(ctx) }

// writable reports why data may not be written into the cache for the
// handle: the share refused for good to open the file for writing (the
// open started at open(2) is waited for). A share that could not be
// reached is no reason: the data is kept and sent when it can be.
func (h *Handle) writable(ctx context.Context) error {
	h.waitOpen(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writeErr
}
