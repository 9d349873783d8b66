// Package vfs presents the global namespace as a file system: path
// resolution, attributes and listings cached in memory and in the cache's
// index, open/close semantics over the block cache, the write modes, and
// the recovery of data not yet sent. It holds the block cache as a
// blockcache.Cache, which its caller opens. It does not import FUSE; edges
// (the FUSE mount, the HTTP, WebDAV, S3 and NFS gateways) translate its errors,
// which are *wire.Error values or syscall errnos, at their boundary.
// Every edge holds an open file as a File (file.go): reads and writes at
// an offset or a cursor, and the one rule for reading straight from the
// cache's data file. What edges ask of the namespace beside files comes
// in the vfs's or wire's types, never the client's or the cache's
// (internal/layers checks it).
//
// It reaches the shares only through the two interfaces of
// internal/remote that New takes: a remote.Namespace (where paths live,
// attributes, listings, invalidations, delegations, the calls that change
// names) and a remote.Data (files opened at their locations). The agent
// and the gateway (internal/private) pass internal/client's for one
// domain; a decorator of either goes between without a change here.
//
// Whether what is cached may be used, how long the kernel may keep it and
// what a change does are decided by the path's consistency rule
// (internal/consistency: strict, window=D, poll=D, callback, immutable,
// per mount and per path prefix, Options.Consistency and Options.Policies).
// The vfs runs what the rules rely on: the pollers and long polls of the
// shares (poll.go), the kernel notifications on a recall or when a lease
// runs out (kernel.go), listings that revalidate their entries and are
// fetched ahead (meta.go, listing.go), and the persisted listings
// validated at start (warm.go). docs/consistency.md specifies them.
//
// Write modes: close (data is kept in the cache and sent to the share on
// the last close; errors are returned by close), through (each write
// reaches the share before it returns) and back (writes are kept in the
// cache while the share grants a write delegation, under callback;
// deleg.go). Data not yet sent survives a restart of the agent and is
// sent again, or kept beside the file as a conflict (replay.go).
package vfs
