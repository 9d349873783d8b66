package vfs

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// File is an open file as every edge uses it: the mount, HTTP, WebDAV,
// S3 and NFS. It reads and writes at an offset (ReadAt, WriteAt) or at a
// cursor of its own (Read, Write, Seek), and knows the file's attributes
// as last seen (Attr, Stat). Each edge keeps only its protocol's part as
// a thin adapter over it: the mount registers the cache's data file with
// the kernel (Handle.Backing), net/http sends DataFile with sendfile,
// go-nfs wants a billy.File.
//
// The direct-read rule lives here, and only here: an edge that reads a
// file itself (not the kernel) asks ReadDirect after opening it; while
// the cache holds the whole of the version opened, reads go straight to
// the cache's data file. A file read through the vfs up to its end is
// made whole once it is done with (at Close, or at Reused for an edge
// that keeps files open between requests), so that the next open reads
// it directly.
//
// A File's methods may be called from several goroutines at once, but
// the cursor (Read, Write, Seek) is one: concurrent users that each want
// their own offset use ReadAt and WriteAt.
type File struct {
	*Handle

	mu   sync.Mutex
	seen wire.Attr // the attributes as last seen: at open, grown by writes, refreshed by Stat
	off  int64     // the cursor of Read, Write and Seek

	back          atomic.Pointer[os.File] // the cache's data file reads go to, if any
	toEnd, backed atomic.Bool             // a read through the vfs reached the end; Reused made it whole

	// win holds wlen bytes of the file from woff: Read of a read-only
	// file not read directly goes through it (see readWindow).
	wmu  sync.Mutex
	win  []byte
	woff int64
	wlen int
}

// readWindow is how much Read of a file opened only to read, and not
// read directly, asks the cache for at once: a caller that reads 32 KiB
// at a time (net/http's copy) asks once per MiB.
const readWindow = 1 << 20

// OpenFile opens (with O_CREAT, creates) the global path p with the
// open(2) flags and, for a new file, the permission bits perm.
func (v *FS) OpenFile(ctx context.Context, p string, flags, perm uint32) (*File, error) {
	if flags&syscall.O_CREAT != 0 {
		h, a, err := v.Create(ctx, p, flags, perm)
		if err != nil {
			return nil, err
		}
		return &File{Handle: h, seen: a}, nil
	}
	h, err := v.Open(ctx, p, flags)
	if err != nil {
		return nil, err
	}
	return &File{Handle: h, seen: h.attr}, nil
}

// ReadDirect makes reads go straight to the cache's data file if the
// file was opened only to read and the cache holds the whole of the
// version opened (blocks held only in memory are written to it first);
// it reports whether they do.
func (f *File) ReadDirect() bool {
	if f.back.Load() != nil {
		return true
	}
	b, _, ok := f.Backing(-1)
	if ok {
		f.back.Store(b)
	}
	return ok
}

// DataFile is the cache's data file reads go straight to (see
// ReadDirect), or nil. It is the caller's to read, not to close.
func (f *File) DataFile() *os.File { return f.back.Load() }

// Reused tells a file kept open between requests that it is used again:
// read to its end through the vfs before, and held whole by the cache
// now, it is read directly from here on (its blocks are written to the
// data file first, once).
func (f *File) Reused() {
	if f.back.Load() == nil && f.toEnd.Load() && f.backed.CompareAndSwap(false, true) && f.Whole(true) {
		f.ReadDirect()
	}
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt does: fewer only at
// the end of the file (io.EOF) or on an error.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if b := f.back.Load(); b != nil {
		return b.ReadAt(p, off)
	}
	n := 0
	for n < len(p) {
		m, err := f.Handle.Read(ctx, p[n:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
	}
	if f.attr.Size > 0 && off+int64(n) >= f.attr.Size {
		f.toEnd.Store(true)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes p at off.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := f.Handle.Write(ctx, p, off)
	f.mu.Lock()
	f.seen.Size = max(f.seen.Size, off+int64(n))
	f.mu.Unlock()
	return n, err
}

// Read reads at the cursor, up to the file's size as last seen.
func (f *File) Read(ctx context.Context, p []byte) (int, error) {
	f.mu.Lock()
	off, size := f.off, f.seen.Size
	f.mu.Unlock()
	if off >= size {
		return 0, io.EOF
	}
	if rem := size - off; int64(len(p)) > rem {
		p = p[:rem]
	}
	var n int
	var err error
	if f.back.Load() == nil && !wantsWrite(f.flags) {
		n, err = f.windowed(ctx, p, off)
	} else {
		n, err = f.ReadAt(ctx, p, off)
	}
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	f.mu.Lock()
	f.off = off + int64(n)
	f.mu.Unlock()
	return n, err
}

// windowed reads at off through the read window.
func (f *File) windowed(ctx context.Context, p []byte, off int64) (int, error) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if off < f.woff || off >= f.woff+int64(f.wlen) {
		if f.win == nil {
			f.win = make([]byte, readWindow)
		}
		n, err := f.ReadAt(ctx, f.win, off)
		if n == 0 {
			return 0, err
		}
		f.woff, f.wlen = off, n
	}
	return copy(p, f.win[off-f.woff:f.wlen]), nil
}

// Write writes at the cursor.
func (f *File) Write(ctx context.Context, p []byte) (int, error) {
	f.mu.Lock()
	off := f.off
	f.mu.Unlock()
	n, err := f.WriteAt(ctx, p, off)
	f.mu.Lock()
	f.off = off + int64(n)
	f.mu.Unlock()
	return n, err
}

// Seek moves the cursor, as io.Seeker does (io.SeekEnd from the size as
// last seen).
func (f *File) Seek(off int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	to, err := Offset(f.off, f.seen.Size, off, whence)
	if err == nil {
		f.off = to
	}
	return to, err
}

// Offset is where io.Seeker's Seek(off, whence) goes from cur in a file of
// size bytes; a place before the start is refused (EINVAL), and then
// Offset is cur.
func Offset(cur, size, off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += cur
	case io.SeekEnd:
		off += size
	default:
		return cur, syscall.EINVAL
	}
	if off < 0 {
		return cur, syscall.EINVAL
	}
	return off, nil
}

// Attr is the file's attributes as last seen (see Stat).
func (f *File) Attr() wire.Attr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// Stat returns the open file's attributes (see Handle.Getattr) and keeps
// them as the ones last seen.
func (f *File) Stat(ctx context.Context) (wire.Attr, error) {
	a, err := f.Getattr(ctx)
	if err != nil {
		return f.Attr(), err
	}
	f.mu.Lock()
	f.seen = a
	f.mu.Unlock()
	return a, nil
}

// Truncate changes the open file's size.
func (f *File) Truncate(ctx context.Context, size int64) (wire.Attr, error) {
	a, err := f.Handle.Truncate(ctx, size)
	if err == nil {
		f.mu.Lock()
		f.seen = a
		f.mu.Unlock()
	}
	return a, err
}

// Close sends what was written (its error says whether the share took
// it) and closes the file; a file read to its end through the vfs is
// first made whole in the cache's data file, for the next open to read
// directly.
func (f *File) Close(ctx context.Context) error {
	if b := f.back.Swap(nil); b != nil {
		b.Close() // the handle gives up the backing at Release
	} else if f.toEnd.Load() && !f.backed.Load() {
		f.Whole(true)
	}
	return f.Release(ctx)
}
