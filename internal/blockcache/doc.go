// Package blockcache says what the vfs needs of a block cache, and nothing
// of how one works: the interfaces the vfs holds its cache through, with a
// contract on every method, and the records both sides speak (byte
// ranges, the fetcher a miss calls, a file's stage, a dirty file, the
// metadata buckets). internal/cache implements it on local disk; the vfs
// imports this package and never that one, so that the agent and the
// gateway choose the cache and hand it to the vfs opened.
//
// The methods fall into five roles, one interface each: Blocks (a file's
// data, versions and pins), Meta (the vfs's attributes and listings,
// persisted), Dirty (written data not yet at the share, and the room it
// may take), Stages (dirty data sent ahead into a share's stage) and
// Backing (a file's data file handed to the kernel). Cache is all five,
// and what the vfs holds.
//
// A file is named by a key the vfs chooses (its share and inode). Every
// method is safe for concurrent use; none calls a Fetcher with a lock
// held that another method takes.
package blockcache
