package nfs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	billy "github.com/go-git/go-billy/v5"
	nfsfile "github.com/willscott/go-nfs/file"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// exportFS is one export as the go-billy file system go-nfs serves: the
// subtree below the export's global path, every request made through
// the vfs of the export's principal.
//
// Paths between go-nfs and exportFS are the names below the export's root
// joined with NUL (see Join), which no name may hold: each name a client
// sends is then checked alone (no "/", ".", ".." or empty name), so that
// a name like "../x" or "a/b" can never reach another directory.
type exportFS struct {
	srv   *Server
	name  string // the export's path, also its root's global path
	user  string // the principal every request is made as
	id    uint32 // hash of name, in the export's file handles
	files *openFiles
}

const sep = "\x00"

// reqTimeout bounds one NFS request's wait on the vfs.
const reqTimeout = 2 * time.Minute

func (e *exportFS) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), reqTimeout)
}

// names splits a go-nfs path into names, each checked.
func names(rel string) ([]string, error) {
	if rel == "" {
		return nil, nil
	}
	ns := strings.Split(rel, sep)
	for _, n := range ns {
		if err := checkName(n); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

func checkName(n string) error {
	switch {
	case n == "" || n == "." || n == "..":
		return syscall.EINVAL
	case len(n) > 255:
		return syscall.ENAMETOOLONG
	case strings.ContainsAny(n, "/\x00"):
		return syscall.EINVAL
	}
	return nil
}

// global returns the global path of a go-nfs path.
func (e *exportFS) global(rel string) (string, error) {
	ns, err := names(rel)
	if err != nil {
		return "", err
	}
	return path.Join(append([]string{e.name}, ns...)...), nil
}

// do runs fn with the principal's vfs and the global path of rel, and
// makes its error an *os.PathError carrying the errno.
func (e *exportFS) do(op, rel string, fn func(ctx context.Context, v *vfs.FS, g string) error) error {
	g, err := e.global(rel)
	if err != nil {
		return &os.PathError{Op: op, Path: e.name + "/" + strings.ReplaceAll(rel, sep, "/"), Err: err}
	}
	ctx, cancel := e.ctx()
	defer cancel()
	v, err := e.srv.users.Acquire(ctx, e.user)
	if err != nil {
		return &os.PathError{Op: op, Path: g, Err: fmt.Errorf("%w: %v", syscall.EIO, err)}
	}
	defer e.srv.users.Release(e.user)
	if err := fn(ctx, v, g); err != nil {
		return e.srv.pathErr(op, g, err)
	}
	return nil
}

// pathErr is the *os.PathError of a vfs error, counted when it is a
// refusal.
func (s *Server) pathErr(op, g string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return err
	}
	en := vfs.Errno(err)
	if en == syscall.EACCES || en == syscall.EPERM || en == syscall.EROFS {
		s.c.Refused.Add(1)
	}
	return &os.PathError{Op: op, Path: g, Err: en}
}

// fileInfo is a vfs attribute as the os.FileInfo go-nfs reads, with the
// inode and link count in Sys.
type fileInfo struct {
	name string
	a    wire.Attr
	id   uint64
}

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return i.a.Size }
func (i *fileInfo) ModTime() time.Time { return time.Unix(0, i.a.Mtime) }
func (i *fileInfo) IsDir() bool        { return i.a.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (i *fileInfo) Sys() any {
	return nfsfile.FileInfo{Nlink: max(i.a.Nlink, 1), Fileid: i.id,
		Major: uint32(i.a.Rdev >> 8 & 0xfff), Minor: uint32(i.a.Rdev&0xff | i.a.Rdev>>12&^0xff)}
}
func (i *fileInfo) Mode() fs.FileMode { return wire.FileMode(i.a.Mode) }

// info makes the fileInfo of g: its file id is the inode mixed with the
// share's name (an export may span shares, whose inodes may meet).
func info(ctx context.Context, v *vfs.FS, g string, a wire.Attr) *fileInfo {
	id := a.Ino
	if key, err := v.Key(ctx, g, a); err == nil {
		h := fnv.New64a()
		h.Write([]byte(key))
		id = h.Sum64()
	}
	return &fileInfo{name: path.Base(g), a: a, id: id}
}

// Stat is Lstat: NFS clients follow links themselves.
func (e *exportFS) Stat(rel string) (os.FileInfo, error) { return e.Lstat(rel) }

func (e *exportFS) Lstat(rel string) (os.FileInfo, error) {
	var fi *fileInfo
	err := e.do("stat", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		// A file written through the gateway and not sent yet has the
		// size and time of the gateway's copy.
		a, ok, err := e.files.attr(ctx, g)
		if !ok {
			a, err = v.GetAttr(ctx, g)
		}
		if err == nil {
			fi = info(ctx, v, g, a)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return fi, nil
}

func (e *exportFS) ReadDir(rel string) ([]os.FileInfo, error) {
	var out []os.FileInfo
	err := e.do("readdir", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		ents, err := v.ReadDir(ctx, g)
		if err != nil {
			return err
		}
		out = make([]os.FileInfo, 0, len(ents))
		for _, en := range ents {
			if checkName(en.Name) != nil {
				continue // ".", ".." (go-nfs adds them)
			}
			out = append(out, info(ctx, v, path.Join(g, en.Name), en.Attr))
		}
		return nil
	})
	return out, err
}

// MkdirAll makes the last directory of rel (go-nfs has checked the rest).
func (e *exportFS) MkdirAll(rel string, perm os.FileMode) error {
	return e.do("mkdir", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		_, err := v.Mkdir(ctx, g, uint32(perm.Perm()))
		return err
	})
}

// Create makes rel, or opens it if it exists, without truncating it (NFS's
// UNCHECKED create: a client that wants it empty sets its size).
func (e *exportFS) Create(rel string) (billy.File, error) {
	return e.OpenFile(rel, os.O_RDWR|os.O_CREATE, 0o644)
}

func (e *exportFS) Open(rel string) (billy.File, error) { return e.OpenFile(rel, os.O_RDONLY, 0) }

func (e *exportFS) OpenFile(rel string, flag int, perm os.FileMode) (billy.File, error) {
	var f billy.File
	err := e.do("open", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		of, err := e.files.get(ctx, v, g, flag, uint32(perm.Perm()))
		if err == nil {
			f = &file{e: e, of: of, name: rel}
		}
		return err
	})
	return f, err
}

