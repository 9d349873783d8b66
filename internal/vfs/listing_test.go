package vfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

// Under poll a listing brings the small files in it: reading one costs no
// read of the share, and its cache is filled for the version listed. A
// file changed at the share after the listing is read new after the next
// poll, not served from the bytes the listing brought.
func TestListingBringsSmallFiles(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	os.MkdirAll(filepath.Join(root, "mod"), 0o755)
	os.MkdirAll(filepath.Join(root, "include"), 0o755)
	src := bytes.Repeat([]byte("int x = 1;\n"), 300)
	hdr := bytes.Repeat([]byte("#define H 1\n"), 100)
	big := pattern(listDataFile+1, 5)
	os.WriteFile(filepath.Join(root, "mod/s.c"), src, 0o644)
	os.WriteFile(filepath.Join(root, "mod/big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(root, "include/h.h"), hdr, 0o644)
	period := 300 * time.Millisecond
	v, c := newFSWith(t, d, client.Options{Streams: 1, Session: "listing-test"},
		Options{Consistency: consistency.Consistency{Mode: consistency.ModePoll, Period: period}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v.Connect(ctx)

	read := func(p string) []byte {
		t.Helper()
		h, err := v.Open(ctx, p, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		got := make([]byte, 128<<10)
		n, err := h.Read(ctx, got, 0)
		if err != nil {
			t.Fatal(err)
		}
		return got[:n]
	}
	// fetches counts what the block cache fetched from the share (reads,
	// and the bytes an open brought).
	ch := v.cache.(*cache.Cache) // newFSWith's
	fetches := func() int64 { return ch.Stats().Fetches }

	if _, err := v.ReadDir(ctx, "/uva/alpha/mod"); err != nil {
		t.Fatal(err)
	}
	if got := v.ListFilled(); got != 1 {
		t.Errorf("the listing filled %d files; want 1 (s.c; big.bin is too big)", got)
	}
	before, f0 := c.Counts(), fetches()
	if got := read("/uva/alpha/mod/s.c"); !bytes.Equal(got, src) {
		t.Fatalf("s.c: read %d bytes that differ from the share's", len(got))
	}
	if got := rpcsSince(c.Counts(), before); got["read"] != 0 || got["getattr"] != 0 || got["readdir"] != 0 || fetches() != f0 {
		t.Errorf("reading a file its listing brought: %v, %d fetches; want no read, getattr or fetch", got, fetches()-f0)
	}
	if got := read("/uva/alpha/mod/big.bin"); !bytes.Equal(got, big) || fetches() == f0 {
		t.Errorf("big.bin: %d bytes read, %d fetches; want its bytes, fetched", len(got), fetches()-f0)
	}

	// A lookup in the unlisted include/ lists it: its headers come along.
	if _, err := v.GetAttr(ctx, "/uva/alpha/include"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.GetAttr(ctx, "/uva/alpha/include/h.h"); err != nil {
		t.Fatal(err)
	}
	before, f0 = c.Counts(), fetches()
	if got := read("/uva/alpha/include/h.h"); !bytes.Equal(got, hdr) {
		t.Fatalf("h.h: read %d bytes that differ from the share's", len(got))
	}
	if got := rpcsSince(c.Counts(), before); got["read"] != 0 || got["getattr"] != 0 || fetches() != f0 {
		t.Errorf("reading a header its directory's listing brought: %v, %d fetches", got, fetches()-f0)
	}

	// Changed at the share (same size): after the next poll the new bytes
	// are read, never the listing's again.
	newer := bytes.Repeat([]byte("int y = 2;\n"), 300)
	if err := os.WriteFile(filepath.Join(root, "mod/s.c"), newer, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2*period + 2*time.Second)
	for {
		got := read("/uva/alpha/mod/s.c")
		if bytes.Equal(got, newer) {
			break
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("s.c after a change: %q..., neither version", got[:20])
		}
		if time.Now().After(deadline) {
			t.Fatalf("s.c still read as listed %v after it changed at the share (poll every %v)", time.Since(deadline.Add(-2*period-2*time.Second)), period)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The directory's listing, fetched again, brings the new version.
	os.WriteFile(filepath.Join(root, "mod/t.c"), src, 0o644)
	deadline = time.Now().Add(2*period + 2*time.Second)
	for {
		ents, err := v.ReadDir(ctx, "/uva/alpha/mod")
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("t.c not listed after a poll")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before, f0 = c.Counts(), fetches()
	if got := read("/uva/alpha/mod/t.c"); !bytes.Equal(got, src) || fetches() != f0 {
		t.Errorf("t.c, listed after it was made: %d bytes, %d fetches", len(got), fetches()-f0)
	}
	if got := read("/uva/alpha/mod/s.c"); !bytes.Equal(got, newer) || fetches() != f0 {
		t.Errorf("s.c, listed again after its change: %d bytes (new: %v), %d fetches", len(got), bytes.Equal(got, newer), fetches()-f0)
	}
	_ = before
}

// Under window no contents are asked for.
func TestWindowListingBringsNoData(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	os.WriteFile(filepath.Join(root, "s.c"), []byte("int x;\n"), 0o644)
	v, _ := newFS(t, d)
	if _, err := v.ReadDir(context.Background(), "/uva/alpha"); err != nil {
		t.Fatal(err)
	}
	if got := v.ListFilled(); got != 0 {
		t.Errorf("a listing under window filled %d files", got)
	}
}
