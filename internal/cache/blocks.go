package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"pando.dev/pando/internal/blockcache"
)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// blockLen is the length of block idx in a file of size bytes.
func (c *Cache) blockLen(idx, size int64) int64 {
	return max(0, min(c.opts.BlockSize, size-idx*c.opts.BlockSize))
}

// readBlock returns the cached block idx (held for the caller), from
// memory or disk, or nil if absent. A block that fails its CRC is dropped
// and ErrBadBlock returned.
func (c *Cache) readBlock(key string, idx int64) (*block, error) {
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
	return c.readDisk(e, idx, now, false)
}

// readDisk reads block idx of e from its data file. A read that fails the
// block's CRC is tried once more with the disk lock held (a write of the
// block may have been under way); if it fails again the block is dropped.
func (c *Cache) readDisk(e *entry, idx, now int64, writesHeld bool) (*block, error) {
	key := e.key
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
	blk := newBlock(int64(info.Len), c.opts.BlockSize)
	buf := blk.b
	_, rerr := f.ReadAt(buf, idx*c.opts.BlockSize)
	e.mu.Lock()
	e.io--
	c.doneFile(e)
	e.rec.Use = now
	e.touchBlock(idx, now)
	if rerr != nil && !errors.Is(rerr, io.EOF) || crc(buf) != info.CRC {
		blk.release()
		if !writesHeld {
			e.mu.Unlock()
			e.dmu.Lock()
			defer e.dmu.Unlock()
			return c.readDisk(e, idx, now, true)
		}
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
	delete(e.unchecked, idx)
	e.mu.Unlock()
	c.mem.put(blockID{key, idx}, blk)
	return blk, nil
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
	c.evictFor(c.opts.BlockSize)
	now := c.clock.Add(1)
	e.mu.Lock()
	e.gen.Add(1)
	e.dropPending(idx) // this write supersedes a staged one
	f, err := c.file(e)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	e.io++
	e.mu.Unlock()
	// Under the disk lock, and recorded before it is released: a block
	// staged meanwhile is written before this one or not at all.
	e.dmu.Lock()
	err = c.withRoom(int64(len(data)), func() error {
		_, err := f.WriteAt(data, idx*c.opts.BlockSize)
		return err
	})
	e.mu.Lock()
	e.io--
	c.doneFile(e)
	if err != nil {
		e.mu.Unlock()
		e.dmu.Unlock()
		return fmt.Errorf("writing the cache: %w", err)
	}
	if _, had := e.rec.Blocks[idx]; !had {
		c.diskUsed.Add(c.opts.BlockSize)
	}
	e.rec.Blocks[idx] = blockInfo{Len: uint32(len(data)), CRC: crc(data)}
	delete(e.unchecked, idx)
	e.rec.Use = now
	e.touchBlock(idx, now)
	// A fetch that started while this block was written must not cache
	// what it got over it.
	e.gen.Add(1)
	e.dropPending(idx)
	e.mu.Unlock()
	e.dmu.Unlock()
	blk := plainBlock(data)
	c.mem.put(blockID{key, idx}, blk)
	blk.release()
	c.touch(key)
	return nil
}

// fetchBlock fills block idx of key from fetch, once for all concurrent
// callers, and returns it held for the caller.
func (c *Cache) fetchBlock(ctx context.Context, key string, idx, size int64, fetch Fetcher) (*block, error) {
	othersFailed := 0
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
				// Another caller's fetch failed (its file handle may have
				// been closed under it): try with our own fetcher.
				if othersFailed++; othersFailed > 2 {
					return nil, fl.err
				}
			}
			continue
		}
		e := c.get(key)
		// A fetch stages its block before it leaves c.flights (under
		// c.mu): one that finished since our look left it held.
		if c.held(e, idx) {
			c.mu.Unlock()
			continue
		}
		fl := &flight{done: make(chan struct{})}
		c.flights[id] = fl
		c.mu.Unlock()
		gen := e.gen.Load()

		n := c.blockLen(idx, size)
		blk := newBlock(n, c.opts.BlockSize)
		sum := &blockcache.Sum{} // the checksum the fetcher reports, if it does
		got, err := fetch(blockcache.WithSum(ctx, sum), blk.b, idx*c.opts.BlockSize)
		stale := false
		if err != nil && !errors.Is(err, io.EOF) {
			fl.err = err
			blk.keep() // a reply may still be on its way into it
			blk.release()
		} else {
			blk.b = blk.b[:got]
			c.stats.fetches.Add(1)
			c.stats.fetched.Add(int64(got))
			// The block may have been written, truncated or invalidated
			// while it was fetched: then the fetched bytes are not the
			// cache's to keep, nor to return.
			stale = !c.stage(e, key, idx, blk, gen, sum)
		}
		c.mu.Lock()
		delete(c.flights, id)
		c.mu.Unlock()
		close(fl.done)
		if fl.err != nil {
			return nil, fl.err
		}
		if stale {
			blk.release()
			continue
		}
		c.evict()
		return blk, nil
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
	return c.held(e, idx)
}

