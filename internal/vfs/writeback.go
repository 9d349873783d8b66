package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// writeBack uploads the dirty ranges of key to the share, through a
// stage: the share's file is its old version until the whole of the new
// one is there, and stays so if the write-back fails (a full disk at the
// share included), so that the data, still dirty here, is sent again
// against the version it was written on. With sync (a program's fsync),
// the share makes every step durable. What was sent ahead of the close
// (ahead.go) is in the file's named stage, which this commits.
func (v *FS) writeBack(ctx context.Context, key, p string, h *Handle, sync bool) error {
	h.waitOpen(ctx)
	ranges, mark := v.cache.DirtyAt(key)
	cut := v.cache.IsCut(key)
	stage, _ := v.cache.StageOf(key)
	if len(ranges) == 0 && !cut && stage == "" {
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
	d := v.dropCount()
	// Unless the file was cut here (O_TRUNC), it keeps a size it grew to
	// at the share meanwhile.
	c := remote.Commit{Size: size, KeepLonger: !cut, Sync: sync}
	a, err := v.commitRanges(ctx, key, p, f, ranges, c, h.fetch, func() { v.sent(key) })
	if err != nil {
		if dropped(err) {
			base := f.Attr()
			v.refuse(ctx, key, p, &base, err)
		}
		return err
	}
	fault.Crash("vfs.writeback.before-markclean")
	v.cache.MarkClean(key, ranges, mark, a.Version, a.Size)
	v.setOwn(p, a, d)
	v.mu.Lock()
	v.opened[key] = a.Version
	v.mu.Unlock()
	return nil
}

// inlineMax bounds the dirty data a write-back sends in its commit
// request (one round trip) rather than through a stage.
const inlineMax = 4 << 20

// commitRanges sends the ranges of the cached file key (global path p) to
// the share's file f and commits them there at once, ending as c says
// (remote.Commit: size, mtime, durability). Up to inlineMax
// bytes go in the commit request itself; more go to a stage first, with
// a bandwidth-delay product of blocks in flight, each checked by the share
// against its CRC32C (client.File.WriteExtents), written (if set) called
// after each block the stage took (once, after the commit, for an inline
// one). On any error the share's file is as it
// was and nothing is marked clean. More, or a file with data sent ahead,
// go through the file's named stage (commitStaged). It returns the file's attributes after
// the commit.
func (v *FS) commitRanges(ctx context.Context, key, p string, f remote.File, ranges []blockcache.Range, c remote.Commit, fetch blockcache.Fetcher, written func()) (wire.Attr, error) {
	if name, _ := v.cache.StageOf(key); name != "" {
		return v.commitStaged(ctx, key, p, f, ranges, c, fetch, written)
	}
	var exts []remote.Extent
	var total int64
	for _, r := range ranges {
		if r.Len > 0 {
			exts = append(exts, remote.Extent{Off: r.Off, Len: r.Len})
			total += r.Len
		}
	}
	read := func(b []byte, off int64) (int, error) {
		n, err := v.cache.ReadAt(ctx, key, b, off, fetch)
		if err != nil && !errors.Is(err, io.EOF) {
			return n, fmt.Errorf("reading %s from the cache: %w", p, err)
		}
		return n, nil
	}
	if total <= inlineMax {
		data := make([]byte, 0, total)
		wr := make([]wire.ByteRange, 0, len(exts))
		for _, e := range exts {
			b := make([]byte, e.Len)
			n, err := read(b, e.Off)
			if err != nil {
				return wire.Attr{}, err
			}
			if n > 0 {
				data = append(data, b[:n]...)
				wr = append(wr, wire.ByteRange{Off: e.Off, Len: int64(n)})
			}
		}
		a, err := f.CommitInline(ctx, wr, data, c)
		if err != nil {
			return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
		}
		if written != nil {
			written() // the one request the share took
		}
		return a, nil
	}
	return v.commitStaged(ctx, key, p, f, ranges, c, fetch, written)
}
