// Package cache is the agent's block cache: file data in fixed-size blocks
// kept in sparse files on local disk, an index (per file: remote version,
// size, present blocks with their CRC32C, dirty ranges) in an embedded
// store, and an LRU memory layer above. It survives a restart of the agent,
// dirty data included. It implements blockcache.Cache, the interface the
// vfs holds it through, whose contracts say what each method does.
//
// Guarantees:
//   - Bounded: the disk layer holds at most DiskBytes of blocks, the memory
//     layer at most MemoryBytes; least recently used clean blocks of files
//     that are not pinned go first. Dirty blocks are never evicted.
//   - Verified: a block's CRC32C is computed when it enters the cache and
//     checked whenever it is read back from disk; a bad block is dropped
//     (and the caller refetches it), never served.
//   - One fetch: concurrent misses of one block cause one call to the
//     fetcher; the others wait for it.
//   - Versioned: data is kept per remote version; Validate drops the clean
//     blocks of a file whose remote version changed.
//
// Lock order: Cache.mu, then entry.mu; the memory layer's and the index
// queue's locks are leaves. Block data is read and written holding only
// entry.mu, so that one file's disk I/O does not stall the others. The
// fetcher is never called with a lock held.
package cache
