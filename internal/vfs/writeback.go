package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/wire"
)

// writeBack uploads the dirty ranges of key to the share.
func (v *FS) writeBack(ctx context.Context, key, p string, h *Handle) error {
	return v.writeBackRanges(ctx, key, p, h, nil)
}

// writeBackRanges uploads the dirty ranges of key to the share; with
// ahead, only those (dirty ranges sent ahead of the close, see makeRoom),
// and the file's size is left to the close.
func (v *FS) writeBackRanges(ctx context.Context, key, p string, h *Handle, ahead []cache.Range) error {
	h.waitOpen(ctx)
	ranges := v.cache.Dirty(key)
	if ahead != nil {
		ranges = ahead
	}
	if len(ranges) == 0 {
		return nil
	}
	defer v.beginSend(key)()
	fault.Crash("vfs.writeback.before-send")
	f, err := h.remoteFile(ctx, true)
	if err != nil {
		err = fmt.Errorf("writing %s back to its share: %w", p, err)
		if wire.Permanent(err) {
			v.refuse(ctx, key, p, &h.attr, err)
		}
		return err
	}
	_, size, _ := v.cache.Version(key)
	if ahead != nil {
		size = 0
	}
	d := v.dropCount()
	// Each block the share wrote moves the cache's version along with
	// the share's, so that after a crash the data is known as this
	// agent's (see sent).
	a, err := v.sendRanges(ctx, key, p, f, ranges, size, h.fetch, func() { v.sent(key, f) })
	if err != nil {
		if wire.Permanent(err) {
			base := f.Attr()
			v.refuse(ctx, key, p, &base, err)
		}
		return err
	}
	fault.Crash("vfs.writeback.before-markclean")
	v.cache.MarkClean(key, ranges, a.Version, a.Size)
	v.setOwn(p, a, d)
	v.mu.Lock()
	v.opened[key] = a.Version
	v.mu.Unlock()
	return nil
}

// sendRanges sends the ranges of the cached file key (global path p) to
// the share's file f, with a bandwidth-delay product of blocks in flight,
// each checked by the share against its CRC32C (client.File.WriteExtents),
// and extends the file to size when only the cache saw it grow; written
// (if set) is called after each block the share wrote. It stops
// at the first failure; it marks nothing clean, so on any error the data
// stays dirty in the cache. It returns the file's attributes at the share
// afterwards: those the last write's reply carried, asked for only when
// the replies did not carry them.
func (v *FS) sendRanges(ctx context.Context, key, p string, f *client.File, ranges []cache.Range, size int64, fetch cache.Fetcher, written func()) (wire.Attr, error) {
	exts := make([]client.Extent, len(ranges))
	for i, r := range ranges {
		exts[i] = client.Extent{Off: r.Off, Len: r.Len}
	}
	var rerr error
	a, err := f.WriteExtents(ctx, exts, func(b []byte, off int64) (int, error) {
		n, err := v.cache.ReadAt(ctx, key, b, off, fetch)
		if err != nil && !errors.Is(err, io.EOF) {
			rerr = fmt.Errorf("reading %s from the cache: %w", p, err)
			return n, rerr
		}
		return n, err
	}, written)
	if err != nil {
		if rerr != nil && errors.Is(err, rerr) {
			return wire.Attr{}, rerr
		}
		return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
	}
	if a.Ino == 0 || a.Version == 0 {
		// No reply carried attributes: ask.
		if a, err = f.Stat(ctx); err != nil {
			return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
		}
	}
	if a.Size < size {
		// A file extended by a truncate that only the cache saw.
		if err := f.Truncate(ctx, size); err != nil {
			return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
		}
		// The truncate's reply carries the attributes (File.Attr keeps
		// the newest version it saw).
		if a = f.Attr(); a.Size != size {
			if a, err = f.Stat(ctx); err != nil {
				return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
			}
		}
	}
	return a, nil
}