// held reports whether block idx of e is in memory, staged or on disk.
func (c *Cache) held(e *entry, idx int64) bool {
	if c.mem.has(blockID{e.key, idx}) || e.isPending(idx) {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.rec.Blocks[idx]
	return ok
}

// Prefetch fills block idx if it is missing (for read-ahead). A block
// already being fetched is left to that fetch: Prefetch does not wait for
// it, so that read-ahead's slots hold only fetches of distinct blocks.
func (c *Cache) Prefetch(ctx context.Context, key string, idx int64, fetch Fetcher) error {
	_, size, ok := c.Version(key)
	if !ok || idx*c.opts.BlockSize >= size || c.Present(key, idx) {
		return nil
	}
	c.mu.Lock()
	fl := c.flights[blockID{key, idx}]
	c.mu.Unlock()
	if fl != nil {
		return nil
	}
	blk, err := c.fetchBlock(ctx, key, idx, size, fetch)
	if err == nil {
		blk.release()
	}
	return err
}

// Fill caches data as the whole content of the given version of key,
// learnt without a read (a directory listing that brought it): only if it
// fits one block, nobody has the file open (its readers keep the version
// they opened), no unsent data is cached, and the cache holds neither a
// newer version nor this one's first block already. Data of an older
// version is dropped. It reports whether it cached data (a copy of it).
func (c *Cache) Fill(key string, version uint64, data []byte, name string) bool {
	if len(data) == 0 || int64(len(data)) > c.opts.BlockSize {
		return false
	}
	c.mu.Lock()
	e := c.get(key)
	if e.pins > 0 {
		c.mu.Unlock()
		return false
	}
	e.mu.Lock()
	_, have := e.rec.Blocks[0]
	if e.unsent() || e.rec.Version > version || e.rec.Version == version && (have || c.mem.has(blockID{key, 0}) || e.isPending(0)) {
		e.mu.Unlock()
		c.mu.Unlock()
		return false
	}
	if e.rec.Version != version {
		c.dropBlocksLocked(e, 0)
		e.rec.Version = version
	}
	e.rec.Size = int64(len(data))
	if name != "" {
		e.rec.Name = name
	}
	// Whatever changes the entry from here (an open of another version,
	// a write) moves gen on, and stage then caches nothing.
	gen := e.gen.Load()
	e.mu.Unlock()
	c.touch(key)
	c.mu.Unlock()
	blk := plainBlock(append([]byte(nil), data...))
	ok := c.stage(e, key, 0, blk, gen, nil)
	blk.release()
	if ok {
		c.evict()
	}
	return ok
}

// ReadAt reads len(p) bytes of key at off, from the cache where present and
// from fetch (whole blocks) where not. The file's size is the one last
// given to Validate (or grown by WriteAt).
func (c *Cache) ReadAt(ctx context.Context, key string, p []byte, off int64, fetch Fetcher) (int, error) {
	c.lastRead.Store(time.Now().UnixNano())
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
		if in < int64(len(b.b)) {
			k = int64(copy(p[n:n+end-in], b.b[in:min(int64(len(b.b)), end)]))
		}
		b.release()
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
	c.mu.Lock()
	we := c.get(key)
	c.mu.Unlock()
	// Read-modify-write of a block must not interleave with another.
	we.wmu.Lock()
	defer we.wmu.Unlock()
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
		var old []byte
		if cur != nil {
			old = cur.b
		}
		blen := max(int64(len(old)), in+chunk, min(bs, max(size-idx*bs, 0)))
		nb := make([]byte, blen)
		copy(nb, old)
		copy(nb[in:], p[n:n+chunk])
		if cur != nil {
			cur.release()
		}
		// Dirty before the block is written: it must not be evicted
		// once it is there.
		r := Range{Off: pos, Len: chunk}
		c.mu.Lock()
		e := c.get(key)
		e.mu.Lock()
		was, oldSize := overlap(e.rec.Dirty, r), e.rec.Size
		c.setDirty(e, addDirty(e.rec.Dirty, r))
		e.noteWrite(r.Off, r.Len, bs)
		e.rec.Sent = subtract(e.rec.Sent, r) // the stage's copy is old now
		if pos+chunk > e.rec.Size {
			e.rec.Size = pos + chunk
		}
		size = e.rec.Size
		e.mu.Unlock()
		c.mu.Unlock()
		if err := c.putBlock(key, idx, nb); err != nil {
			// Not written: what the range was before, dirty or not.
			e.mu.Lock()
			rs := subtract(e.rec.Dirty, r)
			for _, w := range was {
				rs = addDirty(rs, w)
			}
			c.setDirty(e, rs)
			if e.rec.Size == pos+chunk {
				e.rec.Size = oldSize
			}
			e.mu.Unlock()
			c.touch(key)
			return err
		}
		n += chunk
	}
	return nil
}

// Truncate sets the cached size of key, dropping and trimming blocks and
// dirty ranges beyond it.
func (c *Cache) Truncate(key string, size int64) error {
	c.mu.Lock()
	we := c.get(key)
	c.mu.Unlock()
	we.wmu.Lock()
	defer we.wmu.Unlock()
	bs := c.opts.BlockSize
	last := size / bs
	var trim []byte
	if size%bs != 0 {
		b, err := c.readBlock(key, last)
		if err != nil && !errors.Is(err, ErrBadBlock) {
			return err
		}
		if b != nil {
			if int64(len(b.b)) > size%bs {
				trim = append([]byte(nil), b.b[:size%bs]...)
			}
			b.release()
		}
	}
	c.mu.Lock()
	e := c.get(key)
	first := (size + bs - 1) / bs
	e.gen.Add(1)
	e.dropAllPending(first)
	c.mem.dropFile(key, first)
	e.mu.Lock()
	for idx := range e.rec.Blocks {
		if idx >= first {
			delete(e.rec.Blocks, idx)
			c.diskUsed.Add(-bs)
			c.mem.remove(blockID{key, idx})
		}
	}
	c.setDirty(e, clip(append([]Range(nil), e.rec.Dirty...), size))
	e.noteSize()
	if e.rec.Stage != "" {
		e.cutStage(size)
	}
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
