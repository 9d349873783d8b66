package cache

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/dio"
)

// stage makes a fetched block readable at once (memory) and queues it for
// the disk writer. When the writer is behind, the block stays in memory
// only: it is a cache, and readers must not wait for the disk.
// It reports false, caching nothing, if the entry changed since gen.
func (c *Cache) stage(e *entry, key string, idx int64, blk *block, gen uint64, sum *blockcache.Sum) bool {
	if !c.hold(e, key, idx, blk, gen, sum) {
		return false
	}
	select {
	case c.staged <- blockID{key, idx}:
	default:
		e.dropPending(idx)
	}
	return true
}

// hold makes a block readable from memory and marks it as waiting for
// the disk (the caller writes it, or has the writer do so). It reports
// false, holding nothing, if the entry changed since gen.
// sum, if not nil, may carry the block's CRC32C. The memory layer and the
// queue hold blk for themselves.
func (c *Cache) hold(e *entry, key string, idx int64, blk *block, gen uint64, sum *blockcache.Sum) bool {
	e.mu.Lock()
	if e.gen.Load() != gen {
		e.mu.Unlock()
		return false
	}
	if idx*c.opts.BlockSize >= e.rec.Size {
		// Cut off by a truncate since the reader saw the size: the
		// bytes are for that reader only.
		e.mu.Unlock()
		return true
	}
	c.mem.put(blockID{key, idx}, blk)
	e.pmu.Lock()
	if e.pending == nil {
		e.pending = make(map[int64]staged)
	}
	st := staged{blk: blk.hold()}
	if sum != nil && sum.OK && sum.N == len(blk.b) {
		st.sum, st.summed = sum.CRC, true
	}
	if old := e.pending[idx].blk; old != nil {
		old.release()
	}
	e.pending[idx] = st
	e.pmu.Unlock()
	e.mu.Unlock()
	return true
}

// writer writes staged blocks to disk and records them in the index.
func (c *Cache) writer() {
	defer close(c.writerDone)
	for {
		var id blockID
		select {
		case id = <-c.staged:
		case <-c.writerQuit:
			// Write what is queued, then stop.
			for {
				select {
				case id = <-c.staged:
					c.writeStaged(id)
				default:
					return
				}
			}
		}
		c.writeStaged(id)
	}
}

func (c *Cache) writeStaged(id blockID) {
	c.mu.Lock()
	e := c.entries[id.key]
	c.mu.Unlock()
	if e == nil || !e.isPending(id.idx) {
		return // dropped, superseded or written meanwhile
	}
	// Make room first: evicting only after the block is recorded
	// would let the cache's disk use pass its bound meanwhile.
	c.evictFor(c.opts.BlockSize)
	// The write holds the entry's disk lock, not e.mu: readers ask for
	// the file's size and blocks under e.mu, and must not wait for the
	// disk.
	e.dmu.Lock()
	defer e.dmu.Unlock()
	e.mu.Lock()
	blk := e.pendingBlock(id.idx)
	_, had := e.rec.Blocks[id.idx]
	e.mu.Unlock()
	if blk == nil {
		return // dropped or superseded meanwhile
	}
	defer blk.release()
	data := blk.b
	if had {
		// A write recorded the block since it was staged: the staged
		// bytes are older.
		e.dropPendingIf(id.idx, blk)
		return
	}
	err := c.withRoom(int64(len(data)), func() error { return c.writeDirect(e, data, id.idx*c.opts.BlockSize) })
	e.mu.Lock()
	_, had = e.rec.Blocks[id.idx]
	st, still := e.stagedAs(id.idx, blk)
	switch {
	case err != nil:
		c.log.Warn("cannot write to the cache", "err", err)
	case had:
		// Recorded by a write meanwhile (cannot happen while we hold
		// e.dmu, which writes take too): leave it.
	case still:
		// Still the staged block: record it.
		c.diskUsed.Add(c.opts.BlockSize)
		e.rec.Blocks[id.idx] = blockInfo{Len: uint32(len(data)), CRC: st.crc()}
		delete(e.unchecked, id.idx)
		e.touchBlock(id.idx, c.clock.Add(1))
	default:
		// Dropped (truncate, new version) while it was written: free
		// the space it took, which the index does not count.
		if f, ferr := c.file(e); ferr == nil {
			punchHole(f, id.idx*c.opts.BlockSize, c.opts.BlockSize)
		}
		c.doneFile(e)
	}
	e.dropPendingIf(id.idx, blk)
	e.mu.Unlock()
	c.touch(id.key)
	c.evict()
}

// Slice returns the bytes of key at [off, off+n) without copying when they
// lie inside one cached block (the common case for FUSE reads), and
// ok=false otherwise; callers then use ReadAt. The slice must not be
// changed, nor read after release is called (once, when ok).
func (c *Cache) Slice(ctx context.Context, key string, off int64, n int, fetch Fetcher) (b []byte, release func(), ok bool, err error) {
	c.lastRead.Store(time.Now().UnixNano())
	_, size, _ := c.Version(key)
	bs := c.opts.BlockSize
	if off >= size || n <= 0 {
		return nil, func() {}, off >= size, nil
	}
	idx := off / bs
	end := min(off+int64(n), size)
	if (end-1)/bs != idx {
		return nil, nil, false, nil
	}
	blk, err := c.readBlock(key, idx)
	if err != nil && !errors.Is(err, ErrBadBlock) {
		return nil, nil, false, err
	}
	if blk == nil {
		if blk, err = c.fetchBlock(ctx, key, idx, size, fetch); err != nil {
			return nil, nil, false, err
		}
		c.stats.misses.Add(1)
	} else {
		c.stats.hits.Add(1)
	}
	in, to := off-idx*bs, end-idx*bs
	if to > int64(len(blk.b)) {
		blk.release()
		return nil, nil, false, nil // a hole past the block's end: ReadAt fills it
	}
	return blk.b[in:to], blk.release, true, nil
}

