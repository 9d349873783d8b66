package cache

import (
	"unsafe"

	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"hash/crc32"
	"io"
)

// Range is a byte range.
type Range struct {
	Off int64 `cbor:"1,keyasint"`
	Len int64 `cbor:"2,keyasint"`
}

// End is the first byte after r.
func (r Range) End() int64 { return r.Off + r.Len }

func (e *entry) dirtyBlock(idx, bs int64) bool {
	lo, hi := idx*bs, (idx+1)*bs
	for _, r := range e.rec.Dirty {
		if r.Off < hi && r.End() > lo {
			return true
		}
	}
	return false
}

// addDirty merges r into the sorted, disjoint dirty ranges.
func addDirty(rs []Range, r Range) []Range {
	out := make([]Range, 0, len(rs)+1)
	for _, x := range rs {
		if x.End() < r.Off || x.Off > r.End() {
			out = append(out, x)
			continue
		}
		lo, hi := min(x.Off, r.Off), max(x.End(), r.End())
		r = Range{lo, hi - lo}
	}
	out = append(out, r)
	sortRanges(out)
	return out
}

func sortRanges(rs []Range) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Off < rs[j-1].Off; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// clip cuts ranges at size.
func clip(rs []Range, size int64) []Range {
	out := rs[:0]
	for _, r := range rs {
		if r.Off >= size {
			continue
		}
		if r.End() > size {
			r.Len = size - r.Off
		}
		out = append(out, r)
	}
	return out
}

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// blockLen is the length of block idx in a file of size bytes.
func (c *Cache) blockLen(idx, size int64) int64 {
	return max(0, min(c.opts.BlockSize, size-idx*c.opts.BlockSize))
}

// readBlock returns the cached bytes of block idx, from memory or disk, or
// nil if absent. A block that fails its CRC is dropped and ErrBadBlock
// returned.
func (c *Cache) readBlock(key string, idx int64) ([]byte, error) {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return nil, nil
	}
	now := c.clock.Add(1)
	if b := c.mem.get(blockID{key, idx}); b != nil {
		e.hit.Store(now)
		return b, nil
	}
	if b := e.pendingBlock(idx); b != nil {
		e.hit.Store(now)
		return b, nil
	}
	e.mu.Lock()
	info, ok := e.rec.Blocks[idx]
	if !ok {
		e.mu.Unlock()
		return nil, nil
	}
	f, err := c.file(e)
	if err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.io++
	e.mu.Unlock()
	buf := make([]byte, info.Len)
	_, rerr := f.ReadAt(buf, idx*c.opts.BlockSize)
	e.mu.Lock()
	e.io--
	c.doneFile(e)
	e.rec.Use = now
	e.touchBlock(idx, now)
	if rerr != nil && !errors.Is(rerr, io.EOF) || crc(buf) != info.CRC {
		c.stats.bad.Add(1)
		c.log.Warn("dropping a cached block that failed its checksum", "file", key, "block", idx)
		if cur, ok := e.rec.Blocks[idx]; ok && cur == info && !e.dirtyBlock(idx, c.opts.BlockSize) {
			delete(e.rec.Blocks, idx)
			c.diskUsed.Add(-c.opts.BlockSize)
		}
		e.mu.Unlock()
		c.touch(key)
		return nil, ErrBadBlock
	}
	e.mu.Unlock()
	c.mem.put(blockID{key, idx}, buf)
	return buf, nil
}

func (e *entry) touchBlock(idx, now int64) {
	if e.use == nil {
		e.use = make(map[int64]int64)
	}
	e.use[idx] = now
}

// putBlock stores block idx (data is kept by the cache; callers must not
// change it afterwards).
func (c *Cache) putBlock(key string, idx int64, data []byte) error {
	c.mu.Lock()
	e := c.get(key)
	c.mu.Unlock()
	now := c.clock.Add(1)
	e.mu.Lock()
	e.dropPending(idx) // this write supersedes a staged one
	f, err := c.file(e)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	e.io++
	e.mu.Unlock()
	_, err = f.WriteAt(data, idx*c.opts.BlockSize)
	e.mu.Lock()
	e.io--
	c.doneFile(e)
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("writing the cache: %w", err)
	}
	if _, had := e.rec.Blocks[idx]; !had {
		c.diskUsed.Add(c.opts.BlockSize)
	}
	e.rec.Blocks[idx] = blockInfo{Len: uint32(len(data)), CRC: crc(data)}
	e.rec.Use = now
	e.touchBlock(idx, now)
	e.mu.Unlock()
	c.mem.put(blockID{key, idx}, data)
	c.touch(key)
	return nil
}

