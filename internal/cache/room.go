package cache

import (
	"errors"
	"fmt"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// Room on the cache's disk. The disk layer's bound (Options.DiskBytes) is
// by default a share of the space its file system has for it; whatever
// the bound, the file system may fill first (other files, a bound set too
// high), and a write that finds it full evicts clean blocks and is tried
// again (withRoom). Dirty blocks cannot be evicted: they are bounded by the
// writers, who send their oldest ones to the share ahead of the close when
// they would pass half the bound (Ahead).

// maxDefaultDisk is the most the disk layer takes unless told otherwise.
const maxDefaultDisk = 10 << 30

// defaultShare is the part of its file system's space (free, and what the
// cache already holds) the disk layer takes by default, in percent.
const defaultShare = 80

// minDiskBlocks is the least the disk layer is given, in blocks.
const minDiskBlocks = 4

// diskBound returns the disk layer's bound for one asked for (asked <= 0:
// none), from the space of the cache directory's file system: by default
// defaultShare percent of its free space and what the cache holds, at most
// maxDefaultDisk; an asked size larger than the file system is capped to
// it, with a warning.
func (c *Cache) diskBound(asked int64) int64 {
	floor := minDiskBlocks * c.opts.BlockSize
	var st unix.Statfs_t
	if err := unix.Statfs(c.opts.Dir, &st); err != nil {
		if asked > 0 {
			return max(asked, floor)
		}
		c.log.Warn("cannot learn the free space of the cache directory; the cache may use 10GiB", "dir", c.opts.Dir, "err", err)
		return maxDefaultDisk
	}
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	total := int64(st.Blocks) * unit
	free := int64(st.Bavail) * unit
	if asked <= 0 {
		return max(floor, min(maxDefaultDisk, (free+c.diskUsed.Load())/100*defaultShare))
	}
	if asked > total {
		c.log.Warn(fmt.Sprintf("the cache size asked for (%s) is more than the file system of %s holds; the cache uses at most %s (set --cache-size lower, or leave it out for %d%% of the free space)",
			mib(asked), c.opts.Dir, mib(total), defaultShare))
		return max(floor, total)
	}
	return max(asked, floor)
}

// mib writes n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// DiskLimit is the disk layer's bound, as set at Open.
func (c *Cache) DiskLimit() int64 { return c.opts.DiskBytes }

// noSpace reports whether err says the file system is full (or the
// user's quota on it spent).
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// withRoom runs write, which puts n bytes on the cache's disk. When the
// file system is full, the least recently used clean blocks are evicted,
// as many as the write needs and a few more (so that a writer does not
// evict for each block), and write is tried again; until it succeeds,
// fails otherwise, or nothing is left to evict. No lock of the cache may
// be held but the disk lock of one entry (e.dmu).
func (c *Cache) withRoom(n int64, write func() error) error {
	for {
		err := write()
		if err == nil || !noSpace(err) {
			return err
		}
		want := n + c.slack()
		var freed int64
		if c.evictLRU(func() bool { return freed >= want }, func() { freed += c.opts.BlockSize }) == 0 {
			return err
		}
		c.stats.full.Add(1)
		c.log.Debug("the cache's file system is full: evicted clean blocks", "bytes", freed)
	}
}

// roomSlack is how many blocks beyond its need an eviction drops, at most
// (see slack).
const roomSlack = 8

// slack is how many bytes beyond its need an eviction drops: roomSlack
// blocks, or a sixteenth of the bound when that is less (one block at
// least), so that a small cache does not lose much of itself at once.
func (c *Cache) slack() int64 {
	return min(roomSlack*c.opts.BlockSize, max(c.opts.BlockSize, c.opts.DiskBytes/16))
}

// evict drops least recently used clean blocks until the disk layer is
// within its bound: first blocks of files nobody has open, then, if that
// is not enough, the least recently used blocks of open files.
func (c *Cache) evict() { c.evictFor(0) }

// evictFor evicts until room more bytes fit within the disk bound. Once
// over it, it evicts roomSlack blocks more, so that a cache kept full by
// a writer or a reader does not look for what to evict at every block.
func (c *Cache) evictFor(room int64) {
	if c.diskUsed.Load()+room <= c.opts.DiskBytes {
		return
	}
	slack := c.slack()
	c.evictLRU(func() bool { return c.diskUsed.Load()+room+slack <= c.opts.DiskBytes }, nil)
}

// evictLRU drops clean blocks, least recently used first (of files
// nobody has open, then of open ones), until enough reports true; each
// one evicted is told to evicted (if set). Blocks that hold dirty data,
// and those of a file the kernel may be reading directly, stay. It
// returns how many blocks it dropped.
func (c *Cache) evictLRU(enough func() bool, evicted func()) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if enough() {
		return 0
	}
	type cand struct {
		e   *entry
		idx int64
		use int64
	}
	var unpinned, pinned []cand
	for _, e := range c.entries {
		e.mu.Lock()
		for idx := range e.rec.Blocks {
			if e.backed > 0 || e.dirtyBlock(idx, c.opts.BlockSize) {
				continue
			}
			u := max(e.rec.Use, e.hit.Load())
			if bu, ok := e.use[idx]; ok {
				u = max(bu, e.hit.Load())
			}
			if e.pins > 0 {
				pinned = append(pinned, cand{e, idx, u})
			} else {
				unpinned = append(unpinned, cand{e, idx, u})
			}
		}
		e.mu.Unlock()
	}
	n := 0
	for _, list := range [][]cand{unpinned, pinned} {
		sort.SliceStable(list, func(i, j int) bool { return list[i].use < list[j].use })
		for _, cd := range list {
			if enough() {
				return n
			}
			cd.e.mu.Lock()
			// Still there, still clean: a write may have made it dirty
			// since it was listed.
			if _, ok := cd.e.rec.Blocks[cd.idx]; ok && cd.e.backed == 0 && !cd.e.dirtyBlock(cd.idx, c.opts.BlockSize) {
				delete(cd.e.rec.Blocks, cd.idx)
				c.diskUsed.Add(-c.opts.BlockSize)
				c.mem.remove(blockID{cd.e.key, cd.idx})
				if f, err := c.file(cd.e); err == nil {
					punchHole(f, cd.idx*c.opts.BlockSize, c.opts.BlockSize)
				}
				c.doneFile(cd.e)
				c.stats.evictions.Add(1)
				c.touch(cd.e.key)
				n++
				if evicted != nil {
					evicted()
				}
			}
			cd.e.mu.Unlock()
		}
	}
	return n
}

