package store

import (
	"context"
	"errors"
)

// Errors returned by every implementation.
var (
	// ErrNotFound is returned by Get and Delete for a key that is absent.
	ErrNotFound = errors.New("store: key not found")
	// ErrConflict is returned by CompareAndSwap when the current value is
	// not the expected one; the caller re-reads and tries again.
	ErrConflict = errors.New("store: compare-and-swap conflict")
)

// KV is one key and its value.
type KV struct {
	Key   string
	Value []byte
}

// Store is a key/value store for the controller's state.
type Store interface {
	// Get returns the value of key, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Put sets key to value.
	Put(ctx context.Context, key string, value []byte) error
	// Delete removes key, or returns ErrNotFound.
	Delete(ctx context.Context, key string) error
	// List returns every key with the prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]KV, error)
	// CompareAndSwap sets key to new only if its value is old. old == nil
	// means the key must not exist; new == nil deletes the key. It returns
	// ErrConflict when the expectation fails.
	CompareAndSwap(ctx context.Context, key string, old, new []byte) error
	// Watch sends every change under prefix made after it returns, in
	// the order made, until ctx ends. The channel is closed then; closed
	// earlier (the watcher fell behind, or the engine lost its place), the
	// caller may have missed changes: it reads what it needs again and
	// watches anew.
	Watch(ctx context.Context, prefix string) <-chan Event
	// Close releases the store.
	Close() error
}

// Event is one change of a key: its new value, or Deleted.
type Event struct {
	Key     string
	Value   []byte
	Deleted bool
}
