package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// TestRestartWalkWarm: `pando mount` restarted on the same cache walks the
// tree it walked before, through the kernel, with one validation request
// and no listing nor getattr, in window, poll and callback; after changes
// made at the share while it was down (a rename, a delete, a new file, a
// rewrite of the same size), the walk sees the share's tree exactly and
// lists again only the directory changed and its parent.
func TestRestartWalkWarm(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	for i, mode := range []string{"window=30s", "poll=2s", "callback"} {
		t.Run(mode, func(t *testing.T) {
			share := filepath.Join(root, fmt.Sprint("tree", i))
			for j := range 3 {
				dir := filepath.Join(share, fmt.Sprint("d", j), "sub")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for k := range 5 {
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.c", k)), []byte("int x;\n"), 0o644)
					os.WriteFile(filepath.Join(filepath.Dir(dir), fmt.Sprintf("g%d.c", k)), []byte("int y;\n"), 0o644)
				}
			}
			base := t.TempDir()
			cache, mnt := filepath.Join(base, "cache"), filepath.Join(base, "mnt")
			os.MkdirAll(mnt, 0o755)
			top := filepath.Join(mnt, "uva", "alpha", fmt.Sprint("tree", i))
			run := func(what string) (*agentProc, map[string]int64) {
				t.Helper()
				p, _ := start(t, `pando mounted at`, nil, "--config", d.admin, "mount", "--cache-dir", cache, "--consistency", mode, mnt)
				a := &agentProc{proc: p, dir: mnt, cacheDir: cache}
				got, err := walkSizes(top)
				if err != nil {
					a.unmount(t)
					t.Fatalf("%s: %v", what, err)
				}
				want, err := walkSizes(share)
				if err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(got, want) {
					t.Errorf("%s: %v; the share has %v", what, got, want)
				}
				return a, got
			}
			a, _ := run("first walk")
			a.unmount(t)

			a, _ = run("walk after a restart")
			if v, l, g := rpcCount(t, a, "validate"), rpcCount(t, a, "readdir"), rpcCount(t, a, "getattr"); v != 1 || l != 0 || g != 0 {
				t.Errorf("walk after a restart: %v validate, %v readdir, %v getattr; want 1, 0, 0", v, l, g)
			}
			a.unmount(t)

			// While the agent is down, at the share: all in d1.
			d1 := filepath.Join(share, "d1")
			if err := os.Rename(filepath.Join(d1, "g0.c"), filepath.Join(d1, "h0.c")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(d1, "g1.c")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d1, "new.c"), []byte("int n;\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d1, "g2.c"), []byte("int z;\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			a, got := run("walk after changes while down")
			if _, ok := got["d1/h0.c"]; !ok {
				t.Errorf("the rename made while the agent was down is not seen: %v", got)
			}
			// d1's listing and its parent's (whose entry for d1 changed);
			// under callback the parent's own attributes came only with
			// its listing (its parent was never listed): one getattr.
			if v, l, g := rpcCount(t, a, "validate"), rpcCount(t, a, "readdir"), rpcCount(t, a, "getattr"); v != 1 || l > 2 || g > 1 {
				t.Errorf("walk after changes in one directory: %v validate, %v readdir, %v getattr; want 1, at most 2 (d1 and its parent), at most 1", v, l, g)
			}
			a.unmount(t)
		})
	}
}
