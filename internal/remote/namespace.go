package remote

import (
	"context"
	"time"

	"pando.dev/pando/internal/wire"
)

// Namespace answers for the names of a tree of global paths: where each
// lives, its attributes and listings, what changed since (invalidations),
// the write delegations the vfs holds on them, and the calls that change
// names and attributes. See the package comment for what every method
// promises besides its own contract.
type Namespace interface {
	// Principal names who the namespace acts for ("alice@uva"). It asks
	// nobody.
	Principal() string

	// MountTable returns the prefixes the namespace places at shares.
	// It may return a table held from before (the implementation says
	// for how long); while nobody answers for the table, the one held is
	// returned however old, and an error only when none is held.
	MountTable(ctx context.Context) ([]wire.MountEntry, error)
	// Locate resolves a global path against the mount table (see
	// Resolve): Loc.Share is empty for a directory above every prefix,
	// which the namespace makes up from the prefixes below it. A path it
	// cannot place (another domain, nothing mounted there) fails here or
	// in the call that uses it, with wire.CodeNotExist.
	Locate(ctx context.Context, gpath string) (Loc, error)

	// Stat returns the attributes of gpath, not following a final
	// symlink, as the share has them now (no cache answers).
	Stat(ctx context.Context, gpath string) (wire.Attr, error)
	// ReadDirData lists the directory gpath whole, with the attributes
	// of each entry and of the directory, and the whole contents of the
	// small regular files listed (at most fileMax bytes each, budget in
	// all; 0: none), by name: each holds the bytes of the version its
	// entry names. A location that sends no contents is no error.
	ReadDirData(ctx context.Context, gpath string, fileMax, budget uint32) ([]wire.DirEntry, wire.Attr, map[string][]byte, error)
	// ReadDirPage lists the entries of gpath whose names sort (bytewise)
	// after after, at most max of them (0: the location's page size), in
	// that order with their attributes, and reports whether more follow.
	ReadDirPage(ctx context.Context, gpath, after string, max uint32) ([]wire.DirEntry, bool, error)
	// Readlink returns the target of the symlink gpath.
	Readlink(ctx context.Context, gpath string) (string, error)
	// StatFS returns the figures of the file system holding gpath.
	StatFS(ctx context.Context, gpath string) (wire.StatFSResp, error)
	// GetXattr returns the value of the extended attribute name of gpath
	// (wire.CodeNoData when it has none of that name).
	GetXattr(ctx context.Context, gpath, name string) ([]byte, error)
	// ListXattr returns the names of gpath's extended attributes.
	ListXattr(ctx context.Context, gpath string) ([]string, error)

	// The calls that change names and attributes. Each is done at the
	// share when it returns nil, and returns the attributes (with the
	// new version) of what it made or changed where it says so. The
	// creates (Mkdir, Mknod, Symlink) give the new entry the owner and
	// group of CreatorOf(ctx). A create of a name that exists fails with
	// wire.CodeExist.

	// Mkdir makes the directory gpath with mode's permission bits.
	Mkdir(ctx context.Context, gpath string, mode uint32) (wire.Attr, error)
	// Mknod makes the special file gpath (mode holds its type).
	Mknod(ctx context.Context, gpath string, mode, rdev uint32) (wire.Attr, error)
	// Symlink makes gpath a symlink to target.
	Symlink(ctx context.Context, target, gpath string) (wire.Attr, error)
	// Link makes newp a hard link to oldp, in the same share.
	Link(ctx context.Context, oldp, newp string) (wire.Attr, error)
	// Remove removes the file (not directory) gpath.
	Remove(ctx context.Context, gpath string) error
	// Rmdir removes the empty directory gpath.
	Rmdir(ctx context.Context, gpath string) error
	// Rename moves oldp to newp within one share, replacing newp unless
	// noReplace (then it fails with wire.CodeExist).
	Rename(ctx context.Context, oldp, newp string, noReplace bool) error
	// SetAttrPrior changes what r names and returns the attributes
	// afterwards, with the version the file had just before the change
	// when its contents did not change (wire.AttrResp.Prior).
	SetAttrPrior(ctx context.Context, gpath string, r wire.SetAttrReq) (wire.AttrResp, error)
	// SetXattr sets the extended attribute name (flags as setxattr(2)).
	SetXattr(ctx context.Context, gpath, name string, value []byte, flags uint32) (wire.Attr, error)
	// RemoveXattr removes the extended attribute name.
	RemoveXattr(ctx context.Context, gpath, name string) (wire.Attr, error)

	// GetInvWait returns the invalidations recorded for this session at
	// the share of gpath after the logical time since (at most max of
	// them, 0: the share's choice), acknowledging those up to since:
	// share-relative paths changed by others (a session need not hear of
	// its own changes), with the stamp to ask after next. With
	// wait > 0 the share holds the request up to wait while it has
	// nothing to report; lease is how long the caller trusts its cache
	// after a request that succeeded (callback mode). A reply with Force
	// set means the share lost track: everything under it is stale.
	GetInvWait(ctx context.Context, gpath string, since uint64, max uint32, wait, lease time.Duration) (wire.GetInvResp, error)
	// Validate asks the share of gpath which of the listings dirs (share
	// relative paths with the sums of the listings held, at most
	// wire.ValidateMax) are unchanged.
	Validate(ctx context.Context, gpath string, dirs []wire.DirCheck) (wire.ValidateResp, error)
	// DelegReturn gives back the write delegation id (granted with an
	// open, see File.Deleg) on the file gpath after the share recalled
	// it: first with the ranges still to be written (pending), then with
	// done once everything is at the share. A share that holds a newer
	// delegation of the file for this session ignores it.
	DelegReturn(ctx context.Context, gpath string, id uint64, pending []wire.ByteRange, done bool) error
	// DelegFail answers a recall of the delegation id with why its data
	// cannot be written back now: the share keeps the delegation and
	// tells the requests waiting for it.
	DelegFail(ctx context.Context, gpath string, id uint64, code wire.Code, msg string) error

	Health
}

// Health is what a namespace knows of the reachability of the shares it
// talks to. Its methods ask nobody: they report what requests and probes
// found.
type Health interface {
	// SetHealthHook has fn called (from the goroutine that found out)
	// when a share goes down or comes back. fn must not block.
	SetHealthHook(fn func(HealthEvent))
	// Health returns the state of every share talked to so far.
	Health() []wire.ShareHealth
	// DownErr returns, while share is marked down, the error its
	// requests fail with (matching ErrUnreachable); nil while it is up.
	DownErr(share string) error
	// Reachable returns nil unless the share of gpath is marked down,
	// and then its error.
	Reachable(ctx context.Context, gpath string) error
}