// fetchBlock fills block idx of key from fetch, once for all concurrent
// callers.
func (c *Cache) fetchBlock(ctx context.Context, key string, idx, size int64, fetch Fetcher) ([]byte, error) {
	for {
		if b, err := c.readBlock(key, idx); b != nil || err != nil && !errors.Is(err, ErrBadBlock) {
			return b, err
		}
		id := blockID{key, idx}
		c.mu.Lock()
		if fl := c.flights[id]; fl != nil {
			c.mu.Unlock()
			select {
			case <-fl.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if fl.err != nil {
				return nil, fl.err
			}
			continue
		}
		fl := &flight{done: make(chan struct{})}
		c.flights[id] = fl
		c.mu.Unlock()

		n := c.blockLen(idx, size)
		buf := make([]byte, n)
		got, err := fetch(ctx, buf, idx*c.opts.BlockSize)
		if err != nil && !errors.Is(err, io.EOF) {
			fl.err = err
		} else {
			buf = buf[:got]
			c.stats.fetches.Add(1)
			c.stats.fetched.Add(int64(got))
			c.stage(key, idx, buf)
		}
		c.mu.Lock()
		delete(c.flights, id)
		c.mu.Unlock()
		close(fl.done)
		if fl.err != nil {
			return nil, fl.err
		}
		c.evict()
		return buf, nil
	}
}

// Present reports whether block idx of key is cached (without reading it).
func (c *Cache) Present(key string, idx int64) bool {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return false
	}
	if c.mem.has(blockID{key, idx}) || e.pendingBlock(idx) != nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.rec.Blocks[idx]
	return ok
}

// Prefetch fills block idx if it is missing (for read-ahead).
func (c *Cache) Prefetch(ctx context.Context, key string, idx int64, fetch Fetcher) error {
	_, size, ok := c.Version(key)
	if !ok || idx*c.opts.BlockSize >= size || c.Present(key, idx) {
		return nil
	}
	_, err := c.fetchBlock(ctx, key, idx, size, fetch)
	return err
}