func (e *exportFS) Rename(oldRel, newRel string) error {
	ng, err := e.global(newRel)
	if err != nil {
		return &os.PathError{Op: "rename", Path: newRel, Err: err}
	}
	return e.do("rename", oldRel, func(ctx context.Context, v *vfs.FS, g string) error {
		// What the gateway holds of either is sent first.
		if err := e.files.closeTree(ctx, g); err != nil {
			return err
		}
		if err := e.files.closeTree(ctx, ng); err != nil {
			return err
		}
		return v.Rename(ctx, g, ng, false)
	})
}

func (e *exportFS) Remove(rel string) error {
	return e.do("remove", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		a, err := v.GetAttr(ctx, g)
		if err != nil {
			return err
		}
		if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return v.Rmdir(ctx, g)
		}
		e.files.drop(ctx, g)
		return v.Unlink(ctx, g)
	})
}

// Join joins names with NUL (see exportFS).
func (e *exportFS) Join(elem ...string) string { return strings.Join(elem, sep) }

func (e *exportFS) TempFile(dir, prefix string) (billy.File, error) {
	return nil, billy.ErrNotSupported
}

func (e *exportFS) Symlink(target, link string) error {
	if len(target) > 4096 || strings.Contains(target, "\x00") {
		return &os.PathError{Op: "symlink", Path: link, Err: syscall.EINVAL}
	}
	return e.do("symlink", link, func(ctx context.Context, v *vfs.FS, g string) error {
		_, err := v.Symlink(ctx, target, g)
		return err
	})
}

func (e *exportFS) Readlink(rel string) (string, error) {
	var t string
	err := e.do("readlink", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		var err error
		t, err = v.Readlink(ctx, g)
		return err
	})
	return t, err
}

func (e *exportFS) Chroot(string) (billy.Filesystem, error) { return nil, billy.ErrNotSupported }
func (e *exportFS) Root() string                            { return e.name }

// Chmod, Chtimes: billy.Change, through the vfs's setattr.
func (e *exportFS) Chmod(rel string, mode os.FileMode) error {
	return e.do("chmod", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		_, err := v.SetAttr(ctx, g, wire.SetAttrReq{Valid: wire.SetMode, Mode: uint32(mode.Perm())})
		return err
	})
}

// Lchown and Chown are refused: owners are principals, and an NFS
// client's numeric ids name no one the grid knows (AUTH_SYS is not
// trusted; see docs/gateways.md).
func (e *exportFS) Lchown(rel string, uid, gid int) error {
	return &os.PathError{Op: "chown", Path: rel, Err: syscall.EPERM}
}

func (e *exportFS) Chown(rel string, uid, gid int) error { return e.Lchown(rel, uid, gid) }

func (e *exportFS) Chtimes(rel string, atime, mtime time.Time) error {
	return e.do("utimes", rel, func(ctx context.Context, v *vfs.FS, g string) error {
		_, err := v.SetAttr(ctx, g, wire.SetAttrReq{Valid: wire.SetAtime | wire.SetMtime, Atime: atime.UnixNano(), Mtime: mtime.UnixNano()})
		return err
	})
}
