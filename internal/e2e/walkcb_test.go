package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// kernelLookups is how many lookups and attribute requests a's kernel
// has sent it.
func kernelLookups(t *testing.T, a *agentProc) float64 {
	t.Helper()
	n, ok := a.stats(t)["kernel_lookups"].(float64)
	if !ok {
		t.Fatal("pando stats --json has no kernel_lookups")
	}
	return n
}

// TestCallbackWalkKernel: under callback the kernel keeps what the agent
// holds delegations on, so a walk again reaches neither the share nor the
// agent; and a change through another agent is still seen at once by
// stat and ls through the kernel (the recall has the kernel forget before
// it is acknowledged), a change at the share within a long poll.
func TestCallbackWalkKernel(t *testing.T) {
	d := newDomain(t, "cw")
	share := filepath.Join(d.addShare("alpha"), "tree")
	for i := range 4 {
		dir := filepath.Join(share, fmt.Sprint("d", i), "sub")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range 10 {
			os.WriteFile(filepath.Join(filepath.Dir(dir), fmt.Sprintf("f%d.c", k)), []byte("int x;\n"), 0o644)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.c", k)), []byte("int y;\n"), 0o644)
		}
	}
	a := mountAgent(t, d.admin, "--consistency", "callback")
	b := mountAgent(t, d.admin, "--consistency", "callback")
	ta := filepath.Join(a.dir, "cw", "alpha", "tree")
	tb := filepath.Join(b.dir, "cw", "alpha", "tree")
	for _, top := range []string{ta, tb} {
		if _, err := walkSizes(top); err != nil {
			t.Fatal(err)
		}
	}
	// The second walk: nothing reaches the agent per file. What may: the
	// lookup of the path above the share (the domain's directory: no
	// share holds it), and an attribute check per directory that the
	// kernel sends itself before it lists the directory from its copy.
	want, err := walkSizes(share)
	if err != nil {
		t.Fatal(err)
	}
	lookups, rpcs := kernelLookups(t, b), rpcCount(t, b, "readdir")+rpcCount(t, b, "getattr")
	got, err := walkSizes(tb)
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("second walk: %v (err %v); the share has %v", got, err, want)
	}
	n := kernelLookups(t, b) - lookups
	t.Logf("a second walk of %d files: %v lookups and getattrs reached the agent", len(want), n)
	const dirs = 9
	if n > dirs+3 {
		t.Errorf("a second walk of %d files in %d directories under callback sent the agent %v lookups and getattrs; want none per file", len(want), dirs, n)
	}
	if n := rpcCount(t, b, "readdir") + rpcCount(t, b, "getattr") - rpcs; n != 0 {
		t.Errorf("a second walk under callback asked the share %v times", n)
	}

	// Through agent a: a rewrite that changes the size, a rename, a
	// delete, a new file; b's kernel must not answer from what it kept.
	if err := os.WriteFile(filepath.Join(ta, "d0", "f0.c"), []byte("int longer = 42;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(ta, "d1", "f1.c"), filepath.Join(ta, "d1", "g1.c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ta, "d2", "sub", "f2.c")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ta, "d3", "new.c"), []byte("int n;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(tb, "d0", "f0.c")); err != nil || fi.Size() != int64(len("int longer = 42;\n")) {
		t.Errorf("stat of a file rewritten through another agent: %v, %v; want the new size at once", fi, err)
	}
	if _, err := os.Stat(filepath.Join(tb, "d1", "f1.c")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a name renamed away through another agent: %v; want ENOENT at once", err)
	}
	if _, err := os.Stat(filepath.Join(tb, "d1", "g1.c")); err != nil {
		t.Errorf("stat of a renamed file's new name: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(tb, "d2", "sub", "f2.c")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a file deleted through another agent: %v; want ENOENT at once", err)
	}
	if _, err := os.Stat(filepath.Join(tb, "d3", "new.c")); err != nil {
		t.Errorf("stat of a file made through another agent: %v", err)
	}
	if want, err = walkSizes(share); err != nil {
		t.Fatal(err)
	}
	if got, err := walkSizes(tb); err != nil || !maps.Equal(got, want) {
		t.Errorf("walk after changes through another agent: %v (err %v); the share has %v", got, err, want)
	}

	// At the share: seen within a long poll (its watcher, then the recall).
	if err := os.WriteFile(filepath.Join(share, "d1", "f3.c"), []byte("int at_share_longer;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(share, "d0", "sub", "f4.c")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "a change at the share, through the kernel", func() bool {
		fi, err := os.Stat(filepath.Join(tb, "d1", "f3.c"))
		_, gone := os.Lstat(filepath.Join(tb, "d0", "sub", "f4.c"))
		return err == nil && fi.Size() == int64(len("int at_share_longer;\n")) && errors.Is(gone, fs.ErrNotExist)
	})
	// And a third walk of the unchanged tree reaches the agent only for
	// what changed.
	if _, err := walkSizes(tb); err != nil {
		t.Fatal(err)
	}
	lookups = kernelLookups(t, b)
	if _, err := walkSizes(tb); err != nil {
		t.Fatal(err)
	}
	if n := kernelLookups(t, b) - lookups; n > dirs+3 {
		t.Errorf("a walk again after the changes sent the agent %v lookups and getattrs", n)
	}
}
