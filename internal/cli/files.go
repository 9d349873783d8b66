package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// Get copies the grid file or (with recursive) tree src to the local path dst.
func Get(ctx context.Context, c *client.Client, src, dst string, recursive bool, progress *os.File) error {
	a, err := c.Stat(ctx, src)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	if IsDir(a.Mode) {
		if !recursive {
			return Usagef("%s is a directory; use -r to copy a tree", src)
		}
		if err := os.MkdirAll(dst, fs.FileMode(a.Mode&0o777)|0o700); err != nil {
			return err
		}
		entries, err := c.ReadDir(ctx, src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := Get(ctx, c, path.Join(src, e.Name), filepath.Join(dst, e.Name), true, progress); err != nil {
				return err
			}
		}
		return nil
	}
	if IsLink(a.Mode) {
		target, err := c.Readlink(ctx, src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	f, err := c.Open(ctx, src, wire.OpenRead|wire.OpenFollow)
	if err != nil {
		return err
	}
	defer f.Close(context.WithoutCancel(ctx))
	if di, err := os.Stat(filepath.Dir(dst)); err != nil || !di.IsDir() {
		return fmt.Errorf("cannot write %s: the directory %s does not exist; create it first (mkdir -p %s)", dst, filepath.Dir(dst), filepath.Dir(dst))
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".pando-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary file's name means nothing to the user
		}
		return fmt.Errorf("cannot write %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name())
	var w io.Writer = tmp
	var p *Progress
	if progress != nil {
		p = NewProgress(progress, path.Base(src), a.Size)
		w = p.Writer(tmp)
	}
	_, err = f.WriteTo(ctx, w)
	if p != nil {
		p.Done()
	}
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fs.FileMode(a.Mode & 0o777)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write %s: %w", dst, err)
	}
	return os.Rename(tmp.Name(), dst)
}

// Put copies the local file or (with recursive) tree src to the grid path dst.
func Put(ctx context.Context, c *client.Client, src, dst string, recursive bool, progress *os.File) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if a, err := c.Stat(ctx, dst); err == nil && IsDir(a.Mode) {
		dst = path.Join(dst, filepath.Base(src))
	}
	switch {
	case fi.IsDir():
		if !recursive {
			return Usagef("%s is a directory; use -r to copy a tree", src)
		}
		if _, err := c.Mkdir(ctx, dst, uint32(fi.Mode().Perm())); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := Put(ctx, c, filepath.Join(src, e.Name()), path.Join(dst, e.Name()), true, progress); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		_, err = c.Symlink(ctx, target, dst)
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file; only files, directories and symlinks can be copied", src)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return putFile(ctx, c, in, src, dst, fi, progress)
}

// putFile writes in to the grid path dst through a stage at its share: an
// existing file there is its old version until the whole of the new one
// has arrived, and stays so if it cannot (a full disk at the share); a
// file created for the copy is removed if the copy fails.
func putFile(ctx context.Context, c *client.Client, in *os.File, src, dst string, fi fs.FileInfo, progress *os.File) (err error) {
	created := true
	f, err := c.Create(ctx, dst, wire.OpenWrite|wire.OpenExcl|wire.OpenFollow, uint32(fi.Mode().Perm()))
	if errors.Is(err, fs.ErrExist) {
		created = false
		f, err = c.Open(ctx, dst, wire.OpenWrite|wire.OpenFollow)
	}
	if err != nil {
		return err
	}
	bg := context.WithoutCancel(ctx)
	defer func() {
		cerr := f.Close(bg)
		if err == nil {
			err = cerr
		}
		if err != nil && created {
			_ = c.Remove(bg, dst)
		}
		if errors.Is(err, syscall.ENOSPC) {
			was := "the file there is unchanged"
			if created {
				was = "nothing was left there"
			}
			err = fmt.Errorf("%s (%d bytes) does not fit in the free space of the share of %s; %s. Free space at the share, or put the file elsewhere: %w", src, fi.Size(), dst, was, err)
		}
	}()
	st, err := f.Stage(ctx)
	if err != nil {
		return err
	}
	defer st.Close(bg)
	var r io.Reader = in
	var p *Progress
	if progress != nil {
		p = NewProgress(progress, filepath.Base(src), fi.Size())
		r = p.Reader(in)
	}
	n, err := st.ReadFrom(ctx, r)
	if p != nil {
		p.Done()
	}
	if err != nil {
		return err
	}
	_, err = st.Commit(ctx, client.Commit{Size: n, Sync: true})
	return err
}

// MkdirAll creates dir and its missing parents.
func MkdirAll(ctx context.Context, c *client.Client, dir string, mode uint32) error {
	a, err := c.Stat(ctx, dir)
	if err == nil {
		if !IsDir(a.Mode) {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := path.Dir(dir); parent != dir {
		if err := MkdirAll(ctx, c, parent, mode); err != nil {
			return err
		}
	}
	if _, err := c.Mkdir(ctx, dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// RemoveAll removes p and, if it is a directory, everything below it.
func RemoveAll(ctx context.Context, c *client.Client, p string) error {
	a, err := c.Stat(ctx, p)
	if err != nil {
		return err
	}
	if !IsDir(a.Mode) {
		return c.Remove(ctx, p)
	}
	entries, err := c.ReadDir(ctx, p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := RemoveAll(ctx, c, path.Join(p, e.Name)); err != nil {
			return err
		}
	}
	return c.Rmdir(ctx, p)
}
