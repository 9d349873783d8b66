package gateway

import (
	"context"
	"os"
	"path"
	"syscall"

	"golang.org/x/net/webdav"

	"pando.dev/pando/internal/vfs"
)

// davFS is a user's vfs as golang.org/x/net/webdav wants it. The names
// it gets are cleaned by webdav (and checked by CleanPath before), and are
// global paths.
type davFS struct{ v *vfs.FS }

func (d davFS) clean(name string) (string, error) {
	p, err := CleanPath(path.Clean("/" + name))
	if err != nil {
		return "", os.ErrInvalid
	}
	return p, nil
}

func davErr(err error) error {
	switch Errno(err) {
	case syscall.ENOENT:
		return os.ErrNotExist
	case syscall.EEXIST:
		return os.ErrExist
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return os.ErrPermission
	}
	return err
}

func (d davFS) Mkdir(ctx context.Context, name string, perm os.FileMode) error {
	p, err := d.clean(name)
	if err != nil {
		return err
	}
	_, err = d.v.Mkdir(context.WithoutCancel(ctx), p, uint32(perm.Perm()))
	return davErr(err)
}

func (d davFS) OpenFile(ctx context.Context, name string, flag int, perm os.FileMode) (webdav.File, error) {
	p, err := d.clean(name)
	if err != nil {
		return nil, err
	}
	f, err := OpenFile(ctx, d.v, p, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, davErr(err)
	}
	return f, nil
}

func (d davFS) RemoveAll(ctx context.Context, name string) error {
	p, err := d.clean(name)
	if err != nil {
		return err
	}
	if p == "/" {
		return os.ErrInvalid
	}
	return davErr(d.removeAll(context.WithoutCancel(ctx), p))
}

func (d davFS) removeAll(ctx context.Context, p string) error {
	a, err := d.v.GetAttr(ctx, p)
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return d.v.Unlink(ctx, p)
	}
	ents, err := d.v.ReadDir(ctx, p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		if err := d.removeAll(ctx, path.Join(p, e.Name)); err != nil {
			return err
		}
	}
	return d.v.Rmdir(ctx, p)
}

func (d davFS) Rename(ctx context.Context, oldName, newName string) error {
	op, err := d.clean(oldName)
	if err != nil {
		return err
	}
	np, err := d.clean(newName)
	if err != nil {
		return err
	}
	return davErr(d.v.Rename(context.WithoutCancel(ctx), op, np, false))
}

func (d davFS) Stat(ctx context.Context, name string) (os.FileInfo, error) {
	p, err := d.clean(name)
	if err != nil {
		return nil, err
	}
	a, err := d.v.GetAttr(context.WithoutCancel(ctx), p)
	if err != nil {
		return nil, davErr(err)
	}
	return Info(path.Base(p), a), nil
}
