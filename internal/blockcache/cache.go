package blockcache

import (
	"context"
	"os"
)

// Cache is a block cache as the vfs holds it: every role below, and Close.
type Cache interface {
	Blocks
	Meta
	Dirty
	Stages
	Backing
	// Close persists the index and closes every file. No other method may
	// be called after it.
	Close() error
}

// Blocks holds files' data in blocks, per remote version: what is read is
// served from it where present and fetched where not, what is written is
// kept dirty (see Dirty).
type Blocks interface {
	// BlockSize is the cache's block size, fixed while it is open.
	BlockSize() int64
	// ReadAt reads len(p) bytes of key at off, from the cache where
	// present and from fetch (whole blocks) where not; concurrent misses
	// of one block call fetch once. The file's size is the one last given
	// to Validate (or grown by WriteAt); a read past it returns io.EOF.
	ReadAt(ctx context.Context, key string, p []byte, off int64, fetch Fetcher) (int, error)
	// Slice returns the bytes of key at [off, off+n) without copying when
	// they lie inside one cached block, and ok=false otherwise; callers
	// then use ReadAt. The slice must not be changed, nor read after
	// release is called (once, when ok).
	Slice(ctx context.Context, key string, off int64, n int, fetch Fetcher) (b []byte, release func(), ok bool, err error)
	// WriteAt writes p at off as dirty data. Blocks that hold remote data
	// and are only partly overwritten are first filled from fetch.
	WriteAt(ctx context.Context, key string, p []byte, off int64, fetch Fetcher) error
	// Truncate sets the cached size of key, dropping and trimming blocks
	// and dirty ranges beyond it.
	Truncate(key string, size int64) error
	// Prefetch fills block idx of key if it is missing (read-ahead). A
	// block already being fetched is left to that fetch: Prefetch does not
	// wait for it.
	Prefetch(ctx context.Context, key string, idx int64, fetch Fetcher) error
	// Present reports whether block idx of key is cached, without reading
	// it.
	Present(key string, idx int64) bool
	// Fill caches data as the whole content of version of key, learnt
	// without a read (a listing that brought it), if it fits one block,
	// nobody has the file open, nothing unsent is cached, and the cache
	// holds neither a newer version nor this one's first block already.
	// Data of an older version is dropped. It reports whether it cached a
	// copy of data.
	Fill(key string, version uint64, data []byte, name string) bool
	// Forget drops from the memory layer the blocks of key that lie wholly
	// in [from, to) (behind a sequential reader); they stay on disk.
	Forget(key string, from, to int64)
	// Validate records the remote version and size of key (name: its path,
	// for people). If the version differs from the cached one, its blocks
	// are dropped and its size is size; but a file with unsent data keeps
	// its blocks and its size (the caller decides what a conflict means).
	// It reports whether the cache held this version already, or nothing
	// of key.
	Validate(key string, version uint64, size int64, name string) bool
	// SetVersion records a version and size without dropping data: for
	// versions this agent's own writes produced.
	SetVersion(key string, version uint64, size int64)
	// Version returns the cached version and size of key, and false if the
	// cache knows nothing of it.
	Version(key string) (version uint64, size int64, ok bool)
	// Pin keeps key's blocks from eviction until as many Unpin (open
	// files).
	Pin(key string)
	// Unpin undoes one Pin.
	Unpin(key string)
	// Pinned reports whether key is held by an open file.
	Pinned(key string) bool
	// Drop forgets key entirely (its blocks and index record), dirty data
	// too.
	Drop(key string)
	// Persist makes what the cache holds of key durable: its data synced
	// and its index record, dirty ranges included, committed. A close that
	// keeps written data back returns only after it.
	Persist(key string) error
	// PersistIndex writes every changed index record now, instead of at
	// the next periodic flush, and syncs nothing: it protects against a
	// crash of the agent (one killed in a write-back finds its data still
	// dirty), not of its host.
	PersistIndex() error
}

// Meta persists the vfs's metadata (attributes, listings) beside the
// index, in buckets (MetaAttr, MetaDir), so that a restarted agent knows
// what it knew. Values are opaque to the cache.
type Meta interface {
	// PutMeta records value (nil: removes it) under key in bucket. Writes
	// are batched with the index: durable at its next persist.
	PutMeta(bucket, key string, value []byte)
	// GetMeta returns what PutMeta recorded, or nil.
	GetMeta(bucket, key string) []byte
	// MetaKeys returns the keys of bucket that have a value, in bytewise
	// order: what an earlier run persisted and what this run put.
	MetaKeys(bucket string) []string
}

