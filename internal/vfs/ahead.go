package vfs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"syscall"

	"pando.dev/pando/internal/blockcache"
)

// Sending ahead. Unsent data may fill half the cache's disk bound
// (cache.DirtyLimit); dirty blocks cannot be evicted. A write that would
// pass the limit first sends the file's oldest dirty blocks to a named
// stage at the share (staged.go), and they become staged: evictable, and
// unsent all the same. So a file larger than the cache is written in
// close and back mode alike; the close sends the rest to the same stage
// and commits it with the file's size. Until then the share's file is its
// old version.

// makeRoom sends ahead what the cache asks before n bytes are written
// through h.
func (h *Handle) makeRoom(ctx context.Context, n int64) error {
	rs := h.v.cache.Ahead(h.key, n)
	if len(rs) == 0 {
		return nil
	}
	return h.sendAhead(ctx, rs)
}

// sendAhead sends the dirty ranges rs of h's file to the share, with the
// file's writes held off meanwhile (a write between the send and the
// marking clean would be lost).
func (h *Handle) sendAhead(ctx context.Context, rs []blockcache.Range) error {
	v := h.v
	if d := v.delegFor(h.path, h.key); d != nil {
		// One write-back of a delegated file at a time.
		d.mu.Lock()
		defer d.mu.Unlock()
	}
	release := v.cache.HoldWrites(h.key)
	defer release()
	// Still dirty: a close may have sent them since they were chosen.
	var todo []blockcache.Range
	for _, r := range rs {
		todo = append(todo, clipTo(r, v.cache.Dirty(h.key))...)
	}
	if len(todo) == 0 {
		return nil
	}
	if err := v.stageAhead(ctx, h, todo); err != nil {
		return err
	}
	var n int64
	for _, r := range todo {
		n += r.Len
	}
	v.cache.SentAhead(n)
	return nil
}

// clipTo returns the parts of r that lie in the ranges rs.
func clipTo(r blockcache.Range, rs []blockcache.Range) []blockcache.Range {
	var out []blockcache.Range
	for _, d := range rs {
		if lo, hi := max(r.Off, d.Off), min(r.End(), d.End()); lo < hi {
			out = append(out, blockcache.Range{Off: lo, Len: hi - lo})
		}
	}
	return out
}

// writeCache writes p at off into the cache as dirty data, making room
// first (makeRoom). When the cache's file system is full all the same
// (other files took it, or other files' unsent data fills the cache), all
// but the newest of the file's dirty blocks are sent ahead and the write
// is tried once more.
func (h *Handle) writeCache(ctx context.Context, p []byte, off int64) error {
	if err := h.makeRoom(ctx, int64(len(p))); err != nil {
		return fmt.Errorf("making room in the cache: %w", err)
	}
	err := h.v.cache.WriteAt(ctx, h.key, p, off, h.fetch)
	if !noSpace(err) {
		return err
	}
	rs := h.v.cache.Oldest(h.key, math.MaxInt64)
	if len(rs) == 0 {
		return err
	}
	if serr := h.sendAhead(ctx, rs); serr != nil {
		return fmt.Errorf("the cache's disk is full, and sending the file's data ahead failed: %w", serr)
	}
	return h.v.cache.WriteAt(ctx, h.key, p, off, h.fetch)
}

func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
