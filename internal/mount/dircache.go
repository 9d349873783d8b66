package mount

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The kernel's copy of a listing. Directories are opened with FUSE's
// readdir cache (FOPEN_CACHE_DIR, with KEEP_CACHE), but under strict and on
// a lent mount: the kernel lists a directory from the copy it kept of the
// last listing read through the agent, and a walk again costs the agent an
// open and a close per directory, no listing. The kernel's copy is kept
// only while the agent's listing is the one it was read from (same fetch
// time, which the agent's mode still trusts): an open that finds another,
// or none the mode trusts, has the kernel drop its copy first, and reads
// the listing through the agent, which revalidates it as its mode says; a
// recall or poll that drops the agent's listing drops the kernel's copy
// too (forgetKernel). The kernel drops its copy itself when this mount
// changes the directory.

// OpendirHandle opens a directory, with the kernel's readdir cache when
// the agent's listing allows it (above).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	dctx, done := detach(ctx)
	defer done()
	n.looked.Store(false)
	h := &dirHandle{n: n}
	if n.m.lent {
		return h, 0, 0
	}
	if !n.v(dctx).KernelListings(n.gpath()) || n.v(dctx).Paged(dctx, n.gpath()) {
		// A large directory is listed a page at a time and not kept
		// (pages.go): the kernel keeps no copy of it either.
		return h, 0, 0
	}
	stamp, ok := n.v(dctx).ListingStamp(dctx, n.gpath())
	n.dirMu.Lock()
	stale := n.cached && !(ok && n.listed.Equal(stamp))
	n.dirMu.Unlock()
	if stale {
		// The kernel's copy is of another listing (this drops the
		// directory's attributes too: they changed with it). It fills
		// its copy again from this open's listing (below).
		_ = n.NotifyContent(0, 0)
		n.dirMu.Lock()
		n.cached = false
		n.dirMu.Unlock()
	}
	return h, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// filled notes the listing the kernel fills its copy from: the one the
// agent holds just after serving it (a listing fetched since would only be
// newer, and its fetch follows an invalidation that drops the kernel's
// copy, or a window that ran out).
func (n *node) filled(ctx context.Context) {
	stamp, ok := n.v(ctx).ListingStamp(ctx, n.gpath())
	n.dirMu.Lock()
	n.cached = true
	n.listed = stamp
	if !ok {
		n.listed = time.Time{} // unknown: the next open drops the copy
	}
	n.dirMu.Unlock()
}

// dirState is what a directory's node knows of the kernel's copy of its
// listing.
type dirState struct {
	dirMu  sync.Mutex
	listed time.Time // the fetch time of the agent's listing the kernel may hold
	cached bool      // the kernel may hold a copy (an open used its cache)
}
