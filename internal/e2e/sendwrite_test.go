package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWritesWhileKeptBackDataIsSent: data kept back under a write
// delegation goes to the share a while after the last close, also while a
// program has the file open again and goes on writing to it. What it
// writes while that data is on the way is not part of it, and must still
// reach the share: another agent's read after the program's close, and
// the share's file, hold every byte of the last version. (The write-back
// once marked the blocks written meanwhile as sent.)
func TestWritesWhileKeptBackDataIsSent(t *testing.T) {
	d := newDomain(t, "ws")
	root := d.addShare("data")
	base := t.TempDir()
	a := mountBack(t, d.admin, filepath.Join(base, "ca"), filepath.Join(base, "ma"))
	t.Cleanup(func() { a.unmount(t) })
	b := mountAgent(t, d.admin, "--consistency", "callback")
	backChannel(t, a, filepath.Join(a.dir, "ws", "data"))
	at := func(x *agentProc) string { return filepath.Join(x.dir, "ws", "data", "f") }

	model := randomBytes(7, 24<<20)
	if err := os.WriteFile(at(a), model, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(at(a), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Write all over the file for longer than the write-back's delay
	// after the close (5 s), so that the kept-back data is sent while
	// these writes go on.
	chunk := randomBytes(8, 1<<20)
	t0 := time.Now()
	writes := 0
	for i := uint64(0); time.Since(t0) < 8*time.Second; i++ {
		off := int64(i*7919%uint64(len(model)-4096)) &^ 511
		n := 512 + int(i*131%3584)
		p := chunk[i%uint64(len(chunk)-4096):][:n]
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		writes++
	}
	// The kept-back data was sent meanwhile (the share had none of it
	// before), or this test tested nothing.
	if fi, err := os.Stat(filepath.Join(root, "f")); err != nil || fi.Size() != int64(len(model)) {
		t.Fatalf("the data kept back at the first close did not reach the share while the file was open again (%v)", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(at(b))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatalf("after %d writes, another agent reads %d bytes differing from what was written at %d bytes\nwriter:\n%s",
			writes, diffCount(got, model), firstDiff(got, model), a.output())
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, model) {
		t.Fatalf("the share's file differs from what was written at %d bytes", diffCount(got, model))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
