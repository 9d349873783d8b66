package cache

// Staged data. Dirty ranges a writer sends ahead of its close (see Ahead)
// go to a stage at the share that the close commits with the rest, so
// that the share's file is its old version or the new one, never a mix.
// Until then they are staged: no longer dirty (their blocks may be
// evicted), not yet at the share's file, and unsent all the same. The
// record keeps the stage's name and the staged ranges, so that an agent
// restarted finds its stage again.

// StageOf returns the name of key's stage ("" if none) and the ranges
// staged in it.
func (c *Cache) StageOf(key string) (string, []Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return "", nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rec.Stage, append([]Range(nil), e.rec.Staged...)
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
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rec.Stage != name {
		return
	}
	for _, r := range rs {
		c.setDirty(e, subtract(e.rec.Dirty, r))
		e.rec.Staged = addDirty(e.rec.Staged, r)
	}
	c.touch(key)
}

// EndStage forgets key's stage: committed, or thrown away.
func (c *Cache) EndStage(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return
	}
	e.mu.Lock()
	e.rec.Stage, e.rec.Staged = "", nil
	e.mu.Unlock()
	c.touch(key)
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
