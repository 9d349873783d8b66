package cache

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	bolt "go.etcd.io/bbolt"
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

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// flusher writes changed index records every 200 ms.
func (c *Cache) flusher() {
	defer close(c.flushDone)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.flushQuit:
			return
		case <-t.C:
			c.flushMu.Lock()
			err := c.flushIndex()
			c.flushMu.Unlock()
			if err != nil {
				c.log.Warn("cannot write the cache index", "err", err)
			}
		}
	}
}

func (c *Cache) flushIndex() error {
	c.idxMu.Lock()
	keys := c.dirtyIdx
	c.dirtyIdx = make(map[string]bool)
	meta := c.metaIdx
	c.metaIdx = make(map[string]map[string][]byte)
	c.idxMu.Unlock()
	if err := c.withRoom(0, func() error { return c.flushMeta(meta) }); err != nil {
		c.unflushed(keys, meta)
		return err
	}
	c.mu.Lock()
	var puts []kv
	for k := range keys {
		e := c.entries[k]
		if e == nil {
			puts = append(puts, kv{k, nil})
			continue
		}
		e.mu.Lock()
		b, err := cbor.Marshal(&e.rec)
		e.mu.Unlock()
		if err != nil {
			c.mu.Unlock()
			return err
		}
		puts = append(puts, kv{k, b})
	}
	c.mu.Unlock()
	if len(puts) == 0 {
		return nil
	}
	slices.SortFunc(puts, func(a, b kv) int { return strings.Compare(a.k, b.k) }) // see flushMeta
	err := c.withRoom(0, func() error { return c.writeIndex(puts) })
	if err != nil {
		c.unflushed(keys, nil)
	}
	return err
}

// unflushed hands back index records and metadata that a flush could not
// write, for the next one to try again (newer metadata is kept).
func (c *Cache) unflushed(keys map[string]bool, meta map[string]map[string][]byte) {
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	for k := range keys {
		c.dirtyIdx[k] = true
	}
	for bucket, kv := range meta {
		m := c.metaIdx[bucket]
		if m == nil {
			m = make(map[string][]byte)
			c.metaIdx[bucket] = m
		}
		for k, v := range kv {
			if _, newer := m[k]; !newer {
				m[k] = v
			}
		}
	}
}

// writeIndex writes index records (nil: deletes them).
func (c *Cache) writeIndex(puts []kv) error {
	return c.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex)
		for _, p := range puts {
			var err error
			if p.v == nil {
				err = b.Delete([]byte(p.k))
			} else {
				err = b.Put([]byte(p.k), p.v)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// kv is an index record to write.
type kv struct {
	k string
	v []byte
}
