package mount

import (
	"context"
	"path"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// node is a file, directory or symlink of the namespace.
type node struct {
	fs.Inode
	m  *Mount
	pt passthrough // the kernel's I/O mode of the node's opens

	smallReads atomic.Bool // a direct open of it was read in small pieces
	dirState               // for a directory (dircache.go)
	// looked: a child of this directory was looked up since it was last
	// opened (see dirHandle.Lookup)
	looked atomic.Bool
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeMknoder    = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)

	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
)

// gone is the path of nodes that are no longer in the tree (overwritten by
// a rename, or unlinked): it names nothing, so operations on it get ENOENT.
const gone = "/.pando-deleted"

// gpath is the node's global path.
func (n *node) gpath() string {
	p := n.Path(nil)
	if p == "" && !n.IsRoot() || strings.Contains(p, ".go-fuse.") {
		return gone
	}
	return "/" + p
}

// v is the vfs that serves the caller of the request in ctx (see
// logins.go): the caller's own on a mount with logins, else the mount's.
func (n *node) v(ctx context.Context) *vfs.FS { return n.m.vfsFor(ctx) }

// asCaller has what ctx makes in directory n belong to the local caller
// of the request (see IDMap.creator), and reports whether n is setgid.
func (n *node) asCaller(ctx context.Context) (context.Context, bool) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return ctx, false
	}
	dir, err := n.v(ctx).GetAttr(ctx, n.gpath())
	if err != nil {
		dir = wire.Attr{}
	}
	return vfs.WithCreator(ctx, n.m.idmap().creator(c.Uid, c.Gid, dir)), dir.Mode&syscall.S_ISGID != 0
}

// entry fills out for a child and returns its inode.
func (n *node) entry(ctx context.Context, p string, a wire.Attr, out *fuse.EntryOut) *fs.Inode {
	ctx, done := detach(ctx)
	defer done()
	ino := n.m.ino(ctx, p, a)
	n.m.fillAttr(&out.Attr, a, ino)
	out.SetEntryTimeout(n.m.entryTimeout(p))
	out.SetAttrTimeout(n.v(ctx).KernelTimeout(p))
	child := &node{m: n.m}
	return n.NewInode(ctx, child, fs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: ino})
}

// Lookup finds a child by name.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	if len(name) > 255 {
		return nil, syscall.ENAMETOOLONG // no name of a share is longer
	}
	if !n.looked.Load() {
		n.looked.Store(true)
	}
	p := path.Join(n.gpath(), name)
	a, err := n.v(ctx).GetAttr(ctx, p)
	if err != nil {
		if e := errno(err); e == syscall.ENOENT {
			out.SetEntryTimeout(n.m.entryTimeout(p))
			return nil, e
		}
		return nil, n.m.fail("lookup", p, err)
	}
	return n.entry(ctx, p, n.m.openAttr(ctx, p, a), out), 0
}

// Getattr returns attributes, through the open file when there is one.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	var a wire.Attr
	var err error
	if fh := asFile(f); fh != nil {
		a, err = fh.h.Getattr(ctx)
	} else {
		if a, err = n.v(ctx).GetAttr(ctx, p); err == nil {
			a = n.m.openAttr(ctx, p, a)
		}
	}
	if err != nil {
		return n.m.fail("getattr", p, err)
	}
	n.m.fillAttr(&out.Attr, a, n.StableAttr().Ino)
	out.SetTimeout(n.v(ctx).KernelTimeout(p))
	return 0
}

// Setattr changes mode, times or size.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	var r wire.SetAttrReq
	if m, ok := in.GetMode(); ok {
		r.Valid |= wire.SetMode
		r.Mode = m
	}
	if t, ok := in.GetATime(); ok {
		r.Valid |= wire.SetAtime
		r.Atime = t.UnixNano()
	}
	if t, ok := in.GetMTime(); ok {
		r.Valid |= wire.SetMtime
		r.Mtime = t.UnixNano()
	}
	var a wire.Attr
	var err error
	if sz, ok := in.GetSize(); ok {
		if fh := asFile(f); fh != nil {
			a, err = fh.h.Truncate(ctx, int64(sz))
		} else {
			a, err = n.v(ctx).SetAttr(ctx, p, wire.SetAttrReq{Valid: wire.SetSize, Size: int64(sz)})
		}
		if err != nil {
			return n.m.fail("truncate", p, err)
		}
	}
	// A chown: the kernel has checked POSIX's rules for the caller
	// (default_permissions), the share checks the principal's.
	if uid, ok := in.GetUID(); ok {
		r.Valid |= wire.SetOwner
		r.Owner = n.m.idmap().owner(uid)
	}
	if gid, ok := in.GetGID(); ok {
		r.Valid |= wire.SetGroup
		r.Group = n.m.idmap().group(gid)
	}
	if r.Valid != 0 {
		// Data written through open descriptors and not sent yet goes
		// first (NFS clients do the same): else the share answers with
		// the size before it, which the kernel would take, and the send
		// at close would undo times set now (cp -p, tar, rsync, Samba).
		if err := n.m.flushOpen(ctx, n); err != nil {
			return n.m.fail("setattr", p, err)
		}
		if a, err = n.v(ctx).SetAttr(ctx, p, r); err != nil {
			return n.m.fail("setattr", p, err)
		}
	}
	if a.Ino == 0 {
		return n.Getattr(ctx, f, out)
	}
	n.m.fillAttr(&out.Attr, a, n.StableAttr().Ino)
	out.SetTimeout(n.v(ctx).KernelTimeout(p))
	return 0
}

