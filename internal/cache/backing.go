package cache

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Backing opens key's data file read-only for the kernel to read directly
// (FUSE passthrough), if the file holds the whole of version: every block
// on disk, each one checked against its CRC32C in this run of the agent,
// and nothing dirty. Blocks held only in memory are written out first,
// and blocks that were on disk when the agent started and have not been
// read since are checked now: a bad one is dropped and Backing fails (the
// reader then goes through the cache, which fetches the block again). If
// that work exceeds maxWork bytes of blocks (maxWork >= 0), Backing does
// none of it and fails: an open must not wait long for the disk.
//
// While a backing is out (until Unback with the same gen), the file's
// blocks are not evicted, and a change that drops them (a new version)
// gives the file a new data file instead of punching the one the kernel
// reads: a reader that has it open keeps reading the version it opened,
// as it would from the page cache. gen names the data file: two backings
// with the same gen are the same file.
func (c *Cache) Backing(key string, version uint64, maxWork int64) (f *os.File, gen uint64, ok bool) {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return nil, 0, false
	}
	e.mu.Lock()
	if e.rec.Version != version || len(e.rec.Dirty) > 0 {
		e.mu.Unlock()
		return nil, 0, false
	}
	g := e.gen.Load()
	size := e.rec.Size
	n := (size + c.opts.BlockSize - 1) / c.opts.BlockSize
	var missing, unchecked []int64
	for idx := range n {
		if _, on := e.rec.Blocks[idx]; !on {
			missing = append(missing, idx)
		} else if _, bad := e.unchecked[idx]; bad {
			unchecked = append(unchecked, idx)
		}
	}
	e.mu.Unlock()
	if maxWork >= 0 && int64(len(missing)+len(unchecked))*c.opts.BlockSize > maxWork {
		return nil, 0, false
	}
	for _, idx := range missing {
		blk := c.mem.get(blockID{key, idx})
		if blk == nil {
			blk = e.pendingBlock(idx)
		}
		if blk == nil {
			// Written by the disk writer since (and gone from memory)?
			// The check under e.mu below tells.
			continue
		}
		held := c.hold(e, key, idx, blk, g, nil)
		blk.release()
		if !held {
			return nil, 0, false
		}
		c.writeStaged(blockID{key, idx})
	}
	for _, idx := range unchecked {
		if !c.check(e, idx) {
			return nil, 0, false
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen.Load() != g || e.rec.Version != version || len(e.rec.Dirty) > 0 || e.rec.Size != size {
		return nil, 0, false
	}
	for idx := range n {
		if _, on := e.rec.Blocks[idx]; !on {
			return nil, 0, false
		}
	}
	df, err := c.file(e)
	if err != nil {
		return nil, 0, false
	}
	// The kernel reads up to the data file's end: it must be the file's.
	if st, err := df.Stat(); err != nil || st.Size() != size && df.Truncate(size) != nil {
		return nil, 0, false
	}
	f, err = os.Open(c.dataPath(key))
	if err != nil {
		return nil, 0, false
	}
	if e.inc == 0 {
		e.inc = c.incs.Add(1)
	}
	e.backed++
	return f, e.inc, true
}

// Preload reads key's data file through the page cache once it holds the
// whole of version, so that the kernel's direct reads of it (passthrough)
// find it in memory: blocks of some files are written to disk around the
// page cache (see writeDirect), or were evicted from it since, and this
// puts the file there, off any reader's path.
// It is background work, done only while no read comes through the cache
// (it waits while one has in the last preloadIdle, holding no descriptor
// while it waits before it starts), and one file at a time: a newer
// Preload ends an older one at once, since the file read last is the
// likelier to be read again. A file larger than a quarter of the host's
// memory is left on disk, for the kernel to read as it goes. Close ends a
// preload.
func (c *Cache) Preload(key string, version uint64) {
	if ver, size, ok := c.Version(key); !ok || ver != version || size > c.preloadMax {
		return
	}
	c.preMu.Lock()
	if c.preStop != nil {
		close(c.preStop)
	}
	stop := make(chan struct{})
	c.preStop = stop
	c.preMu.Unlock()
	defer func() {
		c.preMu.Lock()
		if c.preStop == stop {
			c.preStop = nil
		}
		c.preMu.Unlock()
	}()
	if !c.waitIdle(stop) {
		return
	}
	f, gen, ok := c.Backing(key, version, 0)
	if !ok {
		return
	}
	defer c.Unback(key, gen)
	defer f.Close()
	buf := make([]byte, c.opts.BlockSize)
	for off := int64(0); c.waitIdle(stop); {
		n, err := f.ReadAt(buf, off)
		off += int64(n)
		c.stats.preloaded.Add(int64(n))
		if err != nil || n == 0 {
			return
		}
	}
}

// waitIdle waits until no read has come through the cache for
// preloadIdle; it reports false if stop or the cache closed first.
func (c *Cache) waitIdle(stop chan struct{}) bool {
	for {
		select {
		case <-stop:
			return false
		case <-c.preloadQuit:
			return false
		default:
		}
		idle := preloadIdle - time.Since(time.Unix(0, c.lastRead.Load()))
		if idle <= 0 {
			return true
		}
		select {
		case <-stop:
		case <-c.preloadQuit:
		case <-time.After(idle):
		}
	}
}

// preloadBound is the largest file Preload loads: a quarter of the host's
// memory.
func preloadBound() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit) / 4
}

