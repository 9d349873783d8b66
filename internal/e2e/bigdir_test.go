package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBigDirectory: a directory of 100,000 entries lists whole through
// the CLI and through the mount; its listing travels in pages, each well
// under the frame limit (before, the one reply of 1 MiB and more was
// refused as malformed).
func TestBigDirectory(t *testing.T) {
	const n = 100_000
	t0 := time.Now()
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	dir := filepath.Join(root, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		// 40-character names, as in the report of the failure.
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("entry-%06d-%s", i, strings.Repeat("x", 27))))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	t.Logf("made %d files in %v", n, time.Since(t0))
	out := d.pando(d.admin, "ls", "/uva/alpha/big").ok().stdout
	if got := strings.Count(out, "\n"); got != n {
		t.Errorf("pando ls lists %d names of %d", got, n)
	}
	t.Logf("pando ls: %v", time.Since(t0))
	t0 = time.Now()
	a := mountAgent(t, d.admin)
	ents, err := os.ReadDir(filepath.Join(a.dir, "uva/alpha/big"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mount: %v", time.Since(t0))
	if len(ents) != n {
		t.Errorf("the mount lists %d names of %d", len(ents), n)
	}
	for i, e := range ents { // each name once (os.ReadDir sorts them)
		if want := fmt.Sprintf("entry-%06d-%s", i, strings.Repeat("x", 27)); i < n && e.Name() != want {
			t.Fatalf("the mount lists %q as name %d; want %q", e.Name(), i, want)
		}
	}
}
