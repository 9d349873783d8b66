package vfs

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Handle is an open file. Reads are served from the block cache (filled
// from the share on a miss, with read-ahead for sequential readers);
// writes go to the cache (close mode) or to the share (through mode).
type Handle struct {
	v     *FS
	path  string
	key   string
	flags uint32
	// KeepCache tells the edge that the kernel's page cache of this file
	// is still valid (the file did not change since it was last open).
	KeepCache bool

	openMu   sync.Mutex // held while a share handle is opened
	mu       sync.Mutex
	remote   remote.File // opened on first need
	reader   remote.File // a second, read-only handle when remote cannot read
	rflags   uint32
	dirty    bool
	lastEnd  int64               // end of the last read, to detect sequential access
	ahead    int64               // first block not yet asked for by read-ahead
	raBusy   int                 // read-ahead fetches under way
	est      remote.PathEstimate // the path to the share, from this handle's fetches
	ra       sync.WaitGroup      // read-ahead under way
	opening  chan struct{}       // closed when the share handle opened at Open is ready
	attr     wire.Attr           // the file's attributes when it was opened
	own      atomic.Uint64       // the newest version this handle's writes made
	closed   bool
	err      error  // a failed write-back, reported at flush
	writeErr error  // why the share refused to open the file for writing, for good
	backing  uint64 // the cache data file the kernel reads directly, if any
	// locks taken through the share handle (see Lock)
	posixLocks, flocks bool
	wrote              atomic.Int64 // when this handle last wrote (unix ns)
}

// Open flags, from open(2).
const (
	accMode = syscall.O_ACCMODE
)

func wantsWrite(flags uint32) bool { return flags&accMode != syscall.O_RDONLY }

// Open opens p: it revalidates the file's attributes as its consistency
// mode requires and drops cached data of an older version.
func (v *FS) Open(ctx context.Context, p string, flags uint32) (*Handle, error) {
	a, err := v.GetAttr(ctx, p)
	if err != nil {
		return nil, err
	}
	switch a.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if wantsWrite(flags) {
			return nil, syscall.EISDIR
		}
	case syscall.S_IFLNK:
		// The kernel follows links itself; a name that has become a link
		// since it looked is not opened through.
		return nil, syscall.ELOOP
	}
	if wantsWrite(flags) {
		// Read-only while the share cannot be reached, but for data
		// a write delegation keeps back.
		key, err := v.Key(ctx, p, a)
		if err != nil {
			return nil, err
		}
		if err := v.checkWritable(ctx, p, key); err != nil {
			return nil, err
		}
	}
	h, err := v.newHandle(ctx, p, a, flags)
	if err != nil {
		return nil, err
	}
	if flags&syscall.O_TRUNC != 0 && wantsWrite(flags) {
		if err := v.truncAtOpen(ctx, h); err != nil {
			h.Release(ctx)
			return nil, err
		}
		h.KeepCache = false
	}
	if wantsWrite(flags) || v.opts.rule(p).Revalidates() {
		h.openRemote()
	}
	return h, nil
}

// truncAtOpen empties the file of a handle opened with O_TRUNC: at the
// share at once when writes go through, otherwise in the cache only, the
// empty size travelling to the share with the data written after it (the
// share's file stays its old version until then, see writeBack).
func (v *FS) truncAtOpen(ctx context.Context, h *Handle) error {
	if v.opts.Write == WriteThrough {
		_, err := v.SetAttr(ctx, h.path, wire.SetAttrReq{Valid: wire.SetSize, Size: 0})
		return err
	}
	if err := v.cache.Truncate(h.key, 0); err != nil {
		return err
	}
	v.cache.Cut(h.key)
	if err := v.cache.Persist(h.key); err != nil {
		return err
	}
	h.wrote.Store(time.Now().UnixNano())
	h.mu.Lock()
	h.dirty = true
	h.mu.Unlock()
	v.mu.Lock()
	v.attrs.del(h.path)
	v.mu.Unlock()
	return nil
}

func (v *FS) newHandle(ctx context.Context, p string, a wire.Attr, flags uint32) (*Handle, error) {
	key, err := v.Key(ctx, p, a)
	if err != nil {
		return nil, err
	}
	v.reconcileAtOpen(ctx, key, p, a)
	kept := v.cache.Validate(key, a.Version, a.Size, p)
	v.mu.Lock()
	seen, ok := v.opened[key]
	v.opened[key] = a.Version
	v.mu.Unlock()
	v.cache.Pin(key)
	return &Handle{v: v, path: p, key: key, flags: flags, attr: a, KeepCache: kept && ok && seen == a.Version,
		// Data an earlier close could not send goes with this one.
		dirty: v.cache.Unsent(key)}, nil
}

