package vfs

import (
	"context"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// The namespace's changes (directories, names, links, special files) and
// the attributes a program sets: each goes to the share, then updates
// what the caches hold of the names it touched.

// Mkdir creates a directory.
func (v *FS) Mkdir(ctx context.Context, p string, mode uint32) (wire.Attr, error) {
	if err := v.downErr(ctx, p); err != nil {
		return wire.Attr{}, err
	}
	d := v.dropCount()
	a, err := v.c.Mkdir(ctx, p, mode)
	if err != nil {
		v.forget(p)
		return a, err
	}
	v.made(p, a, d)
	return a, err
}

// Unlink removes a file.
func (v *FS) Unlink(ctx context.Context, p string) error {
	if err := v.downErr(ctx, p); err != nil {
		return err
	}
	v.waitOpens(ctx, p)
	v.settle(p)
	v.mu.Lock()
	ae, known := v.attrs.get(p)
	v.mu.Unlock()
	err := v.c.Remove(ctx, p)
	v.forget(p)
	if err == nil {
		v.gone(p)
	}
	if err == nil && known && !ae.neg {
		v.unlinked(ctx, p, ae.a)
		v.forgetLinks(ae.a)
	}
	return err
}

// Rmdir removes an empty directory.
func (v *FS) Rmdir(ctx context.Context, p string) error {
	if err := v.downErr(ctx, p); err != nil {
		return err
	}
	err := v.c.Rmdir(ctx, p)
	v.forgetTree(p)
	if err == nil {
		v.gone(p)
	}
	return err
}

// Rename moves oldp to newp.
func (v *FS) Rename(ctx context.Context, oldp, newp string, noReplace bool) error {
	if err := v.downErr(ctx, oldp); err != nil {
		return err
	}
	v.waitOpens(ctx, oldp)
	v.waitOpens(ctx, newp)
	v.settle(oldp)
	v.settle(newp)
	v.mu.Lock()
	replaced, known := v.attrs.get(newp)
	v.mu.Unlock()
	err := v.c.Rename(ctx, oldp, newp, noReplace)
	v.forgetTree(oldp)
	v.forgetTree(newp)
	if err == nil {
		v.gone(oldp)
		v.gone(newp)
		if known && !replaced.neg {
			v.forgetLinks(replaced.a)
		}
	}
	return err
}

// Mknod creates p as a FIFO, a socket, a device (a record at the share,
// see wire.MknodReq) or an empty regular file.
func (v *FS) Mknod(ctx context.Context, p string, mode, rdev uint32) (wire.Attr, error) {
	if err := v.downErr(ctx, p); err != nil {
		return wire.Attr{}, err
	}
	d := v.dropCount()
	a, err := v.c.Mknod(ctx, p, mode, rdev)
	if err != nil {
		v.forget(p)
		return a, err
	}
	v.made(p, a, d)
	return a, err
}

// Symlink creates p pointing at target.
func (v *FS) Symlink(ctx context.Context, target, p string) (wire.Attr, error) {
	if err := v.downErr(ctx, p); err != nil {
		return wire.Attr{}, err
	}
	d := v.dropCount()
	a, err := v.c.Symlink(ctx, target, p)
	if err != nil {
		v.forget(p)
		return a, err
	}
	v.made(p, a, d)
	return a, err
}

// Readlink reads a symlink.
func (v *FS) Readlink(ctx context.Context, p string) (string, error) { return v.c.Readlink(ctx, p) }

// Link makes newp a hard link to oldp.
func (v *FS) Link(ctx context.Context, oldp, newp string) (wire.Attr, error) {
	if err := v.downErr(ctx, oldp); err != nil {
		return wire.Attr{}, err
	}
	v.settle(oldp)
	d := v.dropCount()
	a, err := v.c.Link(ctx, oldp, newp)
	v.forget(newp)
	v.forget(oldp)
	if err == nil {
		v.forgetLinks(a)
		v.setOwn(newp, a, d)
	}
	return a, err
}

// SetAttr changes mode, times or size of p. A size change is applied to
// the share at once and to the cached data.
func (v *FS) SetAttr(ctx context.Context, p string, r wire.SetAttrReq) (wire.Attr, error) {
	if err := v.downErr(ctx, p); err != nil {
		return wire.Attr{}, err
	}
	d := v.dropCount()
	resp, err := v.c.SetAttrPrior(ctx, p, r)
	a := resp.Attr
	v.forget(p)
	if err != nil {
		return a, err
	}
	// The file's other names show its new mode, owner and times too.
	v.forgetLinks(a)
	v.setOwn(p, a, d)
	if resp.Prior != 0 && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		// A chmod (or atime) of ours changed the version, not the bytes:
		// what is cached of the version before is this one's (else the
		// next open drops it, and a read of it under a handle opened
		// before fails as changed).
		if key, kerr := v.Key(ctx, p, a); kerr == nil {
			if cv, _, ok := v.cache.Version(key); ok && cv == resp.Prior {
				v.cache.SetVersion(key, a.Version, a.Size)
			}
		}
	}
	if r.Valid&wire.SetSize != 0 {
		if key, kerr := v.Key(ctx, p, a); kerr == nil {
			if err := v.cache.Truncate(key, r.Size); err != nil {
				return a, err
			}
			v.cache.SetVersion(key, a.Version, a.Size)
		}
	}
	if r.Valid&wire.SetSize == 0 {
		// The share's size is not the file's while this agent holds
		// bytes it has not sent (write-back): the kernel would take it,
		// and an append would start at the share's end.
		a = v.localAttr(p, a)
	}
	return a, nil
}

// StatFS describes the file system behind p.
func (v *FS) StatFS(ctx context.Context, p string) (wire.StatFSResp, error) {
	return v.c.StatFS(ctx, p)
}
