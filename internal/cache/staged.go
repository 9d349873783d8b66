package cache

// Staged data. Dirty ranges a writer sends ahead of its close (see Ahead)
// go to a stage at the share that the close commits with the rest, so
// that the share's file is its old version or the new one, never a mix.
// Until then they are staged: no longer dirty (their blocks may be
// evicted), not yet at the share's file, and unsent all the same. The
// record keeps the stage's name and the staged ranges, so that an agent
// restarted finds its stage again.

// Stage returns what the index records of key's stage.
func (c *Cache) Stage(key string) StageInfo {
	var si StageInfo
	c.with(key, func(e *entry) {
		si = StageInfo{Name: e.rec.Stage, Staged: append([]Range(nil), e.rec.Staged...), Sent: append([]Range(nil), e.rec.Sent...),
			Stale: e.rec.Stale, StaleFrom: e.rec.StaleFrom}
	})
	return si
}

// MarkSent records that the bytes of the dirty ranges rs of key are in
// its stage name (unless that is not key's stage any more): a write-back
// after a restart need not send them again. A write to them undoes it.
func (c *Cache) MarkSent(key, name string, rs []Range) {
	c.with(key, func(e *entry) {
		if e.rec.Stage != name {
			return
		}
		for _, r := range rs {
			for _, d := range overlap(e.rec.Dirty, r) {
				e.rec.Sent = addDirty(e.rec.Sent, d)
			}
		}
		c.touch(key)
	})
}

// cutStage records a cut of the file to size while it has a stage (e.mu
// held): what the stage holds beyond is stale.
func (e *entry) cutStage(size int64) {
	e.rec.Staged = clip(e.rec.Staged, size)
	e.rec.Sent = clip(e.rec.Sent, size)
	if !e.rec.Stale || size < e.rec.StaleFrom {
		e.rec.Stale, e.rec.StaleFrom = true, size
	}
}

// endStage forgets e's stage (e.mu held).
func (e *entry) endStage() {
	e.rec.Stage, e.rec.Staged, e.rec.Sent = "", nil, nil
	e.rec.Stale, e.rec.StaleFrom = false, 0
}

// StageOf returns the name of key's stage ("" if none) and the ranges
// staged in it.
func (c *Cache) StageOf(key string) (string, []Range) {
	si := c.Stage(key)
	return si.Name, si.Staged
}

// SetStage names key's stage; the index records it at the next persist
// (which a write-back makes before it sends: see PersistIndex).
func (c *Cache) SetStage(key, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.get(key)
	e.mu.Lock()
	e.rec.Stage = name
	e.mu.Unlock()
}

// MarkStaged records that the dirty ranges rs of key are in its stage
// name: no longer dirty, still unsent. If key's stage is another by now
// (committed meanwhile), they stay dirty.
func (c *Cache) MarkStaged(key, name string, rs []Range) {
	c.with(key, func(e *entry) {
		if e.rec.Stage != name {
			return
		}
		for _, r := range rs {
			c.setDirty(e, subtract(e.rec.Dirty, r))
			e.rec.Sent = subtract(e.rec.Sent, r)
			e.rec.Staged = addDirty(e.rec.Staged, r)
		}
		c.touch(key)
	})
}

// EndStage forgets key's stage: committed, or thrown away.
func (c *Cache) EndStage(key string) {
	c.with(key, func(e *entry) {
		e.endStage()
		c.touch(key)
	})
}

// HoldsRanges reports whether every block that the ranges rs of key touch is
// on the cache's disk.
func (c *Cache) HoldsRanges(key string, rs []Range) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return len(rs) == 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	bs := c.opts.BlockSize
	for _, r := range rs {
		for idx := r.Off / bs; idx*bs < r.End(); idx++ {
			if _, ok := e.rec.Blocks[idx]; !ok {
				return false
			}
		}
	}
	return true
}
