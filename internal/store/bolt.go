package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"pando.dev/pando/internal/holder"
)

var bucket = []byte("pando")

// Bolt is a Store in one bbolt file.
type Bolt struct {
	db  *bolt.DB
	hub hub
	// wmu holds a write and the publication of its change together, so
	// that watchers see changes in the order they were committed (bbolt
	// runs one writer at a time anyway).
	wmu sync.Mutex
}

var _ Store = (*Bolt)(nil)

// OpenBolt opens (creating if needed) the bbolt file at path. Only one
// process may hold it: a second gets a clear error after a short wait.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("the state in %s is in use by another pando process%s; stop it or choose another --state directory", path, holder.By(holder.Lock(path)))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open the state database %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot initialise the state database %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Get implements Store.
func (b *Bolt) Get(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, err
}

// Put implements Store.
func (b *Bolt) Put(ctx context.Context, key string, value []byte) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	err := b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(key), bytes.Clone(value))
	})
	if err == nil {
		b.hub.publish(Event{Key: key, Value: bytes.Clone(value)})
	}
	return err
}

// Delete implements Store.
func (b *Bolt) Delete(ctx context.Context, key string) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		if bk.Get([]byte(key)) == nil {
			return ErrNotFound
		}
		return bk.Delete([]byte(key))
	})
	if err == nil {
		b.hub.publish(Event{Key: key, Deleted: true})
	}
	return err
}

// List implements Store.
func (b *Bolt) List(ctx context.Context, prefix string) ([]KV, error) {
	var out []KV
	p := []byte(prefix)
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			out = append(out, KV{Key: string(k), Value: bytes.Clone(v)})
		}
		return nil
	})
	return out, err
}

// CompareAndSwap implements Store.
func (b *Bolt) CompareAndSwap(ctx context.Context, key string, old, new []byte) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		cur := bk.Get([]byte(key))
		if (old == nil) != (cur == nil) || !bytes.Equal(cur, old) {
			return ErrConflict
		}
		if new == nil {
			return bk.Delete([]byte(key))
		}
		return bk.Put([]byte(key), bytes.Clone(new))
	})
	if err == nil {
		b.hub.publish(Event{Key: key, Value: bytes.Clone(new), Deleted: new == nil})
	}
	return err
}

// Watch implements Store: changes are published once committed, in the
// order committed.
func (b *Bolt) Watch(ctx context.Context, prefix string) <-chan Event {
	return b.hub.watch(ctx, prefix)
}

// Close implements Store.
func (b *Bolt) Close() error {
	b.hub.closeAll()
	return b.db.Close()
}

// createAll creates kvs in one transaction (see load).
func (b *Bolt) createAll(ctx context.Context, kvs []KV) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		for _, kv := range kvs {
			if bk.Get([]byte(kv.Key)) != nil {
				return fmt.Errorf("writing %s: %w", kv.Key, ErrConflict)
			}
			if err := bk.Put([]byte(kv.Key), bytes.Clone(kv.Value)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		evs := make([]Event, 0, len(kvs))
		for _, kv := range kvs {
			evs = append(evs, Event{Key: kv.Key, Value: bytes.Clone(kv.Value)})
		}
		b.hub.publish(evs...)
	}
	return err
}

// readMany reads keys and prefixes in one read transaction.
func (b *Bolt) readMany(ctx context.Context, keys, prefixes []string) (Many, error) {
	out := Many{Values: map[string][]byte{}, Lists: map[string][]KV{}}
	err := b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		for _, k := range keys {
			if v := bk.Get([]byte(k)); v != nil {
				out.Values[k] = bytes.Clone(v)
			}
		}
		for _, p := range prefixes {
			pb := []byte(p)
			var kvs []KV
			c := bk.Cursor()
			for k, v := c.Seek(pb); k != nil && bytes.HasPrefix(k, pb); k, v = c.Next() {
				kvs = append(kvs, KV{Key: string(k), Value: bytes.Clone(v)})
			}
			out.Lists[p] = kvs
		}
		return nil
	})
	return out, err
}
