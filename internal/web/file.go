package web

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// FileInfo is a vfs attribute as an fs.FileInfo.
type FileInfo struct {
	name string
	a    wire.Attr
}

// Info returns the fs.FileInfo of name with attributes a.
func Info(name string, a wire.Attr) *FileInfo { return &FileInfo{name: name, a: a} }

func (i *FileInfo) Name() string       { return i.name }
func (i *FileInfo) Size() int64        { return i.a.Size }
func (i *FileInfo) ModTime() time.Time { return time.Unix(0, i.a.Mtime) }
func (i *FileInfo) IsDir() bool        { return i.a.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (i *FileInfo) Sys() any           { return i.a }
func (i *FileInfo) Mode() fs.FileMode {
	m := fs.FileMode(i.a.Mode & 0o777)
	switch i.a.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFREG:
	default:
		m |= fs.ModeIrregular
	}
	return m
}

// ETag is the entity tag webdav shows for the file (webdav.ETager).
func (i *FileInfo) ETag(context.Context) (string, error) { return ETag(i.a), nil }

// Attr is the file's vfs attributes.
func (i *FileInfo) Attr() wire.Attr { return i.a }

// ETag is a strong entity tag of a version of a file: its inode and the
// share's version number.
func ETag(a wire.Attr) string {
	return `"` + hexNum(a.Ino) + "-" + hexNum(a.Version) + `"`
}

func hexNum(n uint64) string {
	const digits = "0123456789abcdef"
	if n == 0 {
		return "0"
	}
	var b [16]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = digits[n&15]
		n >>= 4
	}
	return string(b[i:])
}

// File is an open file or directory of a user's vfs, read and written at
// an offset as the net/http and webdav packages want.
type File struct {
	v *vfs.FS
	p string
	a wire.Attr
	h *vfs.Handle // nil for a directory
	// back is the cache's data file, when the cache held the whole file
	// at open (read-only opens; its blocks held only in memory are written
	// to it first, once): reads go straight to it, as the mount's
	// passthrough reads do.
	back *os.File
	off  int64
	ctx  context.Context
	list []fs.FileInfo
	dav  *davFS // the WebDAV request it was opened for, if any
	// rbuf holds rlen bytes of the file from roff (read-only opens).
	rbuf []byte
	roff int64
	rlen int
}

// OpenFile opens the global path p of v.
func OpenFile(ctx context.Context, v *vfs.FS, p string, flag int, perm uint32) (*File, error) {
	ctx = context.WithoutCancel(ctx)
	if flag&(syscall.O_CREAT) != 0 {
		h, a, err := v.Create(ctx, p, uint32(flag), perm)
		if err != nil {
			return nil, err
		}
		return &File{v: v, p: p, a: a, h: h, ctx: ctx}, nil
	}
	a, err := v.GetAttr(ctx, p)
	if err != nil {
		return nil, err
	}
	f := &File{v: v, p: p, a: a, ctx: ctx}
	switch a.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if flag&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
			return nil, syscall.EISDIR
		}
		return f, nil
	case syscall.S_IFREG:
	default:
		return nil, syscall.EACCES // links and devices are not served
	}
	if f.h, err = v.Open(ctx, p, uint32(flag)); err != nil {
		return nil, err
	}
	if flag&(syscall.O_WRONLY|syscall.O_RDWR) == 0 {
		if b, _, ok := f.h.Backing(-1); ok {
			f.back = b
		} else {
			f.rbuf = make([]byte, 1<<20)
		}
	}
	if flag&syscall.O_TRUNC != 0 {
		if f.a, err = f.h.Truncate(ctx, 0); err != nil {
			f.h.Release(ctx)
			return nil, err
		}
	}
	return f, nil
}

// Attr is the file's attributes when it was opened.
func (f *File) Attr() wire.Attr { return f.a }

