package mount

import (
	"context"
	"path"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/wire"
)

// pagedDir lists a large directory a page at a time as the kernel reads
// on (see vfs.Paged): the agent never holds its whole listing. Entries
// are numbered from 1 in the order the share lists them; those numbers
// are the offsets the kernel gives back (a seek back starts over).
type pagedDir struct {
	n    *node
	ctx  context.Context
	p    string
	page []wire.DirEntry
	i    int    // the next entry of page
	off  uint64 // the number of the last entry given
	more bool
	err  syscall.Errno
}

func (n *node) pagedDir(ctx context.Context, p string) *pagedDir {
	return &pagedDir{n: n, ctx: context.WithoutCancel(ctx), p: p, more: true}
}

// fill fetches the next page when the last one is used up.
func (d *pagedDir) fill() {
	for d.i >= len(d.page) && d.more && d.err == 0 {
		after := ""
		if len(d.page) > 0 {
			after = d.page[len(d.page)-1].Name
		}
		page, more, err := d.n.v(d.ctx).ReadDirPage(d.ctx, d.p, after)
		if err != nil {
			d.err = d.n.m.fail("readdir", d.p, err)
			return
		}
		d.page, d.i, d.more = page, 0, more
	}
}

func (d *pagedDir) HasNext() bool {
	d.fill()
	return d.i < len(d.page) || d.err != 0
}

func (d *pagedDir) Next() (fuse.DirEntry, syscall.Errno) {
	if d.err != 0 {
		return fuse.DirEntry{}, d.err
	}
	e := d.page[d.i]
	d.i++
	d.off++
	cp := path.Join(d.p, e.Name)
	return fuse.DirEntry{Name: e.Name, Mode: e.Attr.Mode, Ino: d.n.m.ino(d.ctx, cp, e.Attr), Off: d.off}, 0
}

func (d *pagedDir) Close() {}

// Seekdir moves to just after entry off: within the page at hand, or
// else by listing again from the start.
func (d *pagedDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	first := d.off - uint64(d.i) // the number of the entry before the page
	if off < first {
		d.page, d.i, d.off, d.more, d.err = nil, 0, 0, true, 0
		first = 0
	}
	for {
		if off-first <= uint64(len(d.page)) {
			d.i = int(off - first)
			d.off = off
			return 0
		}
		first += uint64(len(d.page))
		d.i = len(d.page)
		if !d.more {
			d.off = first
			return 0 // past the end
		}
		d.fill()
		if d.err != 0 {
			return d.err
		}
	}
}

// dirHandle is an open directory: listed as Readdir lists it, when the
// kernel first reads. The entries of a large directory (pagedDir) come to
// the kernel's readdirplus without an inode, until a child of the
// directory is looked up: the agent would hold one for each (about 400
// bytes) until the kernel forgot it, 1,000,000 for a plain ls of
// 1,000,000 entries. A program that stats what it lists (ls -l) looks up
// the first entries it was given; the rest come with their inodes, which
// spares it a lookup of each.
//
// The listing a directory's kernel copy is filled from is noted (filled,
// dircache.go), but that of a large directory, which the agent does not
// keep: the next open then drops the kernel's copy.
type dirHandle struct {
	n     *node
	mu    sync.Mutex
	ds    fs.DirStream
	paged bool
}

var (
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
	_ fs.FileLookuper       = (*dirHandle)(nil)
)

// open lists the directory at the kernel's first read (h.mu held).
func (h *dirHandle) open(ctx context.Context) syscall.Errno {
	if h.ds != nil {
		return 0
	}
	ds, errno := h.n.Readdir(ctx)
	if errno != 0 {
		return errno
	}
	h.ds = ds
	_, h.paged = ds.(*pagedDir)
	h.n.filled(ctx)
	return 0
}

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := h.open(ctx); errno != 0 {
		return nil, errno
	}
	if !h.ds.HasNext() {
		return nil, 0
	}
	e, errno := h.ds.Next()
	return &e, errno
}

func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := h.open(ctx); errno != 0 {
		return errno
	}
	if sd, ok := h.ds.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (h *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ds != nil {
		h.ds.Close()
	}
}

// Lookup is readdirplus's lookup of an entry just listed.
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if h.paged && !h.n.looked.Load() {
		return nil, syscall.ENOENT // no inode: the entry goes without attributes (nodeid 0)
	}
	return h.n.Lookup(ctx, name, out)
}
