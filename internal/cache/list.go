package cache

import "sort"

// What the cache holds, for people: its files (pando cache ls) and its
// counters (pando stats).

// List describes every cached file, most recently used first.
func (c *Cache) List() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Entry, 0, len(c.entries))
	uses := make(map[string]int64, len(c.entries))
	for k, e := range c.entries {
		e.mu.Lock()
		out = append(out, Entry{Key: k, Name: e.rec.Name, Version: e.rec.Version, Size: e.rec.Size,
			Cached: int64(len(e.rec.Blocks)) * c.opts.BlockSize, Dirty: e.unsent(), Pinned: e.pins > 0})
		uses[k] = e.rec.Use
		e.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return uses[out[i].Key] > uses[out[j].Key] })
	return out
}

// Stats returns counters and sizes.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Hits: c.stats.hits.Load(), Misses: c.stats.misses.Load(), Fetches: c.stats.fetches.Load(),
		BadBlocks: c.stats.bad.Load(), Evictions: c.stats.evictions.Load(), BytesFetched: c.stats.fetched.Load(),
		Preloaded: c.stats.preloaded.Load(), WrittenAround: c.stats.around.Load(), Full: c.stats.full.Load(), SentAhead: c.stats.ahead.Load(),
		DiskBytes: c.diskUsed.Load(), MemoryBytes: c.mem.size(), Files: len(c.entries),
		DiskLimit: c.opts.DiskBytes, DirtyBytes: c.DirtyBytes(),
	}
}
