package cache

import (
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// PutMeta records value (nil: removes it) under key in a metadata bucket.
// Writes are batched with the index.
func (c *Cache) PutMeta(bucket, key string, value []byte) {
	c.idxMu.Lock()
	m := c.metaIdx[bucket]
	if m == nil {
		m = make(map[string][]byte)
		c.metaIdx[bucket] = m
	}
	m[key] = value
	c.idxMu.Unlock()
}

// GetMeta returns what PutMeta recorded, or nil.
func (c *Cache) GetMeta(bucket, key string) []byte {
	c.idxMu.Lock()
	if v, ok := c.metaIdx[bucket][key]; ok {
		c.idxMu.Unlock()
		return v
	}
	c.idxMu.Unlock()
	var out []byte
	_ = c.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("meta-" + bucket)); b != nil {
			if v := b.Get([]byte(key)); v != nil {
				out = append([]byte(nil), v...)
			}
		}
		return nil
	})
	return out
}

// flushMeta writes the metadata put since the last flush, in the order
// of its keys: bbolt keeps a page's keys sorted and inserts by moving
// those after the new one, so that keys put in a map's random order cost
// time quadratic in their number (the 100,000 attributes of one listing
// took 14 s of CPU; in order, a fraction of a second).
func (c *Cache) flushMeta(meta map[string]map[string][]byte) error {
	if len(meta) == 0 {
		return nil
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		for bucket, kv := range meta {
			b, err := tx.CreateBucketIfNotExists([]byte("meta-" + bucket))
			if err != nil {
				return err
			}
			for _, k := range slices.Sorted(maps.Keys(kv)) {
				v := kv[k]
				if v == nil {
					err = b.Delete([]byte(k))
				} else {
					err = b.Put([]byte(k), v)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// MetaKeys returns the keys of a metadata bucket that have a value, in
// bytewise order: what an earlier run persisted and what this run put.
func (c *Cache) MetaKeys(bucket string) []string {
	c.idxMu.Lock()
	pending := maps.Clone(c.metaIdx[bucket])
	c.idxMu.Unlock()
	keys := make(map[string]bool)
	_ = c.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("meta-" + bucket)); b != nil {
			return b.ForEach(func(k, _ []byte) error {
				keys[string(k)] = true
				return nil
			})
		}
		return nil
	})
	for k, v := range pending {
		keys[k] = v != nil
	}
	var out []string
	for k, ok := range keys {
		if ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
