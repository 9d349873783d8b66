package remote

import (
	"context"
	"slices"

	"pando.dev/pando/internal/wire"
)

// Data opens files at their locations. Flags are wire.Open*; a handle
// holds what the open found (File.Attr) and is the only way to the file's
// bytes: the vfs caches them, in blocks keyed by share and inode, and
// validates them against File.Attr().Version.
type Data interface {
	// Open opens the existing file gpath. An open that asks for a write
	// delegation (wire.OpenDeleg) may be granted one (File.Deleg).
	Open(ctx context.Context, gpath string, flags uint32) (File, error)
	// OpenFirst is Open for reading that also reads up to n bytes from
	// the file's start in the same round trip (File.First).
	OpenFirst(ctx context.Context, gpath string, flags uint32, n int) (File, error)
	// Create creates the file gpath with mode's permission bits, owned as
	// CreatorOf(ctx) says, and opens it; without wire.OpenExcl an
	// existing file is opened instead.
	Create(ctx context.Context, gpath string, flags, mode uint32) (File, error)
}

// File is one open file at one location. Reads see one version of the
// file at a time: a change at the share (by anyone) shows as a higher
// Attr().Version after the read that saw it. Writes through WriteAt reach
// the share's file when they return (a crash may lose the last ones
// until Sync); a stage's reach it only with its Commit, all at once.
type File interface {
	// Attr returns the attributes the handle knows, as of the open or
	// its latest request; it asks nobody.
	Attr() wire.Attr
	// Loc returns where the file lives.
	Loc() Loc
	// First returns the bytes OpenFirst read with the open (nil if none)
	// and whether they reach the end of the file.
	First() (data []byte, eof bool)
	// Deleg reports whether the open was granted a write delegation,
	// and DelegID names it (see Namespace.DelegReturn).
	Deleg() bool
	DelegID() uint64

	// ReadAt reads len(p) bytes at off; fewer, with io.EOF, at the end.
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	// ReadAtSum is ReadAt that also returns the CRC32C of the bytes read
	// as the share computed it, when summed; the caller checks it.
	ReadAtSum(ctx context.Context, p []byte, off int64) (n int, sum uint32, summed bool, err error)
	// WriteAt writes p at off (the handle must be open for writing).
	WriteAt(ctx context.Context, p []byte, off int64) (int, error)
	// Truncate sets the file's size.
	Truncate(ctx context.Context, size int64) error
	// Stat returns the file's attributes from the share now.
	Stat(ctx context.Context) (wire.Attr, error)
	// Sync has the file's data on the share's disk.
	Sync(ctx context.Context) error
	// Close releases the handle (and its locks). A handle whose
	// connection was lost is closed without error.
	Close(ctx context.Context) error

	// Lock takes (wire.LockRead, LockWrite) or drops (LockUnlock) a
	// POSIX lock on length bytes from start (0: to the end), held for
	// this handle until dropped or Close; a conflict fails it at once
	// with wire.CodeLocked.
	Lock(ctx context.Context, typ uint8, start, length int64) error
	// TestLock reports a lock that would conflict with typ over the
	// range (Type LockUnlock when none).
	TestLock(ctx context.Context, typ uint8, start, length int64) (wire.LockResp, error)

	// Stage opens a stage of the file (open for writing): writes to it
	// reach the file only with its Commit. StageNamed is Stage of the
	// named stage of this file: made if there is none, found again (with
	// what it holds, Stage.Held) after a Detach or a lost connection.
	Stage(ctx context.Context) (Stage, error)
	StageNamed(ctx context.Context, name string) (Stage, error)
	// CommitInline writes data (the ranges' bytes, in order) and commits
	// the file as c says, in one request: the file changes all at once.
	CommitInline(ctx context.Context, ranges []wire.ByteRange, data []byte, c Commit) (wire.Attr, error)
}

// Stage is a hidden copy of a file at its share that becomes the file's
// new version all at once with Commit.
type Stage interface {
	// Held is what a named stage held when it was found again: sorted,
	// disjoint ranges.
	Held() []wire.ByteRange
	// ReadAt reads bytes written to the stage.
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	// WriteExtents sends the bytes of exts (which must not overlap),
	// copied out of the caller's store by read, checksummed, with
	// written called after each request the share answered. It stops at
	// the first failure, which it returns (read's unchanged).
	WriteExtents(ctx context.Context, exts []Extent, read func(p []byte, off int64) (int, error), written func()) (wire.Attr, error)
	// Commit makes the stage the file's new version and returns its
	// attributes; it fails with the file unchanged when the share lacks
	// room (wire.CodeNoSpace).
	Commit(ctx context.Context, c Commit) (wire.Attr, error)
	// Detach releases the handle of a named stage, which the share keeps.
	Detach(ctx context.Context) error
	// Close throws the stage away.
	Close(ctx context.Context) error
}

// AddRange returns the sorted, disjoint ranges rs with r added (merged
// with those it overlaps or touches), as a stage's Held keeps them.
func AddRange(rs []wire.ByteRange, r wire.ByteRange) []wire.ByteRange {
	out := make([]wire.ByteRange, 0, len(rs)+1)
	for _, x := range rs {
		if x.Off+x.Len < r.Off || r.Off+r.Len < x.Off {
			out = append(out, x)
			continue
		}
		end := max(x.Off+x.Len, r.Off+r.Len)
		r.Off = min(x.Off, r.Off)
		r.Len = end - r.Off
	}
	out = append(out, r)
	slices.SortFunc(out, func(a, b wire.ByteRange) int { return int(min(max(a.Off-b.Off, -1), 1)) })
	return out
}