// Dirty keeps what was written and is not yet at the share ("unsent"),
// across restarts, and bounds the room it takes: dirty blocks are never
// evicted.
type Dirty interface {
	// Dirty returns the dirty ranges of key, sorted and disjoint.
	Dirty(key string) []Range
	// DirtyKeys lists the files with unsent data (to send after a
	// restart).
	DirtyKeys() []Entry
	// DirtyAt returns the dirty ranges of key, as Dirty does, and the mark
	// of the writes made so far, for MarkClean.
	DirtyAt(key string) ([]Range, uint64)
	// MarkClean records that the ranges done, dirty at mark (see DirtyAt;
	// AllWrites: every write so far), reached the share, which now holds
	// version (of size). Blocks written after mark stay dirty, and the
	// size stays the cache's if it changed after mark.
	MarkClean(key string, done []Range, mark uint64, version uint64, size int64)
	// Cut records that key's size was set here, to be sent exactly with
	// its data (an open with O_TRUNC): the file counts as unsent until
	// MarkClean leaves no dirty range.
	Cut(key string)
	// IsCut reports whether key's size was set here and is not at the
	// share.
	IsCut(key string) bool
	// Unsent reports whether key holds dirty ranges or a size (Cut) not
	// yet at the share, or data staged (see Stages).
	Unsent(key string) bool
	// Revert throws away the dirty data of key, which its share refused
	// for good, and every block cached with it: the file is the share's
	// again, at version and size, and the index records it at once.
	Revert(key string, version uint64, size int64) error
	// DirtyLimit is how many bytes of dirty blocks the cache holds before
	// writers send theirs ahead (see Ahead).
	DirtyLimit() int64
	// DirtyBytes is the size of the blocks that hold dirty data.
	DirtyBytes() int64
	// DirtyBytesOf is the size of key's blocks that hold dirty data.
	DirtyBytesOf(key string) int64
	// AddsDirty is how many bytes of blocks a write of n bytes at off to
	// key would make dirty that are not dirty yet.
	AddsDirty(key string, off, n int64) int64
	// Ahead returns the dirty ranges of key to send to the share before n
	// more bytes are written to it: none while the dirty blocks and the
	// write's fit within DirtyLimit; otherwise key's oldest (see Oldest),
	// enough to make room and at least a quarter of the limit. Once
	// marked clean they may be evicted.
	Ahead(key string, n int64) []Range
	// Oldest returns the dirty ranges of up to blocks of key's dirty
	// blocks, least recently used first, in file order; never the most
	// recently used one, so that the file stays dirty for its close.
	Oldest(key string, blocks int64) []Range
	// HoldWrites holds off WriteAt and Truncate of key until the function
	// it returns is called: for a send that marks ranges clean afterwards,
	// which a write in between would otherwise have marked clean unsent.
	HoldWrites(key string) (release func())
	// SentAhead counts n bytes a writer sent ahead of its close (Ahead).
	SentAhead(n int64)
}

// Stages records dirty ranges sent ahead into a stage at the share, which
// the file's close commits with the rest: staged ranges are no longer
// dirty (their blocks may be evicted) and still unsent. The record
// survives a restart, so that the agent finds its stage again.
type Stages interface {
	// Stage returns what the index records of key's stage.
	Stage(key string) StageInfo
	// StageOf returns the name of key's stage ("" if none) and the ranges
	// staged in it.
	StageOf(key string) (name string, staged []Range)
	// SetStage names key's stage; the index records it at the next
	// persist (PersistIndex, which a write-back makes before it sends).
	SetStage(key, name string)
	// MarkStaged records that the dirty ranges rs of key are in its stage
	// name: no longer dirty, still unsent. If key's stage is another by
	// now, they stay dirty.
	MarkStaged(key, name string, rs []Range)
	// MarkSent records that the bytes of the dirty ranges rs of key are
	// in its stage name (unless that is no longer key's stage): a
	// write-back after a restart need not send them again. A write to
	// them undoes it.
	MarkSent(key, name string, rs []Range)
	// EndStage forgets key's stage: committed, or thrown away.
	EndStage(key string)
	// HoldsRanges reports whether every block that the ranges rs of key
	// touch is on the cache's disk.
	HoldsRanges(key string, rs []Range) bool
}

// Backing hands a file's data file to the kernel to read directly (FUSE
// passthrough, sendfile) while the cache holds the whole of it.
type Backing interface {
	// Backing opens key's data file read-only if it holds the whole of
	// version, every block checked and nothing dirty, doing at most
	// maxWork bytes of writing and checking first (maxWork >= 0) or
	// failing. While it is out (until Unback with the same gen) the
	// file's blocks are not evicted, and a new version gets a new data
	// file: a reader of this one keeps the version it opened. Two
	// backings with the same gen are the same file.
	Backing(key string, version uint64, maxWork int64) (f *os.File, gen uint64, ok bool)
	// Unback ends a backing that Backing gave out.
	Unback(key string, gen uint64)
	// Whole reports whether Backing would give out key's data file for
	// version without writing or checking anything first.
	Whole(key string, version uint64) bool
	// Holds reports whether a file of size bytes fits the disk layer
	// comfortably, so that it can stay there whole.
	Holds(size int64) bool
	// Preload reads key's data file into the page cache once it holds the
	// whole of version, in the background, while no read comes through
	// the cache; a newer Preload ends an older one.
	Preload(key string, version uint64)
}
