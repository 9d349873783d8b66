package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pando.dev/pando/internal/wire"
)

// TestConcurrentWriters: several clients write different files at once;
// every file arrives whole.
func TestConcurrentWriters(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	ctx := context.Background()
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	want := make([][]byte, writers)
	for i := range writers {
		want[i] = make([]byte, 1<<20+i*4099)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range want[i] {
			want[i][j] = byte(rng.Uint32())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := d.client(d.admin) // each writer its own client and connections
			f, err := c.Create(ctx, fmt.Sprintf("/uva/alpha/w%d", i), wire.OpenWrite|wire.OpenExcl, 0o644)
			if err != nil {
				errs <- err
				return
			}
			// Small writes at scattered offsets, in a shuffled order.
			const piece = 64 << 10
			order := rand.New(rand.NewPCG(uint64(i), 9)).Perm((len(want[i]) + piece - 1) / piece)
			for _, k := range order {
				lo, hi := k*piece, min((k+1)*piece, len(want[i]))
				if _, err := f.WriteAt(ctx, want[i][lo:hi], int64(lo)); err != nil {
					errs <- err
					return
				}
			}
			errs <- f.Close(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range writers {
		got, err := os.ReadFile(filepath.Join(root, fmt.Sprintf("w%d", i)))
		if err != nil || !bytes.Equal(got, want[i]) {
			t.Errorf("file w%d: %d bytes, err %v; want %d bytes", i, len(got), err, len(want[i]))
		}
	}
}

// TestLargeSparseFile: a 5 GiB sparse file is read at its end, and written
// beyond 4 GiB through pando.
func TestLargeSparseFile(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	const size = 5 << 30
	f, err := os.Create(filepath.Join(root, "big"))
	if err != nil {
		t.Fatal(err)
	}
	tail := []byte("the end of a five gigabyte file")
	if _, err := f.WriteAt(tail, size-int64(len(tail))); err != nil {
		t.Fatal(err)
	}
	f.Close()

	c := d.client(d.admin)
	ctx := context.Background()
	h, err := c.Open(ctx, "/uva/alpha/big", wire.OpenRead)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	if h.Attr().Size != size {
		t.Fatalf("size %d, want %d", h.Attr().Size, size)
	}
	buf := make([]byte, 100)
	n, err := h.ReadAt(ctx, buf, size-100)
	if err != nil || n != 100 || !bytes.HasSuffix(buf, tail) {
		t.Fatalf("read at end: n=%d err=%v %q", n, err, buf)
	}
	// Past the end: EOF, no data.
	if n, err := h.ReadAt(ctx, buf, size+10); n != 0 || err == nil {
		t.Fatalf("read past the end: n=%d err=%v", n, err)
	}

	// Writing past 4 GiB through pando keeps the file sparse.
	w, err := c.Create(ctx, "/uva/alpha/big2", wire.OpenWrite, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(ctx, tail, 4<<30+12345); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(ctx, size); err != nil {
		t.Fatal(err)
	}
	w.Close(ctx)
	st := d.pando(d.admin, "stat", "/uva/alpha/big2").ok().stdout
	if !strings.Contains(st, fmt.Sprintf("Size: %d", int64(size))) {
		t.Errorf("stat:\n%s", st)
	}
	got := make([]byte, len(tail))
	r, _ := c.Open(ctx, "/uva/alpha/big2", wire.OpenRead)
	defer r.Close(ctx)
	if _, err := r.ReadAt(ctx, got, 4<<30+12345); err != nil || !bytes.Equal(got, tail) {
		t.Fatalf("read back beyond 4 GiB: %v %q", err, got)
	}
	fi, _ := os.Stat(filepath.Join(root, "big2"))
	if fi.Size() != size {
		t.Errorf("on disk: %d bytes", fi.Size())
	}
}

// TestUp: `pando up` runs controller and shares in one process, writes the
// admin's configuration, and stops cleanly.
func TestUp(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "Research Data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "hello.txt"), []byte("hello, grid\n"), 0o644)
	other := filepath.Join(dir, "scratch")
	os.MkdirAll(other, 0o755)
	xdg := filepath.Join(dir, "xdg")
	env := []string{"XDG_CONFIG_HOME=" + xdg, "PANDO_CONFIG="}
	mnt := filepath.Join(dir, "mnt")
	os.MkdirAll(mnt, 0o755)
	p, m := start(t, `pando is up: domain (\S+), controller (\S+)`, env, "up", "--state", filepath.Join(dir, "state"),
		"--listen", "127.0.0.1:0", "--share", data, "--share", other, "--mount", mnt)
	if m[1] != "local" {
		t.Errorf("default domain %q", m[1])
	}
	cfg := filepath.Join(xdg, "pando", "config.json")
	if got := runPando(t, "", cfg, "cat", "/local/research-data/hello.txt").ok().stdout; got != "hello, grid\n" {
		t.Errorf("cat through pando up: %q", got)
	}
	if ls := runPando(t, "", cfg, "ls", "/local").ok().stdout; ls != "research-data/\nscratch/\n" {
		t.Errorf("ls /local = %q", ls)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "local", "research-data", "hello.txt")); string(got) != "hello, grid\n" {
		t.Errorf("read through the mount of pando up: %q %v", got, err)
	}
	out := p.output()
	for _, want := range []string{"research-data", "/local/scratch", "pando ls /local", "Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Errorf("pando up does not say %q:\n%s", want, out)
		}
	}
	p.stop(t)
	if !strings.Contains(p.output(), "stopping") {
		t.Errorf("pando up did not stop cleanly:\n%s", p.output())
	}
	if mounted(mnt) {
		t.Errorf("pando up left %s mounted", mnt)
	}
}