// ReadAt reads len(p) bytes of key at off, from the cache where present and
// from fetch (whole blocks) where not. The file's size is the one last
// given to Validate (or grown by WriteAt).
func (c *Cache) ReadAt(ctx context.Context, key string, p []byte, off int64, fetch Fetcher) (int, error) {
	_, size, _ := c.Version(key)
	if off >= size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), size-off)
	bs := c.opts.BlockSize
	var n int64
	hit := true
	for n < want {
		pos := off + n
		idx := pos / bs
		b, err := c.readBlock(key, idx)
		if err != nil && !errors.Is(err, ErrBadBlock) {
			return int(n), err
		}
		if b == nil {
			hit = false
			if b, err = c.fetchBlock(ctx, key, idx, size, fetch); err != nil {
				return int(n), err
			}
		}
		in := pos - idx*bs
		// Bytes the block does not hold, up to the file's size, are a
		// hole: the file grew (by a truncate or a write further on) after
		// the block was cached.
		end := min(idx*bs+c.blockLen(idx, size), off+want) - idx*bs
		k := int64(0)
		if in < int64(len(b)) {
			k = int64(copy(p[n:n+end-in], b[in:min(int64(len(b)), end)]))
		}
		clear(p[n+k : n+end-in])
		n += end - in
	}
	if hit {
		c.stats.hits.Add(1)
	} else {
		c.stats.misses.Add(1)
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// WriteAt writes p at off as dirty data. Blocks that hold remote data and
// are only partly overwritten are first filled from fetch.
func (c *Cache) WriteAt(ctx context.Context, key string, p []byte, off int64, fetch Fetcher) error {
	_, size, _ := c.Version(key)
	bs := c.opts.BlockSize
	for n := int64(0); n < int64(len(p)); {
		pos := off + n
		idx := pos / bs
		in := pos - idx*bs
		chunk := min(int64(len(p))-n, bs-in)
		cur, err := c.readBlock(key, idx)
		if err != nil && !errors.Is(err, ErrBadBlock) {
			return err
		}
		if cur == nil && idx*bs < size && !(in == 0 && chunk >= c.blockLen(idx, size)) {
			if cur, err = c.fetchBlock(ctx, key, idx, size, fetch); err != nil {
				return err
			}
		}
		blen := max(int64(len(cur)), in+chunk, min(bs, max(size-idx*bs, 0)))
		nb := make([]byte, blen)
		copy(nb, cur)
		copy(nb[in:], p[n:n+chunk])
		c.mu.Lock()
		e := c.get(key)
		e.mu.Lock()
		e.rec.Dirty = addDirty(e.rec.Dirty, Range{pos, chunk})
		if pos+chunk > e.rec.Size {
			e.rec.Size = pos + chunk
		}
		size = e.rec.Size
		e.mu.Unlock()
		c.mu.Unlock()
		if err := c.putBlock(key, idx, nb); err != nil {
			return err
		}
		n += chunk
	}
	return nil
}

// Truncate sets the cached size of key, dropping and trimming blocks and
// dirty ranges beyond it.
func (c *Cache) Truncate(key string, size int64) error {
	bs := c.opts.BlockSize
	last := size / bs
	var trim []byte
	if size%bs != 0 {
		b, err := c.readBlock(key, last)
		if err != nil && !errors.Is(err, ErrBadBlock) {
			return err
		}
		if b != nil && int64(len(b)) > size%bs {
			trim = append([]byte(nil), b[:size%bs]...)
		}
	}
	c.mu.Lock()
	e := c.get(key)
	first := (size + bs - 1) / bs
	e.dropAllPending(first)
	e.mu.Lock()
	for idx := range e.rec.Blocks {
		if idx >= first {
			delete(e.rec.Blocks, idx)
			c.diskUsed.Add(-bs)
			c.mem.remove(blockID{key, idx})
		}
	}
	e.rec.Dirty = clip(e.rec.Dirty, size)
	e.rec.Size = size
	if f, err := c.file(e); err == nil {
		_ = f.Truncate(size)
	}
	c.doneFile(e)
	e.mu.Unlock()
	c.touch(key)
	c.mu.Unlock()
	if trim != nil {
		return c.putBlock(key, last, trim)
	}
	return nil
}

// Dirty returns the dirty ranges of key.
func (c *Cache) Dirty(key string) []Range {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Range(nil), e.rec.Dirty...)
}

// DirtyKeys lists files with dirty data (to replay after a restart).
func (c *Cache) DirtyKeys() []Entry {
	var out []Entry
	for _, e := range c.List() {
		if e.Dirty {
			out = append(out, e)
		}
	}
	return out
}

// MarkClean records that the ranges reached the share, which now holds
// version.
func (c *Cache) MarkClean(key string, done []Range, version uint64, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range done {
		e.rec.Dirty = subtract(e.rec.Dirty, d)
	}
	e.rec.Version = version
	if len(e.rec.Dirty) == 0 {
		e.rec.Size = size
	}
	c.touch(key)
}

func subtract(rs []Range, d Range) []Range {
	var out []Range
	for _, r := range rs {
		if r.End() <= d.Off || r.Off >= d.End() {
			out = append(out, r)
			continue
		}
		if r.Off < d.Off {
			out = append(out, Range{r.Off, d.Off - r.Off})
		}
		if r.End() > d.End() {
			out = append(out, Range{d.End(), r.End() - d.End()})
		}
	}
	return out
}

