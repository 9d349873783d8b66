// Package remotetest is the contract suite of remote.Namespace and
// remote.Data: Run drives an implementation through what the interfaces'
// comments promise, so that every implementation (internal/client over a
// real domain, remote/memory) is held to the same contract.
package remotetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path"
	"slices"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Impl is an implementation under test.
type Impl struct {
	NS   remote.Namespace
	Data remote.Data
	// Dir is an empty, writable global directory in one share, which
	// the suite fills.
	Dir string
	// Other, if not nil, is the data path of another session over the
	// same shares, whose changes GetInvWait of NS must report (a session
	// need not hear of its own).
	Other remote.Data
}

// Run runs the suite; open makes a fresh implementation for each test.
func Run(t *testing.T, open func(t *testing.T) Impl) {
	tests := []struct {
		name string
		fn   func(*testing.T, Impl)
	}{
		{"Names", testNames},
		{"Listing", testListing},
		{"Versions", testVersions},
		{"Data", testData},
		{"Stages", testStages},
		{"Xattrs", testXattrs},
		{"Locks", testLocks},
		{"Invalidations", testInvalidations},
		{"Health", testHealth},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// result is a call's value and error, for must.
type result[T any] struct {
	v   T
	err error
}

// try holds a call's results until must is asked for the value.
func try[T any](v T, err error) result[T] { return result[T]{v, err} }

// must returns the value, or ends the test with the error.
func (r result[T]) must(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

func wantCode(t *testing.T, what string, err error, code wire.Code) {
	t.Helper()
	if wire.CodeOf(err) != code {
		t.Errorf("%s: %v, want code %d", what, err, code)
	}
}

// create makes the file p holding data and closes it.
func create(t *testing.T, im Impl, p string, data []byte) wire.Attr {
	t.Helper()
	ctx := context.Background()
	f := try(im.Data.Create(ctx, p, wire.OpenRead|wire.OpenWrite|wire.OpenExcl, 0o644)).must(t)
	defer f.Close(ctx)
	if len(data) > 0 {
		try(f.WriteAt(ctx, data, 0)).must(t)
	}
	return try(f.Stat(ctx)).must(t)
}

func testNames(t *testing.T, im Impl) {
	ctx := context.Background()
	ns := im.NS
	if ns.Principal() == "" {
		t.Error("Principal is empty")
	}
	dir := path.Join(im.Dir, "d")
	if a := try(ns.Mkdir(ctx, dir, 0o755)).must(t); a.Mode&syscall.S_IFMT != syscall.S_IFDIR || a.Version == 0 {
		t.Errorf("Mkdir returned %+v", a)
	}
	_, err := ns.Mkdir(ctx, dir, 0o755)
	wantCode(t, "Mkdir of a directory that exists", err, wire.CodeExist)
	loc := try(ns.Locate(ctx, dir)).must(t)
	if loc.Global != dir || loc.Share == "" || loc.Prefix == "" || !remote.Under(dir, loc.Prefix) {
		t.Errorf("Locate(%s) = %+v", dir, loc)
	}

	f := path.Join(dir, "f")
	a := create(t, im, f, []byte("hello"))
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG || a.Size != 5 {
		t.Errorf("a new file of 5 bytes: %+v", a)
	}
	_, err = im.Data.Create(ctx, f, wire.OpenWrite|wire.OpenExcl, 0o644)
	wantCode(t, "exclusive Create of a file that exists", err, wire.CodeExist)
	if st := try(ns.Stat(ctx, f)).must(t); st.Ino != a.Ino || st.Size != 5 {
		t.Errorf("Stat after the write: %+v, want inode %d of 5 bytes", st, a.Ino)
	}
	_, err = ns.Stat(ctx, path.Join(dir, "missing"))
	wantCode(t, "Stat of a missing file", err, wire.CodeNotExist)

	// Links, symlinks, renames.
	l := try(ns.Link(ctx, f, path.Join(dir, "hard"))).must(t)
	if l.Ino != a.Ino || l.Nlink != 2 {
		t.Errorf("Link: %+v, want inode %d twice linked", l, a.Ino)
	}
	try(ns.Symlink(ctx, "f", path.Join(dir, "sym"))).must(t)
	if got := try(ns.Readlink(ctx, path.Join(dir, "sym"))).must(t); got != "f" {
		t.Errorf("Readlink = %q, want f", got)
	}
	g := path.Join(dir, "g")
	if err := ns.Rename(ctx, f, g, false); err != nil {
		t.Fatal(err)
	}
	_, err = ns.Stat(ctx, f)
	wantCode(t, "Stat of a renamed file's old name", err, wire.CodeNotExist)
	if st := try(ns.Stat(ctx, g)).must(t); st.Ino != a.Ino {
		t.Errorf("the renamed file has inode %d, want %d", st.Ino, a.Ino)
	}
	wantCode(t, "Rename without replacing onto a name that exists", ns.Rename(ctx, g, path.Join(dir, "hard"), true), wire.CodeExist)

	// Removals.
	wantCode(t, "Rmdir of a directory with entries", ns.Rmdir(ctx, dir), wire.CodeNotEmpty)
	for _, n := range []string{"g", "hard", "sym"} {
		if err := ns.Remove(ctx, path.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ns.Rmdir(ctx, dir); err != nil {
		t.Fatal(err)
	}
	_, err = ns.Stat(ctx, dir)
	wantCode(t, "Stat of a removed directory", err, wire.CodeNotExist)
	if _, err := ns.StatFS(ctx, im.Dir); err != nil {
		t.Error(err)
	}
}

func testListing(t *testing.T, im Impl) {
	ctx := context.Background()
	names := []string{"a", "b", "c", "d", "e"}
	for i, n := range names {
		create(t, im, path.Join(im.Dir, n), bytes.Repeat([]byte{'x'}, i))
	}
	try(im.NS.Mkdir(ctx, path.Join(im.Dir, "sub"), 0o755)).must(t)
	entries, dirAttr, data, err := im.NS.ReadDirData(ctx, im.Dir, 1<<10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name)
		if d, ok := data[e.Name]; ok && (int64(len(d)) != e.Attr.Size || !e.Data) {
			t.Errorf("%s: %d bytes of contents for a file of %d (Data %v)", e.Name, len(d), e.Attr.Size, e.Data)
		}
	}
	slices.Sort(got)
	if want := append(slices.Clone(names), "sub"); !slices.Equal(got, want) {
		t.Errorf("listed %q, want %q", got, want)
	}
	if dirAttr.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Errorf("the directory's attributes: %+v", dirAttr)
	}

	// Pages of two, in name order, each after the last.
	var paged []string
	for after, n := "", 0; ; n++ {
		page, more, err := im.NS.ReadDirPage(ctx, im.Dir, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 || n > 10 {
			t.Fatalf("page %d holds %d entries, asked for 2 at most", n, len(page))
		}
		for _, e := range page {
			if e.Name <= after {
				t.Errorf("page after %q holds %q", after, e.Name)
			}
			after = e.Name
			paged = append(paged, e.Name)
		}
		if !more {
			break
		}
	}
	if want := append(slices.Clone(names), "sub"); !slices.Equal(paged, want) {
		t.Errorf("paged %q, want %q", paged, want)
	}
	_, _, _, err = im.NS.ReadDirData(ctx, path.Join(im.Dir, "missing"), 0, 0)
	wantCode(t, "listing a missing directory", err, wire.CodeNotExist)
}

// testVersions: every change grows the version; SetAttrPrior names the
// one before a change that left the contents alone.
func testVersions(t *testing.T, im Impl) {
	ctx := context.Background()
	p := path.Join(im.Dir, "v")
	a := create(t, im, p, []byte("one"))
	f := try(im.Data.Open(ctx, p, wire.OpenRead|wire.OpenWrite)).must(t)
	defer f.Close(ctx)
	try(f.WriteAt(ctx, []byte("two"), 0)).must(t)
	b := try(im.NS.Stat(ctx, p)).must(t)
	if b.Version <= a.Version {
		t.Errorf("a write left the version at %d (was %d)", b.Version, a.Version)
	}
	r := try(im.NS.SetAttrPrior(ctx, p, wire.SetAttrReq{Valid: wire.SetMode, Mode: 0o600})).must(t)
	if r.Attr.Version <= b.Version || r.Attr.Mode&0o7777 != 0o600 || r.Prior != b.Version {
		t.Errorf("chmod: %+v (prior %d), want a version above %d, mode 0600, prior %d", r.Attr, r.Prior, b.Version, b.Version)
	}
	r2 := try(im.NS.SetAttrPrior(ctx, p, wire.SetAttrReq{Valid: wire.SetSize, Size: 1})).must(t)
	if r2.Attr.Version <= r.Attr.Version || r2.Attr.Size != 1 || r2.Prior != 0 {
		t.Errorf("truncate: %+v (prior %d), want a version above %d, size 1, no prior", r2.Attr, r2.Prior, r.Attr.Version)
	}
	if a := try(f.Stat(ctx)).must(t); a.Version != r2.Attr.Version || f.Attr().Version != a.Version {
		t.Errorf("the open file's Stat says version %d, Attr %d; want %d", a.Version, f.Attr().Version, r2.Attr.Version)
	}
}

func testData(t *testing.T, im Impl) {
	ctx := context.Background()
	p := path.Join(im.Dir, "data")
	content := bytes.Repeat([]byte("0123456789"), 1000)
	create(t, im, p, content)

	f := try(im.Data.Open(ctx, p, wire.OpenRead)).must(t)
	buf := make([]byte, 100)
	if n, err := f.ReadAt(ctx, buf, 5000); n != 100 || err != nil || !bytes.Equal(buf, content[5000:5100]) {
		t.Errorf("ReadAt(100 at 5000) = %d, %v", n, err)
	}
	n, err := f.ReadAt(ctx, buf, int64(len(content))-10)
	if n != 10 || !errors.Is(err, io.EOF) || !bytes.Equal(buf[:10], content[len(content)-10:]) {
		t.Errorf("ReadAt across the end = %d, %v; want 10, io.EOF", n, err)
	}
	if n, sum, summed, err := f.ReadAtSum(ctx, buf, 0); n != 100 || err != nil || !bytes.Equal(buf, content[:100]) {
		t.Errorf("ReadAtSum = %d, %v", n, err)
	} else if summed && sum == 0 {
		t.Errorf("ReadAtSum says summed, with sum 0")
	}
	if _, err := f.WriteAt(ctx, []byte("x"), 0); err == nil {
		t.Error("a write through a handle open only for reading succeeded")
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}

	first := try(im.Data.OpenFirst(ctx, p, wire.OpenRead, 64)).must(t)
	if got, eof := first.First(); !bytes.Equal(got, content[:64]) || eof {
		t.Errorf("First = %q, eof %v; want the first 64 bytes, not the end", got, eof)
	}
	first.Close(ctx)

	w := try(im.Data.Open(ctx, p, wire.OpenRead|wire.OpenWrite)).must(t)
	defer w.Close(ctx)
	try(w.WriteAt(ctx, []byte("abc"), int64(len(content))+2)).must(t)
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if a := try(w.Stat(ctx)).must(t); a.Size != int64(len(content))+5 {
		t.Errorf("size %d after a write past the end, want %d", a.Size, len(content)+5)
	}
	if n, _ := w.ReadAt(ctx, buf[:5], int64(len(content))); !bytes.Equal(buf[:n], []byte("\x00\x00abc")) {
		t.Errorf("read %q over a hole and a write, want zeros then abc", buf[:n])
	}
	if err := w.Truncate(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if a := try(im.NS.Stat(ctx, p)).must(t); a.Size != 3 {
		t.Errorf("size %d after Truncate(3)", a.Size)
	}
	if loc := w.Loc(); loc.Global != p || loc.Share == "" {
		t.Errorf("Loc = %+v", loc)
	}
	_, err = im.Data.Open(ctx, path.Join(im.Dir, "missing"), wire.OpenRead)
	wantCode(t, "Open of a missing file", err, wire.CodeNotExist)
}

// testStages: a stage reaches the file only with its commit, all at once;
// a named stage is found again with what it holds.
func testStages(t *testing.T, im Impl) {
	ctx := context.Background()
	p := path.Join(im.Dir, "staged")
	create(t, im, p, []byte("old contents"))
	f := try(im.Data.Open(ctx, p, wire.OpenRead|wire.OpenWrite)).must(t)
	defer f.Close(ctx)

	st := try(f.Stage(ctx)).must(t)
	next := []byte("NEW")
	try(st.WriteExtents(ctx, []remote.Extent{{Off: 0, Len: 3}}, func(b []byte, off int64) (int, error) {
		return copy(b, next[off:]), nil
	}, nil)).must(t)
	if got := read(t, im, p); string(got) != "old contents" {
		t.Errorf("before the commit the file holds %q", got)
	}
	a := try(st.Commit(ctx, remote.Commit{Size: 3})).must(t)
	if got := read(t, im, p); string(got) != "NEW" || a.Size != 3 {
		t.Errorf("after the commit the file holds %q (size %d), want NEW", got, a.Size)
	}

	thrown := try(f.Stage(ctx)).must(t)
	try(thrown.WriteExtents(ctx, []remote.Extent{{Off: 0, Len: 3}}, func(b []byte, _ int64) (int, error) { return copy(b, "zzz"), nil }, nil)).must(t)
	if err := thrown.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(t, im, p); string(got) != "NEW" {
		t.Errorf("a stage thrown away changed the file to %q", got)
	}

	named := try(f.StageNamed(ctx, "s1")).must(t)
	sent := 0
	try(named.WriteExtents(ctx, []remote.Extent{{Off: 10, Len: 4}}, func(b []byte, _ int64) (int, error) { return copy(b, "tail"), nil }, func() { sent++ })).must(t)
	if sent == 0 {
		t.Error("WriteExtents did not call written")
	}
	if err := named.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	again := try(f.StageNamed(ctx, "s1")).must(t)
	if held := again.Held(); len(held) != 1 || held[0] != (wire.ByteRange{Off: 10, Len: 4}) {
		t.Errorf("the named stage holds %v, want [{10 4}]", held)
	}
	buf := make([]byte, 4)
	if n, _ := again.ReadAt(ctx, buf, 10); string(buf[:n]) != "tail" {
		t.Errorf("the named stage reads %q at 10, want tail", buf[:n])
	}
	try(again.Commit(ctx, remote.Commit{Size: 14})).must(t)
	if got := read(t, im, p); string(got) != "NEW\x00\x00\x00\x00\x00\x00\x00tail" {
		t.Errorf("after the named stage's commit the file holds %q", got)
	}

	a = try(f.CommitInline(ctx, []wire.ByteRange{{Off: 0, Len: 2}, {Off: 4, Len: 1}}, []byte("ab!"), remote.Commit{Size: 5})).must(t)
	if got := read(t, im, p); string(got) != "abW\x00!" || a.Size != 5 {
		t.Errorf("after CommitInline the file holds %q (size %d)", got, a.Size)
	}
}

// read returns the whole of the file p.
func read(t *testing.T, im Impl, p string) []byte {
	t.Helper()
	ctx := context.Background()
	f := try(im.Data.Open(ctx, p, wire.OpenRead)).must(t)
	defer f.Close(ctx)
	a := try(f.Stat(ctx)).must(t)
	buf := make([]byte, a.Size)
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return buf[:n]
}

func testXattrs(t *testing.T, im Impl) {
	ctx := context.Background()
	p := path.Join(im.Dir, "x")
	a := create(t, im, p, nil)
	b := try(im.NS.SetXattr(ctx, p, "user.k", []byte("v"), 0)).must(t)
	if b.Version <= a.Version {
		t.Errorf("SetXattr left the version at %d", b.Version)
	}
	_, err := im.NS.SetXattr(ctx, p, "user.k", []byte("w"), wire.XattrCreate)
	wantCode(t, "SetXattr create of one that exists", err, wire.CodeExist)
	if v := try(im.NS.GetXattr(ctx, p, "user.k")).must(t); string(v) != "v" {
		t.Errorf("GetXattr = %q", v)
	}
	if names := try(im.NS.ListXattr(ctx, p)).must(t); !slices.Contains(names, "user.k") {
		t.Errorf("ListXattr = %q", names)
	}
	try(im.NS.RemoveXattr(ctx, p, "user.k")).must(t)
	_, err = im.NS.GetXattr(ctx, p, "user.k")
	wantCode(t, "GetXattr of a removed attribute", err, wire.CodeNoData)
}

func testLocks(t *testing.T, im Impl) {
	ctx := context.Background()
	p := path.Join(im.Dir, "locked")
	create(t, im, p, []byte("data"))
	a := try(im.Data.Open(ctx, p, wire.OpenRead|wire.OpenWrite)).must(t)
	b := try(im.Data.Open(ctx, p, wire.OpenRead|wire.OpenWrite)).must(t)
	defer b.Close(ctx)
	if err := a.Lock(ctx, wire.LockWrite, 0, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "a second handle's lock over a write lock", b.Lock(ctx, wire.LockRead, 0, 1), wire.CodeLocked)
	if r := try(b.TestLock(ctx, wire.LockRead, 0, 1)).must(t); r.Type != wire.LockWrite {
		t.Errorf("TestLock reports %+v, want the write lock", r)
	}
	if err := b.Lock(ctx, wire.LockRead, 0, 1); err == nil {
		t.Error("locked over a write lock")
	}
	a.Close(ctx) // drops its locks
	if err := b.Lock(ctx, wire.LockWrite, 0, 0); err != nil {
		t.Errorf("a lock after the holder closed: %v", err)
	}
	if r := try(b.TestLock(ctx, wire.LockWrite, 0, 0)).must(t); r.Type != wire.LockUnlock {
		t.Errorf("TestLock of the holder's own range: %+v, want none", r)
	}
}

// testInvalidations: a change after a poll's stamp is reported by the
// next poll; a long poll with nothing to report returns within its wait.
func testInvalidations(t *testing.T, im Impl) {
	if im.Other == nil {
		t.Skip("no other session to make changes")
	}
	ctx := context.Background()
	first := try(im.NS.GetInvWait(ctx, im.Dir, 0, 0, 0, 0)).must(t)
	p := path.Join(im.Dir, "changed")
	create(t, Impl{NS: im.NS, Data: im.Other}, p, []byte("x"))
	loc := try(im.NS.Locate(ctx, p)).must(t)
	deadline := time.Now().Add(10 * time.Second)
	since := first.Stamp
	for {
		resp := try(im.NS.GetInvWait(ctx, im.Dir, since, 0, 0, 0)).must(t)
		if slices.Contains(resp.Paths, loc.Rel) || resp.Force {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no poll since stamp %d reported %s (last: %+v)", first.Stamp, loc.Rel, resp)
		}
		since = resp.Stamp
		time.Sleep(20 * time.Millisecond)
	}
	quiet := try(im.NS.GetInvWait(ctx, im.Dir, 0, 0, 0, 0)).must(t)
	for range 3 {
		next := try(im.NS.GetInvWait(ctx, im.Dir, quiet.Stamp, 0, 0, 0)).must(t)
		if len(next.Paths) == 0 {
			return
		}
		quiet = next
	}
	t.Errorf("polls with no change between them kept reporting changes")
}

func testHealth(t *testing.T, im Impl) {
	ctx := context.Background()
	if err := im.NS.Reachable(ctx, im.Dir); err != nil {
		t.Errorf("Reachable(%s) = %v on a share that answers", im.Dir, err)
	}
	loc := try(im.NS.Locate(ctx, im.Dir)).must(t)
	if err := im.NS.DownErr(loc.Share); err != nil {
		t.Errorf("DownErr(%s) = %v on a share that answers", loc.Share, err)
	}
	for _, h := range im.NS.Health() {
		if h.Share == loc.Share && !h.Up {
			t.Errorf("Health says %s is down: %+v", h.Share, h)
		}
	}
}