// dirtyBlocks counts the blocks of size bs that the sorted, disjoint
// ranges rs touch.
func dirtyBlocks(rs []Range, bs int64) int64 {
	var n int64
	last := int64(-1)
	for _, r := range rs {
		if r.Len <= 0 {
			continue
		}
		first, end := max(r.Off/bs, last+1), (r.End()-1)/bs
		if end >= first {
			n += end - first + 1
		}
		last = max(last, end)
	}
	return n
}

// setDirty replaces e's dirty ranges (e.mu held), keeping the count of
// the cache's dirty blocks.
func (c *Cache) setDirty(e *entry, rs []Range) {
	bs := c.opts.BlockSize
	c.dirty.Add(dirtyBlocks(rs, bs) - dirtyBlocks(e.rec.Dirty, bs))
	e.rec.Dirty = rs
}

// DirtyLimit is how many bytes of blocks with dirty data the cache holds
// before writers send theirs ahead (see Ahead): half the disk layer's
// bound, so that what is read keeps room too.
func (c *Cache) DirtyLimit() int64 {
	return max(2*c.opts.BlockSize, c.opts.DiskBytes/2)
}

// DirtyBytes is the size of the blocks that hold dirty data.
func (c *Cache) DirtyBytes() int64 { return c.dirty.Load() * c.opts.BlockSize }