// evict drops least recently used clean blocks until the disk layer is
// within its bound: first blocks of files nobody has open, then, if that
// is not enough, the least recently used blocks of open files.
func (c *Cache) evict() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.diskUsed.Load() <= c.opts.DiskBytes {
		return
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
			if e.dirtyBlock(idx, c.opts.BlockSize) {
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
	for _, list := range [][]cand{unpinned, pinned} {
		sortCands := func(a, b cand) bool { return a.use < b.use }
		for i := 1; i < len(list); i++ {
			for j := i; j > 0 && sortCands(list[j], list[j-1]); j-- {
				list[j], list[j-1] = list[j-1], list[j]
			}
		}
		for _, cd := range list {
			if c.diskUsed.Load() <= c.opts.DiskBytes {
				return
			}
			cd.e.mu.Lock()
			if _, ok := cd.e.rec.Blocks[cd.idx]; ok {
				delete(cd.e.rec.Blocks, cd.idx)
				c.diskUsed.Add(-c.opts.BlockSize)
				c.mem.remove(blockID{cd.e.key, cd.idx})
				if f, err := c.file(cd.e); err == nil {
					punchHole(f, cd.idx*c.opts.BlockSize, c.opts.BlockSize)
				}
				c.doneFile(cd.e)
				c.stats.evictions.Add(1)
				c.touch(cd.e.key)
			}
			cd.e.mu.Unlock()
		}
	}
}

// stage makes a fetched block readable at once (memory) and queues it for
// the disk writer. When the writer is behind, the block stays in memory
// only: it is a cache, and readers must not wait for the disk.
func (c *Cache) stage(key string, idx int64, data []byte) {
	c.mu.Lock()
	e := c.get(key)
	c.mu.Unlock()
	c.mem.put(blockID{key, idx}, data)
	e.pmu.Lock()
	if e.pending == nil {
		e.pending = make(map[int64][]byte)
	}
	e.pending[idx] = data
	e.pmu.Unlock()
	select {
	case c.staged <- blockID{key, idx}:
	default:
		e.dropPending(idx)
	}
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
	{
		c.mu.Lock()
		e := c.entries[id.key]
		c.mu.Unlock()
		if e == nil {
			return
		}
		e.mu.Lock()
		data := e.pendingBlock(id.idx)
		if data == nil {
			e.mu.Unlock()
			return // dropped or superseded meanwhile
		}
		err := c.writeDirect(e, data, id.idx*c.opts.BlockSize)
		// Record it only if nothing superseded it while we wrote.
		if err == nil && e.pendingBlock(id.idx) != nil {
			if _, had := e.rec.Blocks[id.idx]; !had {
				c.diskUsed.Add(c.opts.BlockSize)
			}
			e.rec.Blocks[id.idx] = blockInfo{Len: uint32(len(data)), CRC: crc(data)}
			e.touchBlock(id.idx, c.clock.Add(1))
		} else if err != nil {
			c.log.Warn("cannot write to the cache", "err", err)
		}
		e.dropPending(id.idx)
		e.mu.Unlock()
		c.touch(id.key)
		c.evict()
	}
}

// Slice returns the bytes of key at [off, off+n) without copying when they
// lie inside one cached block (the common case for FUSE reads), and
// ok=false otherwise; callers then use ReadAt. The slice must not be
// changed.
func (c *Cache) Slice(ctx context.Context, key string, off int64, n int, fetch Fetcher) (b []byte, ok bool, err error) {
	_, size, _ := c.Version(key)
	bs := c.opts.BlockSize
	if off >= size || n <= 0 {
		return nil, off >= size, nil
	}
	idx := off / bs
	end := min(off+int64(n), size)
	if (end-1)/bs != idx {
		return nil, false, nil
	}
	blk, err := c.readBlock(key, idx)
	if err != nil && !errors.Is(err, ErrBadBlock) {
		return nil, false, err
	}
	if blk == nil {
		if blk, err = c.fetchBlock(ctx, key, idx, size, fetch); err != nil {
			return nil, false, err
		}
		c.stats.misses.Add(1)
	} else {
		c.stats.hits.Add(1)
	}
	in, to := off-idx*bs, end-idx*bs
	if to > int64(len(blk)) {
		return nil, false, nil // a hole past the block's end: ReadAt fills it
	}
	return blk[in:to], true, nil
}

// writeDirect writes a staged block, bypassing the page cache when the
// block is aligned (O_DIRECT): filling the cache must not fill the page
// cache with dirty pages that the kernel then throttles everyone on.
func (c *Cache) writeDirect(e *entry, data []byte, off int64) error {
	const align = 4096
	if len(data)%align == 0 && off%align == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(data)))%align == 0 {
		fd, err := unix.Open(c.dataPath(e.key), unix.O_WRONLY|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
		if err == nil {
			for len(data) > 0 {
				n, werr := unix.Pwrite(fd, data, off)
				if werr == unix.EINTR {
					continue
				}
				if werr != nil {
					err = werr
					break
				}
				data, off = data[n:], off+int64(n)
			}
			unix.Close(fd)
			if err == nil {
				return nil
			}
		}
		if len(data) == 0 {
			return err
		}
		// The file system refuses O_DIRECT (tmpfs): fall back.
	}
	f, err := c.file(e)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, off)
	c.doneFile(e)
	return err
}
