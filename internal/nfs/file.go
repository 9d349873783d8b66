package nfs

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// NFS has no open or close: each READ and WRITE names a file by its
// handle. Opening a vfs handle per request would fetch attributes and,
// for a write, send the file to its share after every WRITE (the vfs's
// close-to-open). So the gateway keeps the vfs handles of an export open
// between requests, as a mount's kernel keeps a file open between reads:
// a handle that was written is flushed (its data sent to the share, as
// at a close) once no WRITE came for flushIdle, and any handle is
// released after readIdle unused. A WRITE is answered once its data is in
// the gateway's cache, which keeps it on disk until the share has it (and
// replays it after a restart), as the mount's write-back does.
const (
	flushIdle = time.Second
	readIdle  = 10 * time.Second
	maxOpen   = 4096 // handles kept open per export; the idle longest goes first
)

type openFiles struct {
	e  *exportFS
	mu sync.Mutex
	m  map[string]*openFile // by global path
}

// openFile is a vfs file kept open between requests. Read-only ones are
// read straight from the cache's data file when the cache holds them
// whole, or once a READ reached the end (see vfs.File).
type openFile struct {
	h     *vfs.File
	write bool
	refs  int
	used  time.Time
	gone  bool // out of the table: released when refs reach 0
}

func newOpenFiles(e *exportFS) *openFiles {
	return &openFiles{e: e, m: make(map[string]*openFile)}
}

// get returns g's open handle, opening it (or, with O_CREATE, creating
// it) if the table has none that allows the access flag asks for.
//
// A handle only read is used again while the file's attributes, as its
// consistency mode gives them, name the version it opened: a file changed
// elsewhere is opened again, as a mount's reader opens it again.
func (t *openFiles) get(ctx context.Context, v *vfs.FS, g string, flag int, perm uint32) (*openFile, error) {
	write := flag&(os.O_WRONLY|os.O_RDWR) != 0
	t.mu.Lock()
	if of := t.m[g]; of != nil && (of.write || !write) {
		of.refs++
		of.used = time.Now()
		t.mu.Unlock()
		if of.write {
			return of, nil
		}
		_, oa := of.h.Opened()
		if a, err := v.GetAttr(ctx, g); err == nil && a.Ino == oa.Ino && a.Version == oa.Version {
			of.h.Reused()
			return of, nil
		}
		t.put(of)
	} else {
		t.mu.Unlock()
	}
	if _, err := t.e.srv.users.Acquire(ctx, t.e.user); err != nil {
		return nil, err
	}
	var h *vfs.File
	var err error
	if flag&os.O_CREATE != 0 {
		h, err = v.OpenFile(ctx, g, syscall.O_RDWR|syscall.O_CREAT, perm)
	} else {
		fl := uint32(syscall.O_RDONLY)
		if write {
			fl = syscall.O_RDWR
		}
		h, err = v.OpenFile(ctx, g, fl, 0)
		if err == nil && write {
			// The share's refusal, if any, is the WRITE's answer (ACCES);
			// a WRITE answered first could not take it back.
			if err = h.Writable(ctx); err != nil {
				h.Close(ctx)
			}
		}
	}
	if err != nil {
		t.e.srv.users.Release(t.e.user)
		return nil, err
	}
	of := &openFile{h: h, write: write || flag&os.O_CREATE != 0, refs: 1, used: time.Now()}
	if !of.write {
		h.ReadDirect()
	}
	t.mu.Lock()
	if old := t.m[g]; old != nil {
		old.gone = true
		if old.refs == 0 {
			defer t.close(old)
		}
	}
	t.m[g] = of
	n := len(t.m)
	t.mu.Unlock()
	if n > maxOpen {
		t.reap(time.Now().Add(time.Hour))
	}
	return of, nil
}

// put ends one request's use of of.
func (t *openFiles) put(of *openFile) {
	t.mu.Lock()
	of.refs--
	of.used = time.Now()
	closeNow := of.gone && of.refs == 0
	t.mu.Unlock()
	if closeNow {
		t.close(of)
	}
}

