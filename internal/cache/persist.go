package cache

// PersistIndex writes every changed index record now instead of at the
// next periodic flush. Write-back calls it before it sends anything, so
// that an agent killed in the middle of a write-back finds the data still
// marked dirty when it starts again. Unlike Persist it syncs nothing: it
// protects against a crash of the agent, not of its host.
func (c *Cache) PersistIndex() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	return c.flushIndex()
}

// Pinned reports whether key is held by an open file.
func (c *Cache) Pinned(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	return e != nil && e.pins > 0
}