// Readdir lists a directory.
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	if n.v(ctx).Paged(ctx, p) {
		d := n.pagedDir(ctx, p)
		if d.fill(); d.err == 0 {
			return d, 0
		} // else as any other: the listing this agent knows, if the share is down
	}
	entries, err := n.v(ctx).ReadDir(ctx, p)
	if err != nil {
		return nil, n.m.fail("readdir", p, err)
	}
	out := make([]fuse.DirEntry, 0, len(entries))
	for _, e := range entries {
		cp := path.Join(p, e.Name)
		out = append(out, fuse.DirEntry{Name: e.Name, Mode: e.Attr.Mode, Ino: n.m.ino(ctx, cp, e.Attr)})
	}
	return fs.NewListDirStream(out), 0
}

// Open opens a file.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	pid := callerPid(ctx)
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	h, err := n.v(ctx).OpenFile(ctx, p, flags, 0)
	if err != nil {
		return nil, 0, n.m.fail("open", p, err)
	}
	var ff uint32
	if h.KeepCache {
		ff |= fuse.FOPEN_KEEP_CACHE
	} else {
		// The file changed since the kernel last had it open: its cached
		// size may be the old one, which would cut or zero-fill the new
		// bytes. Have it ask again (attributes only; the pages go with
		// the open, as KEEP_CACHE is not set).
		_ = n.NotifyContent(-1, 0)
	}
	if flags&syscall.O_DIRECT != 0 {
		ff |= fuse.FOPEN_DIRECT_IO
	}
	fh, ff := n.open(h, flags, ff, pid)
	return fh, ff, 0
}

// Create creates and opens a file.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := path.Join(n.gpath(), name)
	ctx, _ = n.asCaller(ctx)
	h, err := n.v(ctx).OpenFile(ctx, p, flags|syscall.O_CREAT, mode)
	if err != nil {
		return nil, nil, 0, notHere(n.m.fail("create", p, err))
	}
	ch := n.entry(ctx, p, h.Attr(), out)
	cn := ch.Operations().(*node)
	fh, ff := cn.open(h, flags, 0, 0)
	return ch, fh, ff, 0
}

// Mkdir creates a directory.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := path.Join(n.gpath(), name)
	ctx, sgid := n.asCaller(ctx)
	if sgid {
		mode |= syscall.S_ISGID // a directory made in a setgid one is setgid, as Linux has it
	}
	a, err := n.v(ctx).Mkdir(ctx, p, mode)
	if err != nil {
		return nil, notHere(n.m.fail("mkdir", p, err))
	}
	return n.entry(ctx, p, a, out), 0
}

// notHere answers a create or mkdir in a directory that takes none (one
// of the namespace above every share, which holds mounts, not files)
// with EPERM, as mkdir(2) has it for a file system that does not make
// directories there, instead of the vfs's EOPNOTSUPP, which no caller of
// open(2) or mkdir(2) expects: Samba answers EPERM with
// NT_STATUS_ACCESS_DENIED, what Windows answers there, and EOPNOTSUPP
// with NT_STATUS_NOT_SUPPORTED, which clients take as a broken server.
func notHere(e syscall.Errno) syscall.Errno {
	if e == syscall.EOPNOTSUPP {
		return syscall.EPERM
	}
	return e
}

// Unlink removes a file.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	p := path.Join(n.gpath(), name)
	return n.m.fail("unlink", p, n.v(ctx).Unlink(ctx, p))
}

// Rmdir removes a directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	p := path.Join(n.gpath(), name)
	return n.m.fail("rmdir", p, n.v(ctx).Rmdir(ctx, p))
}

// Rename moves a child to another directory of the same mount.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and whiteouts are not supported
	}
	oldp := path.Join(n.gpath(), name)
	newp := path.Join("/"+newParent.EmbeddedInode().Path(nil), newName)
	return n.m.fail("rename", oldp, n.v(ctx).Rename(ctx, oldp, newp, flags&unix.RENAME_NOREPLACE != 0))
}

// Mknod creates a FIFO, a socket, a device or an empty regular file.
// Their I/O is local to each host, as on NFS: the kernel serves a FIFO or
// a socket itself and never asks the agent to open one, and opens no
// device on the mount (nodev). The share keeps a device as a record.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := path.Join(n.gpath(), name)
	ctx, _ = n.asCaller(ctx)
	a, err := n.v(ctx).Mknod(ctx, p, mode, dev)
	if err != nil {
		return nil, n.m.fail("mknod", p, err)
	}
	return n.entry(ctx, p, a, out), 0
}

// Symlink creates a symbolic link.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := path.Join(n.gpath(), name)
	ctx, _ = n.asCaller(ctx)
	a, err := n.v(ctx).Symlink(ctx, target, p)
	if err != nil {
		return nil, n.m.fail("symlink", p, err)
	}
	return n.entry(ctx, p, a, out), 0
}

// Readlink reads a symbolic link.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	t, err := n.v(ctx).Readlink(ctx, p)
	if err != nil {
		return nil, n.m.fail("readlink", p, err)
	}
	return []byte(t), 0
}

// Link makes a hard link.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	oldp := "/" + target.EmbeddedInode().Path(nil)
	p := path.Join(n.gpath(), name)
	a, err := n.v(ctx).Link(ctx, oldp, p)
	if err != nil {
		return nil, n.m.fail("link", p, err)
	}
	return n.entry(ctx, p, a, out), 0
}

// Statfs describes the share behind the node (the first share for
// directories above the shares).
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	st, err := n.v(ctx).StatFS(ctx, n.gpath())
	if err != nil {
		// Namespace directories hold no data: report an empty file system.
		out.Bsize, out.NameLen = 4096, 255
		return 0
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.NameLen, out.Frsize = st.Bsize, st.NameLen, st.Bsize
	return 0
}

// Fsync on a node without a handle has nothing to send.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	if fh := asFile(f); fh != nil {
		return fh.Fsync(ctx, flags)
	}
	return 0
}
