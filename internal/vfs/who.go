package vfs

import "context"

// What an edge asks of the namespace beside files: whose view it serves,
// and which share holds a path (the mount numbers inodes by share).

// Principal is the person the file system acts for.
func (v *FS) Principal() string { return v.c.Principal() }

// ShareOf returns the share that holds the global path p, or "" for a
// directory of the namespace above every share.
func (v *FS) ShareOf(ctx context.Context, p string) (string, error) {
	loc, err := v.c.Locate(ctx, p)
	return loc.Share, err
}
