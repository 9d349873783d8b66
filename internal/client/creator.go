package client

import (
	"context"

	"pando.dev/pando/internal/remote"
)

// Creator is the owner and group a new entry is given at its share (see
// wire.ValidIdent): the mount sets them from the local caller through its
// ID map. Empty: the principal's, and no group.
type Creator = remote.Creator

// WithCreator has the creates made with ctx (Create, Mkdir, Mknod,
// Symlink) ask for c as the new entry's owner and group.
func WithCreator(ctx context.Context, c Creator) context.Context {
	return remote.WithCreator(ctx, c)
}

func creatorOf(ctx context.Context) Creator {
	return remote.CreatorOf(ctx)
}
