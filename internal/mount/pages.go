package mount

import (
	"context"
	"path"
	"syscall"

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
		page, more, err := d.n.v().ReadDirPage(d.ctx, d.p, after)
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
