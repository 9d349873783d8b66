package remote

import (
	"context"
	"errors"
	"time"
)

// Loc is where a global path lives: the mount table's longest prefix
// above it and the path inside that prefix's share.
type Loc struct {
	Global string // cleaned global path
	Prefix string // mount prefix; "" for a synthetic directory above mounts
	Share  string
	Rel    string // share-relative path
}

// ErrUnreachable matches errors of locations that could not be reached: a
// new attempt later may succeed. The vfs serves what it holds cached, read
// only, while a path's location yields it.
var ErrUnreachable = errors.New("share unreachable")

// Extent is a byte range of a file to send (see Stage.WriteExtents).
type Extent struct {
	Off, Len int64
}

// Commit says how a commit ends (see wire.CommitReq): the file's size
// becomes Size (or, with KeepLonger, stays larger if it is) and its
// modification time Mtime (unix ns, if not 0); with Sync, every step is
// durable at the share.
type Commit struct {
	Size, Mtime      int64
	KeepLonger, Sync bool
}

// Creator is the owner and group a new entry is given at its share (see
// wire.ValidIdent): the mount sets them from the local caller through its
// ID map. Empty: the principal's, and no group.
type Creator struct{ Owner, Group string }

type creatorKey struct{}

// WithCreator has the creates made with ctx (Data.Create, Mkdir, Mknod,
// Symlink) ask for c as the new entry's owner and group.
func WithCreator(ctx context.Context, c Creator) context.Context {
	return context.WithValue(ctx, creatorKey{}, c)
}

// CreatorOf returns the creator WithCreator put in ctx, or the zero one.
func CreatorOf(ctx context.Context) Creator {
	c, _ := ctx.Value(creatorKey{}).(Creator)
	return c
}

// HealthEvent says that a share went down or came back.
type HealthEvent struct {
	Share string
	Up    bool
	// Since is when the share went down (for an Up event too: the
	// outage lasted until now).
	Since time.Time
	Err   error // the cause (Up: nil)
}