// Create creates (or with O_EXCL exclusively creates) p and opens it.
func (v *FS) Create(ctx context.Context, p string, flags, mode uint32) (*Handle, wire.Attr, error) {
	if err := v.downErr(ctx, p); err != nil {
		return nil, wire.Attr{}, err
	}
	wf := wire.OpenWrite
	if flags&accMode == syscall.O_RDWR {
		wf |= wire.OpenRead
	}
	if flags&syscall.O_EXCL != 0 {
		wf |= wire.OpenExcl
	}
	if flags&syscall.O_TRUNC != 0 {
		wf |= wire.OpenTrunc
	}
	d := v.dropCount()
	of := v.openFlags(p, wf)
	done := v.askDeleg(ctx, p, of)
	defer done()
	f, err := v.data.Create(ctx, p, of, mode&0o7777)
	if err != nil {
		v.forget(p)
		return nil, wire.Attr{}, err
	}
	a := f.Attr()
	v.made(p, a, d)
	h, err := v.newHandle(ctx, p, a, flags)
	if err != nil {
		f.Close(ctx)
		return nil, a, err
	}
	if a.Size == 0 {
		_ = v.cache.Truncate(h.key, 0)
	}
	h.remote, h.rflags = f, wf
	v.noteDeleg(p, h.key, f)
	return h, a, nil
}

// Path is the global path the handle was opened with.
func (h *Handle) Path() string { return h.path }

// changedError says that the share's bytes belong to a newer version of
// the file than the one cached: they must not be mixed with it.
type changedError struct {
	a wire.Attr
	g uint64 // the generation before the read
}

func (e *changedError) Error() string { return "the file changed at its share while it was read" }

// fetch reads remote bytes for the blockcache.
func (h *Handle) fetch(ctx context.Context, p []byte, off int64) (int, error) {
	h.waitOpen(ctx)
	f, err := h.remoteFile(ctx, false)
	if err != nil {
		return 0, err
	}
	want, _, _ := h.v.cache.Version(h.key)
	g := h.v.generation()
	var n int
	if first, eof := f.First(); off == 0 && first != nil && (len(first) >= len(p) || eof) {
		// Read with the open; the version check below holds for them as
		// for any read (the open's attributes are the file's as read).
		n = copy(p, first)
		if n < len(p) {
			err = io.EOF
		}
	} else {
		t0, d0 := time.Now(), h.est.Delivered()
		var sum uint32
		var summed bool
		n, sum, summed, err = f.ReadAtSum(ctx, p, off)
		if err == nil {
			h.est.Sample(time.Since(t0), d0, int64(n))
		}
		if summed {
			blockcache.ReportSum(ctx, n, sum)
		}
	}
	if err == nil || errors.Is(err, io.EOF) {
		if name, staged := h.v.cache.StageOf(h.key); name != "" && len(clipAll(staged, blockcache.Range{Off: off, Len: int64(len(p))})) > 0 {
			// Sent ahead and evicted since: the stage holds it.
			wf, werr := h.remoteFile(ctx, true)
			if werr != nil {
				return 0, werr
			}
			if n, err = h.v.readStaged(ctx, h.key, wf, p, off, n); err == nil && n < len(p) {
				err = io.EOF
			}
		}
	}
	// Newer than what is cached, and not by this handle's own writes.
	if a := f.Attr(); want != 0 && a.Version > want && a.Version > h.own.Load() && a.Ino == h.attr.Ino && !h.v.cache.Unsent(h.key) {
		return 0, &changedError{a, g}
	}
	return n, err
}

// fetchAny reads remote bytes for the cache whatever version they are of.
func (h *Handle) fetchAny(ctx context.Context, p []byte, off int64) (int, error) {
	h.waitOpen(ctx)
	f, err := h.remoteFile(ctx, false)
	if err != nil {
		return 0, err
	}
	return f.ReadAt(ctx, p, off)
}

// changed reports whether err says the file changed under a read; if so,
// the cache now follows the new version, and the read can be retried.
func (h *Handle) changed(err error) bool {
	var ce *changedError
	if !errors.As(err, &ce) {
		return false
	}
	h.v.follow(h.key, h.path, ce.a, ce.g)
	return true
}

// ReadSlice returns up to n bytes at off without copying when it can (the
// bytes lie in one cached block), else reads into p. The result must not
// be changed, nor read after done is called (once, whatever the error).
func (h *Handle) ReadSlice(ctx context.Context, p []byte, off int64) (b []byte, done func(), err error) {
	h.readAhead(off, int64(len(p)))
	b, release, ok, err := h.v.cache.Slice(ctx, h.key, off, len(p), h.fetch)
	if err != nil && !h.changed(err) {
		return nil, func() {}, err
	}
	if ok && err == nil {
		return b, release, nil
	}
	n, err := h.read(ctx, p, off)
	return p[:n], func() {}, err
}

