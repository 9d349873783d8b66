// Package store is the controller's metadata engine: a small key/value
// interface with one implementation per backend. Bolt (bbolt, a file in the
// controller's state directory) is the embedded default; the contract is
// kept small enough for etcd (string keys, byte values, prefix listing,
// compare-and-swap as a transaction), so that several controllers can share
// one highly available store.
//
// Contract for every implementation:
//   - Values returned are the caller's to keep (copies, never aliases).
//   - List returns keys in ascending byte order.
//   - Every method is safe for concurrent use; CompareAndSwap is atomic.
package store
