package cache

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
		r = Range{Off: lo, Len: hi - lo}
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

// DirtyAt returns the dirty ranges of key, as Dirty does, and the mark of
// the writes made so far, for MarkClean.
func (c *Cache) DirtyAt(key string) ([]Range, uint64) {
	var rs []Range
	var mark uint64
	c.with(key, func(e *entry) {
		rs, mark = append([]Range(nil), e.rec.Dirty...), e.wseq
	})
	return rs, mark
}

// MarkClean records that the ranges done, dirty at mark (see DirtyAt),
// reached the share, which now holds version (of size). Blocks written
// after mark stay dirty, and the size stays this cache's if it changed
// after mark: the data on the way may be older than theirs.
func (c *Cache) MarkClean(key string, done []Range, mark uint64, version uint64, size int64) {
	c.with(key, func(e *entry) {
		later := e.writtenAfter(mark, c.opts.BlockSize)
		for _, d := range done {
			for _, x := range subtractAll([]Range{d}, later) {
				c.setDirty(e, subtract(e.rec.Dirty, x))
			}
			e.rec.Sent = subtract(e.rec.Sent, d)
		}
		e.rec.Version = version
		if len(e.rec.Dirty) == 0 && e.sized <= mark {
			e.rec.Size = size
			e.rec.Cut = false
		}
		e.forgetClean(c.opts.BlockSize)
		c.touch(key)
	})
}

// noteWrite records a write of [off, off+n) (e.mu held).
func (e *entry) noteWrite(off, n, bs int64) {
	e.wseq++
	if e.written == nil {
		e.written = make(map[int64]uint64)
	}
	for idx := off / bs; idx*bs < off+n; idx++ {
		e.written[idx] = e.wseq
	}
}

// noteSize records a change of the size made here (e.mu held).
func (e *entry) noteSize() {
	e.wseq++
	e.sized = e.wseq
}

// writtenAfter returns the blocks written after mark, as ranges (e.mu
// held).
func (e *entry) writtenAfter(mark uint64, bs int64) []Range {
	if mark >= e.wseq {
		return nil
	}
	var out []Range
	for idx, s := range e.written {
		if s > mark {
			out = append(out, Range{Off: idx * bs, Len: bs})
		}
	}
	return out
}

// forgetClean drops the write marks of blocks with no dirty data left
// (e.mu held): a write-back still under way that took such a block cannot
// clean what was written after it, there being nothing dirty there, and a
// new write makes a new mark.
func (e *entry) forgetClean(bs int64) {
	for idx := range e.written {
		if len(overlap(e.rec.Dirty, Range{Off: idx * bs, Len: bs})) == 0 {
			delete(e.written, idx)
		}
	}
}

// subtractAll removes every range of ds from rs.
func subtractAll(rs []Range, ds []Range) []Range {
	for _, d := range ds {
		rs = subtract(rs, d)
	}
	return rs
}

// overlap returns the parts of the ranges rs that lie in d.
func overlap(rs []Range, d Range) []Range {
	var out []Range
	for _, r := range rs {
		if lo, hi := max(r.Off, d.Off), min(r.End(), d.End()); lo < hi {
			out = append(out, Range{Off: lo, Len: hi - lo})
		}
	}
	return out
}

// Cut records that key's size was set here, to be sent exactly with its
// data (an open with O_TRUNC): the file counts as unsent until MarkClean
// leaves no dirty range.
func (c *Cache) Cut(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.get(key)
	e.mu.Lock()
	e.rec.Cut = true
	e.mu.Unlock()
	c.touch(key)
}

// IsCut reports whether key's size was set here and is not at the share.
func (c *Cache) IsCut(key string) bool {
	return c.peek(key, func(e *entry) bool { return e.rec.Cut })
}

// Unsent reports whether key holds dirty ranges or a size (Cut) not yet
// at the share.
func (c *Cache) Unsent(key string) bool {
	return c.peek(key, (*entry).unsent)
}

// peek answers a question about key's entry under its locks; false for a
// key the cache does not hold.
func (c *Cache) peek(key string, ask func(e *entry) bool) bool {
	var yes bool
	c.with(key, func(e *entry) { yes = ask(e) })
	return yes
}

// with runs fn on key's entry under the cache's lock and the entry's, and
// reports whether it did (false: the cache does not hold key).
func (c *Cache) with(key string, fn func(e *entry)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(e)
	return true
}

func subtract(rs []Range, d Range) []Range {
	var out []Range
	for _, r := range rs {
		if r.End() <= d.Off || r.Off >= d.End() {
			out = append(out, r)
			continue
		}
		if r.Off < d.Off {
			out = append(out, Range{Off: r.Off, Len: d.Off - r.Off})
		}
		if r.End() > d.End() {
			out = append(out, Range{Off: d.End(), Len: r.End() - d.End()})
		}
	}
	return out
}

// Revert throws away the dirty data of key, which its share refused for
// good, and every block cached with it: the file is the share's again, at
// version and size (what the share last said of it), and its bytes are
// fetched anew when read. The index records it at once, so that an agent
// stopped from here on does not find the refused data again.
func (c *Cache) Revert(key string, version uint64, size int64) error {
	c.mu.Lock()
	we := c.get(key)
	c.mu.Unlock()
	// Not while a write is between its read and its put of a block.
	we.wmu.Lock()
	defer we.wmu.Unlock()
	c.mu.Lock()
	e := c.get(key)
	e.mu.Lock()
	e.rec.Dirty, e.rec.Cut = nil, false
	e.endStage()
	c.dropBlocksLocked(e, 0)
	e.rec.Version, e.rec.Size = version, size
	e.mu.Unlock()
	c.touch(key)
	c.mu.Unlock()
	return c.PersistIndex()
}