func (f *File) Read(p []byte) (int, error) {
	if f.h == nil {
		return 0, syscall.EISDIR
	}
	if f.off >= f.a.Size {
		return 0, io.EOF
	}
	if rem := f.a.Size - f.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	var n int
	var err error
	if f.back != nil {
		n, err = f.back.ReadAt(p, f.off)
		if errors.Is(err, io.EOF) && n > 0 {
			err = nil
		}
	} else if f.rbuf != nil {
		n, err = f.buffered(p)
	} else {
		n, err = f.h.Read(f.ctx, p, f.off)
	}
	f.off += int64(n)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return n, err
}

// buffered reads through a 1 MiB buffer, so that a caller that reads 32
// KiB at a time (net/http's copy) asks the vfs once per MiB.
func (f *File) buffered(p []byte) (int, error) {
	if f.off < f.roff || f.off >= f.roff+int64(f.rlen) {
		n, err := f.h.Read(f.ctx, f.rbuf, f.off)
		if n == 0 {
			return 0, err
		}
		f.roff, f.rlen = f.off, n
	}
	return copy(p, f.rbuf[f.off-f.roff:f.rlen]), nil
}

func (f *File) Write(p []byte) (int, error) {
	if f.h == nil {
		return 0, syscall.EISDIR
	}
	n, err := f.h.Write(f.ctx, p, f.off)
	if err != nil && f.dav != nil {
		f.dav.note(err)
	}
	f.off += int64(n)
	if f.off > f.a.Size {
		f.a.Size = f.off
	}
	return n, err
}

func (f *File) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += f.off
	case io.SeekEnd:
		off += f.a.Size
	default:
		return 0, syscall.EINVAL
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	f.off = off
	return off, nil
}

// content is what to serve the file's bytes from: the cache's data file
// itself when reads go straight to it and it is exactly the file's size
// (then net/http sends it with sendfile over clear connections), else f.
func (f *File) content() io.ReadSeeker {
	if f.back != nil {
		if fi, err := f.back.Stat(); err == nil && fi.Size() == f.a.Size {
			return f.back
		}
	}
	return f
}

// Close sends what was written (its error says whether the share took
// it) and closes the file.
func (f *File) Close() error {
	if f.h == nil {
		return nil
	}
	if f.back != nil {
		f.back.Close()
		f.h.Unback()
		f.back = nil
	} else if f.rbuf != nil && f.off >= f.a.Size && f.a.Size > 0 {
		// Read to its end through the vfs: once the cache holds it whole,
		// its blocks go to the data file, so that the next open reads
		// from there (as the mount prepares passthrough).
		f.h.Whole(true)
	}
	err := f.h.Flush(f.ctx)
	if rerr := f.h.Release(f.ctx); err == nil {
		err = rerr
	}
	f.h = nil
	if err != nil && f.dav != nil {
		f.dav.note(err)
	}
	return err
}

func (f *File) Stat() (fs.FileInfo, error) {
	if f.h != nil {
		if a, err := f.h.Getattr(f.ctx); err == nil {
			f.a = a
		}
	}
	return Info(path.Base(f.p), f.a), nil
}

// Readdir lists a directory, as http.File asks.
func (f *File) Readdir(count int) ([]fs.FileInfo, error) {
	if f.h != nil {
		return nil, syscall.ENOTDIR
	}
	if f.list == nil {
		ents, err := f.v.ReadDir(f.ctx, f.p)
		if err != nil {
			return nil, err
		}
		f.list = make([]fs.FileInfo, 0, len(ents))
		for _, e := range ents {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			f.list = append(f.list, Info(e.Name, e.Attr))
		}
	}
	if count <= 0 {
		out := f.list[f.off:]
		f.off = int64(len(f.list))
		return out, nil
	}
	if f.off >= int64(len(f.list)) {
		return nil, io.EOF
	}
	end := min(f.off+int64(count), int64(len(f.list)))
	out := f.list[f.off:end]
	f.off = end
	return out, nil
}

// Errno is the errno of a vfs error.
func Errno(err error) syscall.Errno { return vfs.Errno(err) }
