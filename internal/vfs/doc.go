// Package vfs presents the global namespace as a file system: path
// resolution, attribute and directory caches governed by a consistency mode,
// open/close semantics over the block cache, and write modes. It holds the
// block cache as a blockcache.Cache, which its caller opens. It does not
// import FUSE; edges (the FUSE mount, later gateways) translate its errors,
// which are *wire.Error values or syscall errnos, at their boundary.
//
// Consistency modes (per mount, overridable per path prefix):
//   - strict: no attribute caching; every open and stat asks the share.
//   - window=D: attributes and listings are trusted for D after they were
//     fetched (the Avaki coherence window); data is revalidated by the file's
//     change counter when its attributes are.
//   - immutable: never revalidated once cached.
//
// Write modes: close (data is kept in the cache and sent to the share on
// the last close; errors are returned by close) and through (each write
// reaches the share before it returns).
package vfs