// Read reads at off.
func (h *Handle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	h.readAhead(off, int64(len(p)))
	return h.read(ctx, p, off)
}

func (h *Handle) read(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := h.v.cache.ReadAt(ctx, h.key, p, off, h.fetch)
	if h.changed(err) {
		// Once more with the new version; a file that keeps changing
		// (written meanwhile) is read as it is, not failed.
		n, err = h.v.cache.ReadAt(ctx, h.key, p, off, h.fetchAny)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// readAhead keeps blocks in flight beyond a sequential reader about to
// read n bytes at off: ReadAhead of them, or on a long fat path as many as
// its measured bandwidth-delay product asks for, up to ReadAheadMax. It
// runs before the read itself, so that a cold read and the blocks after it
// are fetched at the same time.
func (h *Handle) readAhead(off, n int64) {
	bs := h.v.cache.BlockSize()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	// The kernel has several reads of a sequential reader under way at
	// once, and they finish in any order: a read that starts within two
	// blocks of the furthest end so far is still sequential (resetting
	// here would start read-ahead over behind blocks already in flight).
	near := off >= h.lastEnd-2*bs && off <= h.lastEnd+2*bs
	seq := off == 0 || near
	if !near || off+n > h.lastEnd {
		h.lastEnd = off + n
	}
	if !seq || n == 0 {
		h.ahead = 0
		h.mu.Unlock()
		return
	}
	depth := h.est.Depth(bs, h.v.opts.ReadAhead, h.v.opts.ReadAheadMax)
	next := max(h.ahead, (off+n)/bs+1)
	limit := (off+n)/bs + int64(depth)
	var todo []int64
	for idx := next; idx <= limit && h.raBusy < depth; idx++ {
		todo = append(todo, idx)
		h.ahead = idx + 1
		h.raBusy++
	}
	h.ra.Add(len(todo))
	h.mu.Unlock()
	for _, idx := range todo {
		go func() {
			defer h.ra.Done()
			defer func() {
				h.mu.Lock()
				h.raBusy--
				h.mu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_ = h.v.cache.Prefetch(ctx, h.key, idx, h.fetch)
		}()
	}
}

// Write writes p at off.
func (h *Handle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	if h.v.opts.Write == WriteThrough {
		h.waitOpen(ctx)
		f, err := h.remoteFile(ctx, true)
		if err != nil {
			return 0, err
		}
		d := h.v.dropCount()
		n, err := f.WriteAt(ctx, p, off)
		if err != nil {
			return n, err
		}
		a := f.Attr()
		for v := h.own.Load(); a.Version > v && !h.own.CompareAndSwap(v, a.Version); v = h.own.Load() {
		}
		err = h.v.cache.WriteAt(ctx, h.key, p, off, h.fetch)
		if h.changed(err) {
			err = h.v.cache.WriteAt(ctx, h.key, p, off, h.fetchAny)
		}
		if err != nil {
			return n, err
		}
		h.v.cache.MarkClean(h.key, []blockcache.Range{{Off: off, Len: int64(len(p))}}, blockcache.AllWrites, a.Version, a.Size)
		h.v.setOwn(h.path, a, d)
		return n, nil
	}
	if err := h.writable(ctx); err != nil {
		return 0, err
	}
	if err := h.v.boundUnsent(ctx, h, off, int64(len(p))); err != nil {
		return 0, err
	}
	if err := h.writeCache(ctx, p, off); err != nil {
		return 0, err
	}
	h.wrote.Store(time.Now().UnixNano())
	h.mu.Lock()
	h.dirty = true
	h.mu.Unlock()
	h.v.mu.Lock()
	h.v.attrs.del(h.path)
	h.v.mu.Unlock()
	return len(p), nil
}

// Flush sends dirty data to the share (close mode); it is called on every
// close of a descriptor, and its error is close's.
func (h *Handle) Flush(ctx context.Context) error { return h.flush(ctx, false) }

// flush is Flush; with sync (fsync), the share makes the data durable as
// it commits it.
func (h *Handle) flush(ctx context.Context, sync bool) error {
	h.mu.Lock()
	dirty := h.dirty
	h.mu.Unlock()
	if !dirty {
		return nil
	}
	h.waitOpen(ctx)
	if h.v.keepBack(h) {
		// Kept back under a write delegation, durable in the cache: from
		// here the delegation sends it (recall, timer, unmount).
		h.mu.Lock()
		h.dirty = false
		h.mu.Unlock()
		return nil
	}
	if err := h.v.writeBack(ctx, h.key, h.path, h, sync); err != nil {
		h.v.noteSendFailure(h.key, h.path, err)
		if dropped(err) {
			h.v.noteSent(h.key)
			// Refused for good: the data is gone from the cache (see
			// refuse), and so is anything for a later close to send.
			h.mu.Lock()
			h.dirty = false
			h.mu.Unlock()
			if !wantsWrite(h.flags) {
				// Not this reader's data (an earlier close left it):
				// the agent logged the refusal; the reader's close
				// has nothing to fail for.
				return nil
			}
		}
		return err
	}
	h.v.noteSent(h.key)
	h.mu.Lock()
	h.dirty = false
	h.mu.Unlock()
	return nil
}

// Getattr returns the open file's attributes: local size while it holds
// unsent data, otherwise the share's (also after the file was unlinked).
func (h *Handle) Getattr(ctx context.Context) (wire.Attr, error) {
	h.mu.Lock()
	dirty := h.dirty
	h.mu.Unlock()
	var a wire.Attr
	var err error
	g := h.v.generation()
	// The path's attributes, as its mode allows them cached, while the
	// path still names this file; the share handle's otherwise (strict,
	// or the file was unlinked or renamed over).
	cached := false
	if h.v.opts.rule(h.path).Caches() {
		if ca, cerr := h.v.GetAttr(ctx, h.path); cerr == nil && ca.Ino == h.attr.Ino {
			a, cached = ca, true
		}
	}
	if cached && !h.KeepCache && h.opening != nil {
		// The kernel holds no pages of this file and will read it
		// through us, from the version the share handle opened: give it
		// that version's size, which may be newer than the path's cached
		// attributes. With an older, larger size, the kernel's read-ahead
		// would ask past the new end and zero-fill what the shorter file
		// does not have. The read would wait for the share handle anyway.
		if rf := h.openedRemote(ctx); rf != nil {
			if ra := rf.Attr(); ra.Ino == a.Ino && ra.Version > a.Version {
				a = ra
			}
		}
	}
	if !cached {
		if rf := h.openedRemote(ctx); rf != nil {
			a, err = rf.Stat(ctx)
		} else {
			a = h.attr // no share handle (it could not be opened), and the path names another file
		}
	}
	if err != nil {
		return a, err
	}
	if dirty && h.v.cache.Unsent(h.key) {
		// Unsent data: the size this agent's copy has, and the time it
		// was last written here (kept back under a delegation, or by this
		// handle); what the share says once it has the data.
		return h.v.unsentAttr(h.key, h.v.localAttr(h.path, a), h.wrote.Load()), nil
	}
	if a.Ino == h.attr.Ino {
		h.v.follow(h.key, h.path, a, g)
	}
	return a, nil
}

// Dirty reports whether the handle has written data its share has not
// been sent yet.
func (h *Handle) Dirty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dirty
}

// Truncate changes the open file's size.
func (h *Handle) Truncate(ctx context.Context, size int64) (wire.Attr, error) {
	a, err := h.v.SetAttr(ctx, h.path, wire.SetAttrReq{Valid: wire.SetSize, Size: size})
	if err != nil {
		// The path may be gone (unlinked while open): truncate by handle.
		f, ferr := h.remoteFile(ctx, true)
		if ferr != nil {
			return a, err
		}
		if err := f.Truncate(ctx, size); err != nil {
			return a, err
		}
		if err := h.v.cache.Truncate(h.key, size); err != nil {
			return a, err
		}
		return f.Stat(ctx)
	}
	return a, nil
}

// Fsync sends dirty data and asks the share to make it durable.
func (h *Handle) Fsync(ctx context.Context) error {
	if err := h.flush(ctx, true); err != nil {
		return err
	}
	h.mu.Lock()
	rf := h.remote
	h.mu.Unlock()
	if rf != nil && rf.Attr().Ino != 0 {
		return rf.Sync(ctx)
	}
	return nil
}

// Release closes the handle: unsent data is sent first.
func (h *Handle) Release(ctx context.Context) error {
	h.waitOpen(ctx)
	err := h.Flush(ctx)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return err
	}
	h.closed = true
	h.mu.Unlock()
	h.ra.Wait()     // read-ahead uses the share handles closed below
	h.openMu.Lock() // and no open is under way
	h.mu.Lock()
	rf, reader := h.remote, h.reader
	h.remote, h.reader = nil, nil
	h.mu.Unlock()
	h.openMu.Unlock()
	for _, f := range []remote.File{rf, reader} {
		if f != nil {
			f.Close(ctx)
		}
	}
	h.Unback()
	h.v.cache.Unpin(h.key)
	return err
}

// FS is the vfs the handle was opened on.
func (h *Handle) FS() *FS { return h.v }