// Ahead returns the dirty ranges of key to send to the share before n
// more bytes are written to it: none while the cache's dirty blocks and
// the ones the write may add fit within DirtyLimit; otherwise key's
// oldest dirty blocks (see Oldest), enough to make room and at least a
// quarter of the limit, so that a writer sends in batches, not a block at
// a time. Once at the share and marked clean (MarkClean) they may be
// evicted. A file whose dirty data is sent while others' fills the limit
// gets nothing to send; its write then goes on, and finds room by
// eviction or fails.
func (c *Cache) Ahead(key string, n int64) []Range {
	bs := c.opts.BlockSize
	limit := c.DirtyLimit() / bs
	over := c.dirty.Load() + (n+bs-1)/bs + 1 - limit
	if over <= 0 {
		return nil
	}
	return c.Oldest(key, max(over, limit/4))
}

// Oldest returns the dirty ranges of up to blocks of key's dirty blocks,
// those least recently written (or read) first, in file order; never the
// most recently used one, so that sending them leaves the file dirty: its
// close still sends the rest, and the file's size with it.
func (c *Cache) Oldest(key string, blocks int64) []Range {
	bs := c.opts.BlockSize
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	type dblock struct{ idx, use int64 }
	var list []dblock
	last := int64(-1)
	for _, r := range e.rec.Dirty {
		for idx := max(r.Off/bs, last+1); idx <= (r.End()-1)/bs; idx++ {
			list = append(list, dblock{idx, e.use[idx]})
			last = idx
		}
	}
	if len(list) < 2 {
		return nil
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].use < list[j].use })
	list = list[:min(int64(len(list)-1), blocks)]
	sort.Slice(list, func(i, j int) bool { return list[i].idx < list[j].idx })
	var out []Range
	ri := 0
	for _, b := range list {
		lo, hi := b.idx*bs, (b.idx+1)*bs
		for ri < len(e.rec.Dirty) && e.rec.Dirty[ri].End() <= lo {
			ri++
		}
		for k := ri; k < len(e.rec.Dirty) && e.rec.Dirty[k].Off < hi; k++ {
			r := e.rec.Dirty[k]
			a, z := max(lo, r.Off), min(hi, r.End())
			if j := len(out); j > 0 && out[j-1].End() == a {
				out[j-1].Len += z - a
			} else {
				out = append(out, Range{Off: a, Len: z - a})
			}
		}
	}
	return out
}

// HoldWrites holds off writes and truncates of key (WriteAt, Truncate)
// until the function it returns is called: for a send of dirty ranges
// that marks them clean afterwards, which a write in between would
// otherwise have marked clean unsent.
func (c *Cache) HoldWrites(key string) func() {
	c.mu.Lock()
	e := c.get(key)
	c.mu.Unlock()
	e.wmu.Lock()
	return e.wmu.Unlock
}

// SentAhead counts n bytes of dirty data that a writer sent to the share
// ahead of its close to make room (see Ahead).
func (c *Cache) SentAhead(n int64) { c.stats.ahead.Add(n) }

// DirtyBytesOf is the size of key's blocks that hold dirty data.
func (c *Cache) DirtyBytesOf(key string) int64 {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return dirtyBlocks(e.rec.Dirty, c.opts.BlockSize) * c.opts.BlockSize
}

// AddsDirty is how many bytes of blocks a write of n bytes at off to key
// would make dirty that are not dirty yet.
func (c *Cache) AddsDirty(key string, off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	bs := c.opts.BlockSize
	var have []Range
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		have = overlap(e.rec.Dirty, Range{Off: off / bs * bs, Len: (off+n+bs-1)/bs*bs - off/bs*bs})
		e.mu.Unlock()
	}
	return ((off+n-1)/bs - off/bs + 1 - dirtyBlocks(have, bs)) * bs
}