// close flushes and releases a handle out of the table.
func (t *openFiles) close(of *openFile) error {
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	err := of.h.Close(ctx)
	t.e.srv.users.Release(t.e.user)
	if err != nil {
		t.e.srv.log.Warn("nfs: data written could not be sent to its share", "export", t.e.name, "path", of.h.Path(), "err", err)
	}
	return err
}

// reap flushes the handles written and idle for flushIdle, and releases
// those idle for readIdle (as if now were now; or all but the busy when
// the table is past its bound).
func (t *openFiles) reap(now time.Time) {
	t.mu.Lock()
	var out []*openFile
	for g, of := range t.m {
		if of.refs > 0 {
			continue
		}
		idle := now.Sub(of.used)
		if (of.write && idle >= flushIdle) || idle >= readIdle || len(t.m) > maxOpen {
			of.gone = true
			delete(t.m, g)
			out = append(out, of)
		}
	}
	t.mu.Unlock()
	for _, of := range out {
		t.close(of)
	}
}

// closeAll sends and releases every handle (the gateway is stopping).
func (t *openFiles) closeAll() {
	t.reap(time.Now().Add(24 * time.Hour))
}

// closeTree sends and releases the handles of g and below it (before a
// rename moves them); its error is the first send's.
func (t *openFiles) closeTree(ctx context.Context, g string) error {
	t.mu.Lock()
	var out []*openFile
	for p, of := range t.m {
		if p == g || strings.HasPrefix(p, g+"/") {
			delete(t.m, p)
			of.gone = true
			if of.refs == 0 {
				out = append(out, of)
			}
		}
	}
	t.mu.Unlock()
	var first error
	for _, of := range out {
		if err := t.close(of); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// drop releases g's handle before it is unlinked.
func (t *openFiles) drop(ctx context.Context, g string) { t.closeTree(ctx, g) }

// attr returns the attributes of g's open handle, if the table has one
// written since it was last flushed.
func (t *openFiles) attr(ctx context.Context, g string) (wire.Attr, bool, error) {
	t.mu.Lock()
	of := t.m[g]
	ok := of != nil && of.write
	if ok {
		of.refs++
	}
	t.mu.Unlock()
	if !ok {
		return wire.Attr{}, false, nil
	}
	defer t.put(of)
	a, err := of.h.Getattr(ctx)
	return a, true, err
}

// file is one request's use of an open handle, as go-nfs's billy.File.
type file struct {
	e    *exportFS
	of   *openFile
	name string
	off  int64
	once sync.Once
}

func (f *file) Name() string { return f.name }

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	ctx, cancel := f.e.ctx()
	defer cancel()
	n, err := f.of.h.ReadAt(ctx, p, off)
	f.e.srv.c.BytesRead.Add(int64(n))
	if err != nil && err != io.EOF {
		err = f.e.srv.pathErr("read", f.of.h.Path(), err)
	}
	return n, err
}

func (f *file) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	ctx, cancel := f.e.ctx()
	defer cancel()
	n, err := f.of.h.WriteAt(ctx, p, f.off)
	f.off += int64(n)
	f.e.srv.c.BytesWritten.Add(int64(n))
	if err != nil {
		return n, f.e.srv.pathErr("write", f.of.h.Path(), err)
	}
	return n, nil
}

func (f *file) Seek(off int64, whence int) (int64, error) {
	to, err := vfs.Offset(f.off, f.of.h.Attr().Size, off, whence)
	f.off = to
	return to, err
}

// Close ends the request's use; the handle stays open (see openFiles).
func (f *file) Close() error {
	f.once.Do(func() { f.e.files.put(f.of) })
	return nil
}

func (f *file) Lock() error   { return nil }
func (f *file) Unlock() error { return nil }

func (f *file) Truncate(size int64) error {
	ctx, cancel := f.e.ctx()
	defer cancel()
	if _, err := f.of.h.Truncate(ctx, size); err != nil {
		return f.e.srv.pathErr("truncate", f.of.h.Path(), err)
	}
	return nil
}
