package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// A snapshot is every key of a store at one moment (one bbolt read
// transaction; one etcd revision), written as JSON: what `pando admin
// backup` writes and `restore` and `migrate` read.
type snapshot struct {
	Format string    `json:"format"`
	Taken  time.Time `json:"taken"`
	Keys   []snapKV  `json:"keys"`
}

type snapKV struct {
	K string `json:"k"`
	V []byte `json:"v"`
}

const snapshotFormat = "pando-store-snapshot-1"

// Snapshot writes every key of s to w and returns how many it wrote.
func Snapshot(ctx context.Context, s Store, w io.Writer) (int, error) {
	kvs, err := s.List(ctx, "")
	if err != nil {
		return 0, err
	}
	snap := snapshot{Format: snapshotFormat, Taken: time.Now().UTC(), Keys: make([]snapKV, 0, len(kvs))}
	for _, kv := range kvs {
		snap.Keys = append(snap.Keys, snapKV{K: kv.Key, V: kv.Value})
	}
	if err := json.NewEncoder(w).Encode(snap); err != nil {
		return 0, fmt.Errorf("cannot write the snapshot: %w", err)
	}
	return len(kvs), nil
}

// ErrNotEmpty is returned by Restore and Copy into a store that already
// holds keys.
var ErrNotEmpty = errors.New("the destination store is not empty")

// Restore reads a snapshot from r into s, which must be empty; it returns
// how many keys it wrote.
func Restore(ctx context.Context, s Store, r io.Reader) (int, error) {
	var snap snapshot
	if err := json.NewDecoder(r).Decode(&snap); err != nil {
		return 0, fmt.Errorf("this is not a pando store snapshot: %w", err)
	}
	if snap.Format != snapshotFormat {
		return 0, fmt.Errorf("this is not a pando store snapshot (format %q, want %q)", snap.Format, snapshotFormat)
	}
	kvs := make([]KV, 0, len(snap.Keys))
	for _, kv := range snap.Keys {
		kvs = append(kvs, KV{Key: kv.K, Value: kv.V})
	}
	return load(ctx, s, kvs)
}

// Copy copies every key of src (one snapshot of it) into dst, which must
// be empty; it returns how many keys it copied.
func Copy(ctx context.Context, dst, src Store) (int, error) {
	kvs, err := src.List(ctx, "")
	if err != nil {
		return 0, err
	}
	return load(ctx, dst, kvs)
}

// load writes kvs into the empty store s, each key created by
// compare-and-swap (a key that appears meanwhile stops it), and reads
// every one back.
func load(ctx context.Context, s Store, kvs []KV) (int, error) {
	if have, err := s.List(ctx, ""); err != nil {
		return 0, err
	} else if len(have) > 0 {
		return 0, fmt.Errorf("%w (%d keys, the first %q): restore into an empty store, or another etcd prefix (etcd://HOSTS/PREFIX)", ErrNotEmpty, len(have), have[0].Key)
	}
	if c, ok := s.(creator); ok {
		if err := c.createAll(ctx, kvs); err != nil {
			return 0, err
		}
	} else {
		for i, kv := range kvs {
			if err := s.CompareAndSwap(ctx, kv.Key, nil, kv.Value); err != nil {
				return i, fmt.Errorf("writing %s: %w", kv.Key, err)
			}
		}
	}
	got, err := s.List(ctx, "")
	if err != nil {
		return len(kvs), err
	}
	if len(got) != len(kvs) {
		return len(kvs), fmt.Errorf("wrote %d keys but the store holds %d", len(kvs), len(got))
	}
	return len(kvs), nil
}

// creator is an engine that creates many keys in few transactions.
type creator interface {
	// createAll creates every key of kvs, none of which may exist.
	createAll(ctx context.Context, kvs []KV) error
}
