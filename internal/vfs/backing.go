package vfs

import (
	"os"

	"pando.dev/pando/internal/wire"
)

// What the mount needs of a handle to let the kernel read a file straight
// from the cache's data file (FUSE passthrough), and to keep the cache's
// memory for what is worth keeping.

// Backing returns the cache's data file for the kernel to read directly
// (FUSE passthrough) instead of asking for each read, when the handle only
// reads and the cache holds the whole of the version it opened; gen names
// the data file (see cache.Backing). Blocks not yet on disk are written
// (and unchecked ones checked) first, unless that is more than maxWork
// bytes (maxWork >= 0): then Backing fails. The handle keeps the backing
// until Release; the caller closes f once the kernel has it.
func (h *Handle) Backing(maxWork int64) (f *os.File, gen uint64, ok bool) {
	if wantsWrite(h.flags) || h.dirty {
		return nil, 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.backing != 0 {
		return nil, 0, false
	}
	if f, gen, ok = h.v.cache.Backing(h.key, h.attr.Version, maxWork); ok {
		h.backing = gen
	}
	return f, gen, ok
}

// Opened returns the handle's open flags and the file's attributes when
// it was opened.
func (h *Handle) Opened() (flags uint32, a wire.Attr) { return h.flags, h.attr }

// Holdable reports whether the cache can hold the whole file, so that
// later opens may read it directly (see Backing).
func (h *Handle) Holdable() bool { return h.v.cache.Holds(h.attr.Size) }

// Whole reports whether the cache holds the whole of the version this
// handle has open, ready for Backing. With prepare, blocks held only in
// memory are written to disk (and unchecked ones checked) to make it so,
// and the file is loaded into the page cache for the kernel to read.
func (h *Handle) Whole(prepare bool) bool {
	if h.dirty {
		return false
	}
	ver := h.attr.Version
	if v := h.own.Load(); v != 0 {
		ver = v
	}
	if !prepare {
		return h.v.cache.Whole(h.key, ver)
	}
	f, gen, ok := h.v.cache.Backing(h.key, ver, -1)
	if ok {
		f.Close()
		h.v.cache.Unback(h.key, gen)
		h.v.cache.Preload(h.key, ver)
	}
	return ok
}

// Forget drops the cache's copies in memory of the blocks that lie wholly
// in [from, to) (see cache.Forget).
func (h *Handle) Forget(from, to int64) { h.v.cache.Forget(h.key, from, to) }

// Unback gives up the backing that Backing returned.
func (h *Handle) Unback() {
	h.mu.Lock()
	gen := h.backing
	h.backing = 0
	h.mu.Unlock()
	if gen != 0 {
		h.v.cache.Unback(h.key, gen)
	}
}
