package vfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// smallFS is a file system over d's namespace whose cache's disk holds
// 8 MiB (4 MiB of dirty data before a writer sends ahead).
func smallFS(t *testing.T, d *testenv.Domain) *FS {
	t.Helper()
	c, err := client.New(d.Admin, client.Options{Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := cache.Open(cache.Options{Dir: t.TempDir(), DiskBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	v := New(c, client.Data(c), ch, Options{})
	t.Cleanup(v.Close)
	return v
}

// writeBig writes data into a new file at p through v in 128 KiB writes,
// and returns its handle, open; the share's file at share must still be
// old then (the data sent ahead waits in a stage).
func writeBig(t *testing.T, v *FS, p, share string, data, old []byte) *Handle {
	t.Helper()
	ctx := context.Background()
	h, err := v.Open(ctx, p, syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 128 << 10 {
		if _, err := h.Write(ctx, data[off:min(len(data), off+128<<10)], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if name, staged := v.cache.StageOf(h.key); name == "" || len(staged) == 0 {
		t.Fatalf("nothing sent ahead of the close (stage %q, ranges %v)", name, staged)
	}
	if got, _ := os.ReadFile(share); !bytes.Equal(got, old) {
		t.Fatalf("with data sent ahead and the file open, the share's file is not the old version (%d bytes)", len(got))
	}
	return h
}

// TestSendAheadStageLost: the share no longer holds a file's stage (here:
// the cache names another, empty one). While the cache holds every block
// staged, the close sends them again and commits the whole file; once it
// has evicted some, the write is lost: the close fails, the share's file
// stays the old version, the data is dropped and counted as refused.
func TestSendAheadStageLost(t *testing.T) {
	d := testenv.New(t, "sl")
	root := d.AddShare("alpha")
	share := filepath.Join(root, "f")
	old := pattern(5<<20+3, 1)
	if err := os.WriteFile(share, old, 0o644); err != nil {
		t.Fatal(err)
	}
	v := smallFS(t, d)
	ctx := context.Background()

	// Held by the cache: sent again.
	data := pattern(6<<20+77, 2)
	h := writeBig(t, v, "/sl/alpha/f", share, data, old)
	_, staged := v.cache.StageOf(h.key)
	if !v.cache.HoldsRanges(h.key, staged) {
		t.Fatal("the cache evicted blocks sent ahead of a file smaller than its disk")
	}
	v.cache.SetStage(h.key, newStageName())
	if err := h.Release(ctx); err != nil {
		t.Fatalf("close after the stage was lost, with the cache holding its data: %v", err)
	}
	if got, _ := os.ReadFile(share); !bytes.Equal(got, data) {
		t.Fatalf("after the close the share's file holds %d bytes, not the %d written", len(got), len(data))
	}

	// Evicted: lost.
	old = data
	data = pattern(20<<20+5, 3)
	h = writeBig(t, v, "/sl/alpha/f", share, data, old)
	_, staged = v.cache.StageOf(h.key)
	if v.cache.HoldsRanges(h.key, staged) {
		t.Fatal("the cache of 8 MiB holds all of 20 MiB")
	}
	v.cache.SetStage(h.key, newStageName())
	err := h.Flush(ctx)
	if !errors.Is(err, errStageLost) {
		t.Fatalf("close after the stage and the cache's copy were lost: %v, want the write reported lost", err)
	}
	_ = h.Release(ctx)
	if got, _ := os.ReadFile(share); !bytes.Equal(got, old) {
		t.Fatalf("after a lost write the share's file is not the old version (%d bytes)", len(got))
	}
	if n := v.Refusals(); n != 1 {
		t.Fatalf("%d refusals counted, want the lost write", n)
	}
	if v.cache.Unsent(h.key) {
		t.Fatal("the lost write is still unsent in the cache")
	}
	// The stages the test took from the cache stay at the share until
	// they expire; nothing else is left.
	ents, _ := os.ReadDir(root)
	orphans := 0
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), ".pando-stage-n-"):
			orphans++
		case e.Name() != "f":
			t.Errorf("left at the share: %s", e.Name())
		}
	}
	if orphans != 2 {
		t.Errorf("%d named stages at the share, want the 2 the cache forgot", orphans)
	}
}

// TestSendAheadThenCut: a file cut after part of it was sent ahead, and
// written again past the cut, reaches the share as the program left it:
// zeros where the stage still held bytes from before the cut.
func TestSendAheadThenCut(t *testing.T) {
	d := testenv.New(t, "sc")
	root := d.AddShare("alpha")
	share := filepath.Join(root, "f")
	old := pattern(1<<20+3, 1)
	if err := os.WriteFile(share, old, 0o644); err != nil {
		t.Fatal(err)
	}
	v := smallFS(t, d)
	ctx := context.Background()
	data := pattern(12<<20+5, 2)
	h := writeBig(t, v, "/sc/alpha/f", share, data, old)
	cut := int64(1<<20 + 17)
	if _, err := h.Truncate(ctx, cut); err != nil {
		t.Fatal(err)
	}
	tail := []byte("written again past the cut")
	at := int64(10 << 20)
	if _, err := h.Write(ctx, tail, at); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, at+int64(len(tail)))
	copy(want, data[:cut])
	copy(want[at:], tail)
	if got, _ := os.ReadFile(share); !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the share's file (%d bytes) differs from what the program left (%d bytes) at %d", len(got), len(want), i)
	}
}

// TestStagesExhausted: with every named stage its principal may keep at
// the share taken, a write-back goes through a stage of its own, and a
// write that must send ahead fails (EAGAIN) with the data kept and the
// share's file unchanged; once stages are free again, it succeeds.
func TestStagesExhausted(t *testing.T) {
	d := testenv.New(t, "sx")
	root := d.AddShare("alpha")
	share := filepath.Join(root, "f")
	old := pattern(1<<20, 1)
	if err := os.WriteFile(share, old, 0o644); err != nil {
		t.Fatal(err)
	}
	v := smallFS(t, d)
	ctx := context.Background()
	hog, err := v.data.Open(ctx, "/sx/alpha/f", wire.OpenRead|wire.OpenWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close(ctx)
	var names []string
	for {
		name := newStageName()
		st, err := hog.StageNamed(ctx, name)
		if err != nil {
			if wire.CodeOf(err) != wire.CodeAgain {
				t.Fatalf("stage %d: %v, want a refusal (EAGAIN) past the limit", len(names)+1, err)
			}
			break
		}
		names = append(names, name)
		if err := st.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		if len(names) > 1000 {
			t.Fatal("no limit on named stages")
		}
	}

	// A write-back of more than a commit request (through a cache that
	// need not send ahead): a stage of its own.
	big0, _ := newFS(t, d)
	data := pattern(6<<20+5, 2)
	if err := writeAll(big0, "/sx/alpha/f", data); err != nil {
		t.Fatalf("a write-back with no named stage to be had: %v", err)
	}
	if got, _ := os.ReadFile(share); !bytes.Equal(got, data) {
		t.Fatalf("the share's file holds %d bytes, not the %d written", len(got), len(data))
	}
	old = data

	// Sending ahead needs a named stage: the write fails, nothing is lost.
	h, err := v.Open(ctx, "/sx/alpha/f", syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	big := pattern(12<<20, 3)
	var werr error
	for off := 0; off < len(big) && werr == nil; off += 128 << 10 {
		_, werr = h.Write(ctx, big[off:off+128<<10], int64(off))
	}
	if wire.CodeOf(werr) != wire.CodeAgain {
		t.Fatalf("a write that must send ahead with no stage to be had: %v, want EAGAIN", werr)
	}
	if got, _ := os.ReadFile(share); !bytes.Equal(got, old) {
		t.Fatal("the refused send ahead changed the share's file")
	}
	if len(v.cache.Dirty(h.key)) == 0 {
		t.Fatal("the data written before the refusal was dropped")
	}
	for _, name := range names {
		st, err := hog.StageNamed(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		st.Close(ctx)
	}
	for off := 0; off < len(big); off += 128 << 10 {
		if _, err := h.Write(ctx, big[off:off+128<<10], int64(off)); err != nil {
			t.Fatalf("writing once stages are free: %v", err)
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(share); !bytes.Equal(got, big) {
		t.Fatalf("the share's file holds %d bytes, not the %d written", len(got), len(big))
	}
}

// writeAll writes data over the file at p through v and closes it.
func writeAll(v *FS, p string, data []byte) error {
	ctx := context.Background()
	h, err := v.Open(ctx, p, syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); off += 128 << 10 {
		if _, err := h.Write(ctx, data[off:min(len(data), off+128<<10)], int64(off)); err != nil {
			h.Release(ctx)
			return err
		}
	}
	return h.Release(ctx)
}
