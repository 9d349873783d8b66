package memory

import (
	"context"
	"io"
	"slices"
	"sync"
	"syscall"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

var (
	_ remote.File  = (*file)(nil)
	_ remote.Stage = (*stage)(nil)
)

// Open opens an existing file.
func (t *Tree) Open(ctx context.Context, gpath string, flags uint32) (remote.File, error) {
	return t.open(gpath, flags, 0)
}

// OpenFirst opens an existing file with its first n bytes.
func (t *Tree) OpenFirst(ctx context.Context, gpath string, flags uint32, n int) (remote.File, error) {
	return t.open(gpath, flags, n)
}

// Create makes a regular file (or, without wire.OpenExcl, opens the one
// there).
func (t *Tree) Create(ctx context.Context, gpath string, flags, mode uint32) (remote.File, error) {
	_, err := t.make(ctx, gpath, syscall.S_IFREG|mode&0o7777, nil)
	if err != nil && (flags&wire.OpenExcl != 0 || wire.CodeOf(err) != wire.CodeExist) {
		return nil, err
	}
	return t.open(gpath, flags&^wire.OpenExcl, 0)
}

func (t *Tree) open(gpath string, flags uint32, first int) (remote.File, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if sh == nil {
		return nil, wire.Errorf(wire.CodeIsDir, "%s: is a directory", loc.Global)
	}
	n, err := sh.lookup(loc)
	if err != nil {
		return nil, err
	}
	switch n.attr.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
	case syscall.S_IFDIR:
		return nil, wire.Errorf(wire.CodeIsDir, "%s: is a directory", loc.Global)
	default:
		return nil, wire.Errorf(wire.CodeInvalid, "%s: not a regular file", loc.Global)
	}
	if flags&wire.OpenTrunc != 0 && flags&wire.OpenWrite != 0 && len(n.data) > 0 {
		n.data = nil
		t.touch(sh, n, loc.Rel, true)
	}
	t.handles++
	f := &file{t: t, sh: sh, n: n, loc: loc, flags: flags, id: t.handles, attr: n.attr}
	if first > 0 {
		f.first = slices.Clone(n.data[:min(first, len(n.data))])
		f.eof = first >= len(n.data)
	}
	return f, nil
}

// file is one open file of a Tree.
type file struct {
	t     *Tree
	sh    *share
	n     *node
	loc   remote.Loc
	flags uint32
	id    uint64 // the handle's, for locks

	mu    sync.Mutex
	attr  wire.Attr
	first []byte
	eof   bool
}

// hold takes t.mu for a request on f, unless f's share is down.
func (f *file) hold() error {
	f.t.mu.Lock()
	if err := f.t.down[f.loc.Share]; err != nil {
		f.t.mu.Unlock()
		return err
	}
	return nil
}

// seen records the attributes a request saw, t.mu held.
func (f *file) seen() wire.Attr {
	a := f.n.attr
	f.mu.Lock()
	f.attr = a
	f.mu.Unlock()
	return a
}

func (f *file) Attr() wire.Attr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attr
}

func (f *file) Loc() remote.Loc                { return f.loc }
func (f *file) First() (data []byte, eof bool) { return f.first, f.eof }
func (f *file) Deleg() bool                    { return false }
func (f *file) DelegID() uint64                { return 0 }

func (f *file) badHandle(what string) error {
	return wire.Errorf(wire.CodeBadHandle, "%s: not open for %s", f.loc.Global, what)
}

func (f *file) ReadAt(_ context.Context, p []byte, off int64) (int, error) {
	if f.flags&wire.OpenRead == 0 {
		return 0, f.badHandle("reading")
	}
	if err := f.hold(); err != nil {
		return 0, err
	}
	defer f.t.mu.Unlock()
	f.seen()
	return readAt(f.n.data, p, off)
}

