package cache

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

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

// Persist makes what the cache holds of key durable: its data file is
// synced and the index, dirty ranges included, committed. A close that
// keeps written data back (write mode back) returns only after this.
func (c *Cache) Persist(key string) error {
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		f, err := c.file(e)
		if err == nil {
			e.io++
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
		err = unix.Fdatasync(int(f.Fd()))
		e.mu.Lock()
		e.io--
		c.doneFile(e)
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("syncing the cache: %w", err)
		}
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	return c.flushIndex()
}

// Sync waits until every staged block has been written to disk (or
// dropped); for tests and for a clean shutdown.
func (c *Cache) Sync() {
	for {
		busy := len(c.staged) > 0
		if !busy {
			c.mu.Lock()
			for _, e := range c.entries {
				if e.pendingCount() > 0 {
					busy = true
					break
				}
			}
			c.mu.Unlock()
		}
		if !busy {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