// preloadIdle is how long no read must have come through the cache before
// Preload goes on.
const preloadIdle = 50 * time.Millisecond

// Holds reports whether a file of size bytes fits in the disk layer
// comfortably (in half of it), so that it can stay there whole.
func (c *Cache) Holds(size int64) bool { return size <= c.opts.DiskBytes/2 }

// Whole reports whether Backing would give out key's data file for
// version without writing or checking anything first.
func (c *Cache) Whole(key string, version uint64) bool {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rec.Version != version || len(e.rec.Dirty) > 0 || len(e.unchecked) > 0 {
		return false
	}
	for idx := range (e.rec.Size + c.opts.BlockSize - 1) / c.opts.BlockSize {
		if _, on := e.rec.Blocks[idx]; !on {
			return false
		}
	}
	return true
}

// Unback ends a backing that Backing gave out.
func (c *Cache) Unback(key string, gen uint64) {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.inc == gen && e.backed > 0 {
		e.backed--
	}
	e.mu.Unlock()
}

// check reads block idx of e from disk and compares its CRC32C, without
// keeping it in memory; a bad block is dropped.
func (c *Cache) check(e *entry, idx int64) bool {
	e.mu.Lock()
	info, ok := e.rec.Blocks[idx]
	f, err := c.file(e)
	if !ok || err != nil {
		e.mu.Unlock()
		return false
	}
	e.io++
	e.mu.Unlock()
	buf := make([]byte, info.Len)
	_, rerr := f.ReadAt(buf, idx*c.opts.BlockSize)
	good := (rerr == nil || errors.Is(rerr, io.EOF)) && crc(buf) == info.CRC
	e.mu.Lock()
	defer e.mu.Unlock()
	e.io--
	c.doneFile(e)
	if cur, still := e.rec.Blocks[idx]; !still || cur != info {
		return false
	}
	if good {
		delete(e.unchecked, idx)
		return true
	}
	c.stats.bad.Add(1)
	c.log.Warn("dropping a cached block that failed its checksum", "file", e.key, "block", idx)
	if !e.dirtyBlock(idx, c.opts.BlockSize) {
		delete(e.rec.Blocks, idx)
		c.diskUsed.Add(-c.opts.BlockSize)
		c.touch(e.key)
	}
	return false
}

// detach gives e a new, empty data file when the kernel may be reading
// the current one directly (e.mu held): the old one lives on, unlinked,
// for those readers, and goes when the last of them closes it.
func (c *Cache) detach(e *entry) {
	if e.backed == 0 {
		return
	}
	_ = os.Remove(c.dataPath(e.key))
	if e.f != nil {
		if e.io == 0 {
			e.f.Close()
		} else {
			e.retired = append(e.retired, e.f)
		}
		e.f = nil
	}
	e.backed = 0
	e.inc = c.incs.Add(1)
}
