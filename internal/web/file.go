package web

import (
	"context"
	"io"
	"io/fs"
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

// File is an open file or directory of a user's vfs, as the net/http and
// webdav packages want it: a thin adapter over the vfs's File, which
// decides where reads come from (see vfs.File).
type File struct {
	v   *vfs.FS
	p   string
	a   wire.Attr // a directory's attributes
	vf  *vfs.File // nil for a directory
	off int64     // a directory's place in its listing
	ctx context.Context
	// list is a directory's listing, read at the first Readdir
	list []fs.FileInfo
	dav  *davFS // the WebDAV request it was opened for, if any
}

// OpenFile opens the global path p of v.
func OpenFile(ctx context.Context, v *vfs.FS, p string, flag int, perm uint32) (*File, error) {
	ctx = context.WithoutCancel(ctx)
	if flag&(syscall.O_CREAT) != 0 {
		vf, err := v.OpenFile(ctx, p, uint32(flag), perm)
		if err != nil {
			return nil, err
		}
		return &File{v: v, p: p, vf: vf, ctx: ctx}, nil
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
	if f.vf, err = v.OpenFile(ctx, p, uint32(flag), 0); err != nil {
		return nil, err
	}
	if flag&(syscall.O_WRONLY|syscall.O_RDWR) == 0 {
		f.vf.ReadDirect()
	}
	if flag&syscall.O_TRUNC != 0 {
		if _, err = f.vf.Truncate(ctx, 0); err != nil {
			f.vf.Close(ctx)
			return nil, err
		}
	}
	return f, nil
}

// Attr is the file's attributes when it was opened (a file's, as last
// seen).
func (f *File) Attr() wire.Attr {
	if f.vf != nil {
		return f.vf.Attr()
	}
	return f.a
}

// Direct reports whether reads go straight to the cache's data file.
func (f *File) Direct() bool { return f.vf != nil && f.vf.DataFile() != nil }

func (f *File) Read(p []byte) (int, error) {
	if f.vf == nil {
		return 0, syscall.EISDIR
	}
	n, err := f.vf.Read(f.ctx, p)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return n, err
}

func (f *File) Write(p []byte) (int, error) {
	if f.vf == nil {
		return 0, syscall.EISDIR
	}
	n, err := f.vf.Write(f.ctx, p)
	if err != nil && f.dav != nil {
		f.dav.note(err)
	}
	return n, err
}

// Seek moves a file's cursor; a directory's listing goes back to its
// start (or any place in it) only from the start.
func (f *File) Seek(off int64, whence int) (int64, error) {
	if f.vf != nil {
		return f.vf.Seek(off, whence)
	}
	if whence != io.SeekStart || off < 0 {
		return f.off, syscall.EINVAL
	}
	f.off = off
	return off, nil
}

// content is what to serve the file's bytes from: the cache's data file
// itself when reads go straight to it and it is exactly the file's size
// (then net/http sends it with sendfile over clear connections), else f.
func (f *File) content() io.ReadSeeker {
	if b := f.vf.DataFile(); b != nil {
		if fi, err := b.Stat(); err == nil && fi.Size() == f.vf.Attr().Size {
			return b
		}
	}
	return f
}

// Close sends what was written (its error says whether the share took
// it) and closes the file.
func (f *File) Close() error {
	if f.vf == nil {
		return nil
	}
	err := f.vf.Close(f.ctx)
	f.a, f.vf = f.vf.Attr(), nil
	if err != nil && f.dav != nil {
		f.dav.note(err)
	}
	return err
}

func (f *File) Stat() (fs.FileInfo, error) {
	a := f.a
	if f.vf != nil {
		a, _ = f.vf.Stat(f.ctx) // the attributes last seen, if the share cannot say
	}
	return Info(path.Base(f.p), a), nil
}

// Readdir lists a directory, as http.File asks.
func (f *File) Readdir(count int) ([]fs.FileInfo, error) {
	if f.vf != nil {
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
