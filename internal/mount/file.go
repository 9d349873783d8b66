package mount

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// file is an open file.
type file struct {
	h       *vfs.File
	m       *Mount
	n       *node
	pt      bool   // opened in passthrough mode
	direct  bool   // opened for direct I/O by choice (see node.open)
	flushed bool   // a descriptor of this direct open was closed (under n.pt.mu)
	pid     uint32 // the thread that opened it (the kernel names threads), if known

	// drop-behind of a sequential reader of a large file (see dropBehind)
	dmu              sync.Mutex
	reads            int64 // reads served
	read, maxEnd     int64 // bytes read, and the furthest end read
	dropped          int64 // the kernel's pages before this are dropped
	dropOK, dropSeen bool
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
)

// Read reads from the cache, filling it from the share.
func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	b, done, err := f.h.ReadSlice(ctx, dest, off)
	if err != nil {
		done()
		return nil, f.m.fail("read", f.h.Path(), err)
	}
	f.m.reads.Add(1)
	f.m.readBytes.Add(int64(len(b)))
	f.dropBehind(off, int64(len(b)))
	f.sawReads(int64(len(b)))
	return &sliceResult{b, done}, 0
}

// sliceResult is a read's reply that lends out bytes of the cache: done
// gives them back once the reply is written. It offers the bytes as
// slices, which the server writes before it calls Done; as plain Bytes
// it would call Done first (with splicing off, as here), and the bytes
// could be reused before they are sent.
type sliceResult struct {
	b    []byte
	done func()
}

func (r *sliceResult) Size() int                          { return len(r.b) }
func (r *sliceResult) Bytes([]byte) ([]byte, fuse.Status) { return r.b, fuse.OK }
func (r *sliceResult) Slices() ([][]byte, fuse.Status)    { return [][]byte{r.b}, fuse.OK }
func (r *sliceResult) Done()                              { r.done() }

// Drop-behind: a file the cache can hold whole will be read directly from
// the cache's data file by the next open (passthrough), and the pages the
// kernel keeps of the FUSE file would only be memory held twice, which
// that open would then pay for dropping. So behind a sequential reader of
// such a file they are dropped as it goes, dropLag behind the furthest
// read, dropChunk at a time, and so are the agent's own copies in memory.
const (
	dropChunk = 64 << 20
	dropLag   = 32 << 20
)

func (f *file) dropBehind(off, n int64) {
	f.dmu.Lock()
	if !f.dropSeen {
		fl, a := f.h.Opened()
		f.dropSeen = true
		f.dropOK = !f.pt && !f.m.noPassthrough && fl&syscall.O_ACCMODE == syscall.O_RDONLY &&
			a.Size >= dropAfterClose && f.h.Holdable()
	}
	f.read += n
	f.maxEnd = max(f.maxEnd, off+n)
	from, to := f.dropped, f.maxEnd-dropLag
	// Sequential: nearly everything up to the furthest end was read.
	ok := f.dropOK && to-from >= dropChunk && f.read >= f.maxEnd-f.maxEnd/8
	if ok {
		f.dropped = to
	}
	f.dmu.Unlock()
	if ok {
		f.h.Forget(from, to)
		if !f.direct { // a direct open leaves no pages in the kernel
			go f.n.NotifyContent(from, to-from)
		}
	}
}

// Write writes into the cache (close mode) or to the share (through mode).
func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	n, err := f.h.WriteAt(ctx, data, off)
	if err != nil {
		return uint32(n), f.m.fail("write", f.h.Path(), err)
	}
	return uint32(n), 0
}

// Flush runs on every close(2): unsent data goes to the share now, and a
// failure is close's error.
func (f *file) Flush(ctx context.Context) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	defer f.n.flushed(f)
	err := f.h.Flush(ctx)
	// The locks go even when the data could not: it stays in the cache,
	// marked dirty, and is sent again.
	if lerr := f.h.CloseLocks(ctx); err == nil {
		err = lerr
	}
	return f.m.fail("close", f.h.Path(), err)
}

// releaseHook, when set (by tests), runs first in every Release: a test
// holds releases back to play an agent that hears of a close late.
var releaseHook atomic.Pointer[func()]

// Release runs when the last descriptor is gone. The node counts the open
// gone only once the handle is released: counted before, an open that came
// while a writer's release was under way was refused by the kernel (EIO)
// now and then.
func (f *file) Release(ctx context.Context) syscall.Errno {
	if hook := releaseHook.Load(); hook != nil {
		(*hook)()
	}
	ctx, done := detach(ctx)
	defer done()
	err := f.h.Close(context.WithoutCancel(ctx))
	f.n.closed(f)
	f.m.untrack(f)
	return f.m.fail("release", f.h.Path(), err)
}

// openAttr is a, the attributes of p, or those of a file open here on p
// with data not yet sent (its local size): a lookup or a getattr by path
// must not tell the kernel the share's size of a file a program is
// writing (on a lent mount every access is a lookup).
func (m *Mount) openAttr(ctx context.Context, p string, a wire.Attr) wire.Attr {
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return a
	}
	var h *vfs.File
	m.mu.Lock()
	for f := range m.files {
		if f.h.Path() == p && f.h.Dirty() {
			h = f.h
			break
		}
	}
	m.mu.Unlock()
	if h == nil {
		return a
	}
	if ha, err := h.Getattr(ctx); err == nil && ha.Ino == a.Ino {
		return ha
	}
	return a
}

// Getattr returns the open file's attributes.
func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	a, err := f.h.Getattr(ctx)
	if err != nil {
		return f.m.fail("fstat", f.h.Path(), err)
	}
	f.m.fillAttr(&out.Attr, a, f.m.ino(ctx, f.h.Path(), a))
	// As long as the path's own attributes may be kept, where its mode
	// allows it: without a timeout the kernel asks again before every
	// read of a page-cached file (FUSE's auto_inval_data), and a warm
	// read goes at half speed.
	if d, ok := f.m.v.OpenStatTimeout(f.h.Path()); ok {
		out.SetTimeout(d)
	}
	return 0
}

// Fsync sends unsent data and makes it durable at the share.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	return f.m.fail("fsync", f.h.Path(), f.h.Fsync(ctx))
}

// Allocate supports only what changes nothing but the size: plain
// allocation that extends the file. Other modes are not supported.
func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	if mode == unix.FALLOC_FL_KEEP_SIZE {
		return 0 // reserving space changes nothing the share could see
	}
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	a, err := f.h.Getattr(ctx)
	if err != nil {
		return f.m.fail("fallocate", f.h.Path(), err)
	}
	if end := int64(off + size); end > a.Size {
		if _, err := f.h.Truncate(ctx, end); err != nil {
			return f.m.fail("fallocate", f.h.Path(), err)
		}
	}
	return 0
}