// directMin is the size from which a file's whole blocks may go to its
// data file around the page cache (see writeDirect): a smaller file is
// likelier to be read again soon, and is then read from memory at once.
const directMin = 64 << 20

// writeDirect writes a staged block (e.dmu held, e.mu not). A whole,
// aligned block of a large file (directMin) that the kernel will not read
// from the data file (the cache cannot hold it whole, or Preload would not
// load it) bypasses the page cache (O_DIRECT): its pages would only be
// memory held twice, the reader already has the block. So does one the
// writer is behind on (see writerBehind). Other blocks of a file the
// cache can hold whole go through the page cache: the next open reads the
// data file directly (passthrough), typically at once (a program that
// reads a file just fetched), and found only on disk the data file was
// read at 0.3-0.5 GB/s here, paying then for the page-cache pages it
// would have cost the writer (a second re-read: 6-8 GB/s). Writes through
// the page cache start their write-back at once: filling the cache must
// not pile up dirty pages that the kernel then throttles everyone on.
func (c *Cache) writeDirect(e *entry, data []byte, off int64) error {
	e.mu.Lock()
	f, err := c.file(e)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	e.io++
	large := e.rec.Size >= directMin && (e.rec.Size > c.preloadMax || !c.Holds(e.rec.Size) || c.writerBehind())
	e.mu.Unlock()
	if large && c.pwriteDirect(f, data, off) {
		c.stats.around.Add(int64(len(data)))
	} else {
		_, err = f.WriteAt(data, off)
		if err == nil {
			_ = unix.SyncFileRange(int(f.Fd()), off, int64(len(data)), unix.SYNC_FILE_RANGE_WRITE)
		}
	}
	e.mu.Lock()
	e.io--
	c.doneFile(e)
	e.mu.Unlock()
	return err
}

// writerBehind reports whether the disk writer has more than c.behind
// (behindBlocks) blocks queued: it then writes around the page cache,
// which costs it a tenth of the CPU (on a virtual machine that hands free
// memory back to its host, a fresh page-cache page costs a fault there:
// 2.8 s of system time per GiB here, against 0.07 s for O_DIRECT), so
// that it keeps up with the reader and drops no block from its queue. A
// cold read that leaves the CPU no room for the page cache stays as fast
// as it was, or nearly; its re-read then reads those blocks from disk.
func (c *Cache) writerBehind() bool { return len(c.staged) > c.behind }

const behindBlocks = 32

// pwriteDirect writes data at off to f's file around the page cache (see
// package dio) and reports whether it did. It does nothing when data is
// not aligned, or when the file system has no O_DIRECT or the write fails:
// the caller then writes through the page cache, which reports any error
// worth reporting.
func (c *Cache) pwriteDirect(f *os.File, data []byte, off int64) bool {
	if c.noDirect.Load() || !dio.Aligned(data, off) {
		return false
	}
	d, err := dio.Open(f)
	if err != nil {
		if errors.Is(err, dio.ErrUnsupported) {
			c.noDirect.Store(true)
		}
		return false
	}
	defer d.Close()
	return dio.WriteAt(d, data, off) == nil
}

// staged is a fetched block on its way to disk (held by the queue), with
// the CRC32C it arrived with when the fetcher knew it.
type staged struct {
	blk    *block
	sum    uint32
	summed bool
}

// pendingBlock returns the staged block idx held for the caller, or nil.
func (e *entry) pendingBlock(idx int64) *block {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	if blk := e.pending[idx].blk; blk != nil {
		return blk.hold()
	}
	return nil
}

// isPending reports whether block idx is staged.
func (e *entry) isPending(idx int64) bool {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	return e.pending[idx].blk != nil
}

// stagedAs returns the staged block idx and whether it is still blk.
func (e *entry) stagedAs(idx int64, blk *block) (staged, bool) {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	st := e.pending[idx]
	return st, st.blk == blk
}

// crc returns the staged block's CRC32C: the one it arrived with if
// known, else computed now.
func (st staged) crc() uint32 {
	if st.summed {
		return st.sum
	}
	return crc(st.blk.b)
}

// unstageLocked drops the staged block idx (e.pmu held).
func (e *entry) unstageLocked(idx int64) {
	if st, ok := e.pending[idx]; ok {
		delete(e.pending, idx)
		st.blk.release()
	}
}

func (e *entry) dropPending(idx int64) {
	e.pmu.Lock()
	e.unstageLocked(idx)
	e.pmu.Unlock()
}

// dropPendingIf drops the staged block idx if it is still blk.
func (e *entry) dropPendingIf(idx int64, blk *block) {
	e.pmu.Lock()
	if e.pending[idx].blk == blk {
		e.unstageLocked(idx)
	}
	e.pmu.Unlock()
}

func (e *entry) dropAllPending(from int64) {
	e.pmu.Lock()
	for idx := range e.pending {
		if idx >= from {
			e.unstageLocked(idx)
		}
	}
	e.pmu.Unlock()
}

func (e *entry) pendingCount() int {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	return len(e.pending)
}