func readAt(data, p []byte, off int64) (int, error) {
	if off >= int64(len(data)) {
		return 0, io.EOF
	}
	n := copy(p, data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ReadAtSum is ReadAt: the bytes never left memory, so they carry no sum.
func (f *file) ReadAtSum(ctx context.Context, p []byte, off int64) (int, uint32, bool, error) {
	n, err := f.ReadAt(ctx, p, off)
	return n, 0, false, err
}

func (f *file) WriteAt(_ context.Context, p []byte, off int64) (int, error) {
	if f.flags&wire.OpenWrite == 0 {
		return 0, f.badHandle("writing")
	}
	if err := f.hold(); err != nil {
		return 0, err
	}
	defer f.t.mu.Unlock()
	if f.flags&wire.OpenAppend != 0 {
		off = int64(len(f.n.data))
	}
	f.n.data = writeAt(f.n.data, p, off)
	f.t.touch(f.sh, f.n, f.loc.Rel, true)
	f.seen()
	return len(p), nil
}

func writeAt(data, p []byte, off int64) []byte {
	if end := off + int64(len(p)); end > int64(len(data)) {
		data = resize(data, end)
	}
	copy(data[off:], p)
	return data
}

func (f *file) Truncate(_ context.Context, size int64) error {
	if f.flags&wire.OpenWrite == 0 {
		return f.badHandle("writing")
	}
	if err := f.hold(); err != nil {
		return err
	}
	defer f.t.mu.Unlock()
	f.n.data = resize(f.n.data, size)
	f.t.touch(f.sh, f.n, f.loc.Rel, true)
	f.seen()
	return nil
}

func (f *file) Stat(context.Context) (wire.Attr, error) {
	if err := f.hold(); err != nil {
		return wire.Attr{}, err
	}
	defer f.t.mu.Unlock()
	return f.seen(), nil
}

func (f *file) Sync(context.Context) error {
	if err := f.hold(); err != nil {
		return err
	}
	f.t.mu.Unlock()
	return nil
}

// Close drops the handle's locks.
func (f *file) Close(context.Context) error {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	f.n.locks = slices.DeleteFunc(f.n.locks, func(l lock) bool { return l.handle == f.id })
	return nil
}

func overlap(l lock, start, size int64) bool {
	endA, endB := l.start+l.size, start+size
	return (l.size == 0 || start < endA) && (size == 0 || l.start < endB)
}

// conflict returns another handle's lock that one of typ over the range
// would conflict with, t.mu held.
func (f *file) conflict(typ uint8, start, size int64) (lock, bool) {
	for _, l := range f.n.locks {
		if l.handle != f.id && overlap(l, start, size) && (typ == wire.LockWrite || l.typ == wire.LockWrite) {
			return l, true
		}
	}
	return lock{}, false
}

// Lock takes or drops a lock; a handle's own locks in the range are
// replaced (not split: a test's locks need no more).
func (f *file) Lock(_ context.Context, typ uint8, start, size int64) error {
	if err := f.hold(); err != nil {
		return err
	}
	defer f.t.mu.Unlock()
	if typ != wire.LockUnlock {
		if _, ok := f.conflict(typ, start, size); ok {
			return wire.Errorf(wire.CodeLocked, "%s: locked by another holder", f.loc.Global)
		}
	}
	f.n.locks = slices.DeleteFunc(f.n.locks, func(l lock) bool { return l.handle == f.id && overlap(l, start, size) })
	if typ != wire.LockUnlock {
		f.n.locks = append(f.n.locks, lock{handle: f.id, typ: typ, start: start, size: size})
	}
	return nil
}

func (f *file) TestLock(_ context.Context, typ uint8, start, size int64) (wire.LockResp, error) {
	if err := f.hold(); err != nil {
		return wire.LockResp{}, err
	}
	defer f.t.mu.Unlock()
	if l, ok := f.conflict(typ, start, size); ok {
		return wire.LockResp{Type: l.typ, Start: l.start, Len: l.size}, nil
	}
	return wire.LockResp{Type: wire.LockUnlock}, nil
}

type stageKey struct {
	ino  uint64
	name string
}

// stageData is a stage's copy of its file.
type stageData struct {
	data []byte
	held []wire.ByteRange // written so far: sorted, disjoint
}

// stage is a Stage of a file of a Tree.
type stage struct {
	f    *file
	key  stageKey
	d    *stageData
	held []wire.ByteRange
}

func (f *file) Stage(ctx context.Context) (remote.Stage, error) { return f.StageNamed(ctx, "") }

// StageNamed starts from a copy of the file, or finds the named stage
// again.
func (f *file) StageNamed(_ context.Context, name string) (remote.Stage, error) {
	if f.flags&wire.OpenWrite == 0 {
		return nil, f.badHandle("writing")
	}
	if err := f.hold(); err != nil {
		return nil, err
	}
	defer f.t.mu.Unlock()
	key := stageKey{ino: f.n.attr.Ino, name: name}
	if d := f.sh.stages[key]; d != nil && name != "" {
		return &stage{f: f, key: key, d: d, held: slices.Clone(d.held)}, nil
	}
	d := &stageData{data: slices.Clone(f.n.data)}
	if name != "" {
		f.sh.stages[key] = d
	}
	return &stage{f: f, key: key, d: d}, nil
}

func (s *stage) Held() []wire.ByteRange { return s.held }

func (s *stage) ReadAt(_ context.Context, p []byte, off int64) (int, error) {
	if err := s.f.hold(); err != nil {
		return 0, err
	}
	defer s.f.t.mu.Unlock()
	return readAt(s.d.data, p, off)
}

func (s *stage) WriteExtents(_ context.Context, exts []remote.Extent, read func(p []byte, off int64) (int, error), written func()) (wire.Attr, error) {
	for _, e := range exts {
		buf := make([]byte, e.Len)
		n, err := read(buf, e.Off)
		if err != nil && err != io.EOF {
			return wire.Attr{}, err
		}
		if err := s.f.hold(); err != nil {
			return wire.Attr{}, err
		}
		s.d.data = writeAt(s.d.data, buf[:n], e.Off)
		s.d.held = remote.AddRange(s.d.held, wire.ByteRange{Off: e.Off, Len: int64(n)})
		s.f.t.mu.Unlock()
		if written != nil {
			written()
		}
	}
	return s.f.Attr(), nil
}

// Commit makes the stage the file's data, all at once.
func (s *stage) Commit(_ context.Context, c remote.Commit) (wire.Attr, error) {
	if err := s.f.hold(); err != nil {
		return wire.Attr{}, err
	}
	defer s.f.t.mu.Unlock()
	s.f.n.data = commit(s.d.data, c)
	delete(s.f.sh.stages, s.key)
	return s.f.committed(c), nil
}

// commit returns data sized as c says.
func commit(data []byte, c remote.Commit) []byte {
	if c.KeepLonger && int64(len(data)) > c.Size {
		return data
	}
	return resize(data, c.Size)
}

// committed gives the file its new version after a commit, t.mu held.
func (f *file) committed(c remote.Commit) wire.Attr {
	f.t.touch(f.sh, f.n, f.loc.Rel, true)
	if c.Mtime != 0 {
		f.n.attr.Mtime = c.Mtime
	}
	return f.seen()
}

// Detach leaves a named stage for StageNamed to find again.
func (s *stage) Detach(context.Context) error { return nil }

// Close throws the stage away.
func (s *stage) Close(context.Context) error {
	s.f.t.mu.Lock()
	defer s.f.t.mu.Unlock()
	if s.f.sh.stages[s.key] == s.d {
		delete(s.f.sh.stages, s.key)
	}
	return nil
}

// CommitInline writes the ranges' bytes and commits, all at once.
func (f *file) CommitInline(_ context.Context, ranges []wire.ByteRange, data []byte, c remote.Commit) (wire.Attr, error) {
	if f.flags&wire.OpenWrite == 0 {
		return wire.Attr{}, f.badHandle("writing")
	}
	if err := f.hold(); err != nil {
		return wire.Attr{}, err
	}
	defer f.t.mu.Unlock()
	next := slices.Clone(f.n.data)
	for _, r := range ranges {
		if int64(len(data)) < r.Len {
			return wire.Attr{}, wire.Errorf(wire.CodeInvalid, "%s: the data is shorter than its ranges", f.loc.Global)
		}
		next = writeAt(next, data[:r.Len], r.Off)
		data = data[r.Len:]
	}
	f.n.data = commit(next, c)
	return f.committed(c), nil
}
