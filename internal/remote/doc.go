// Package remote is the seam under the vfs: the two interfaces through
// which it reaches the files it serves, with a contract on each method,
// and the few types their methods carry.
//
//   - Namespace resolves a global path to where it lives and answers for
//     its names: attributes, listings, invalidations (GETINV), write
//     delegations, and the calls that change names and attributes.
//   - Data opens one file at one location and moves its bytes: ranged
//     reads and writes, stages committed whole, locks, close.
//
// The vfs holds only these interfaces; internal/client implements both
// for one domain's shares. Anything that must sit between the vfs and a
// share (a router by domain, a replica-choosing reader, a source that is
// not a directory, a fault-injecting wrapper in a test) is another
// implementation or a decorator that embeds the one it wraps and
// overrides the methods it changes, never a branch in the vfs.
//
// Contract common to every method:
//   - Paths are global and cleaned ("/uva/x"); the root is "/".
//   - Errors a share sends are *wire.Error (sort them with wire.CodeOf and
//     wire.Permanent); a location that cannot be reached now yields an
//     error matching ErrUnreachable; the context's error is returned
//     when it ends first. An implementation may reword a message (to name
//     the global path) but keeps its code: wire.CodeOf and errors.Is see
//     the same error through any wrapping.
//   - A "version" is wire.Attr.Version: the change counter the share
//     keeps for each file, which grows with every change of its data or
//     attributes, by pando or by a program at the share. Caches validate
//     against it; an implementation never makes it go back.
//   - Nothing is cached here on the vfs's behalf but where a method says
//     so (the mount table, a share's health): attributes, listings and
//     data are cached by the vfs and the block cache above.
//   - Every method is safe for concurrent use; a File's methods may be
//     called concurrently, but not after its Close.
//
// The contract suite in remote/remotetest runs against each
// implementation; remote/memory is the in-memory one that tests of the
// vfs use.
package remote
