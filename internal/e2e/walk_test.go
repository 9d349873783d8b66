package e2e

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// walkSizes walks a tree as find and stat do (list every directory, stat
// every entry) and returns the size of every file by path relative to the
// top.
func walkSizes(top string) (map[string]int64, error) {
	out := make(map[string]int64)
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(top, p)
			out[rel] = fi.Size()
		}
		return nil
	})
	return out, err
}

// TestWalkSeesChanges: an agent that walks a tree, its listings cached (and
// revalidated by directory), sees a rename, a delete and a new file made
// through another agent or at the share within its mode's bound: at once
// under strict and, for changes through an agent, under callback; within
// D under window=D; within D plus a poll under poll=D; within a long poll
// under callback for changes made at the share.
func TestWalkSeesChanges(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	const slack = 1500 * time.Millisecond // a loaded machine
	for i, tc := range []struct {
		mode        string
		bound       time.Duration // for changes through the other agent
		atShare     time.Duration // for changes made at the share
		atOnceAgent bool
	}{
		{"strict", 0, 0, true},
		{"window=1s", time.Second, time.Second, false},
		{"poll=500ms", time.Second, time.Second, false},
		{"callback", 0, 500 * time.Millisecond, true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			name := fmt.Sprint("tree", i)
			share := filepath.Join(root, name)
			for j := range 3 {
				dir := filepath.Join(share, fmt.Sprint("d", j), "sub")
				os.MkdirAll(dir, 0o755)
				for k := range 6 {
					os.WriteFile(filepath.Join(filepath.Dir(dir), fmt.Sprintf("f%d.c", k)), []byte("int x;\n"), 0o644)
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.c", k)), []byte("int y;\n"), 0o644)
				}
			}
			a := mountAgent(t, d.admin, "--consistency", tc.mode)
			b := mountAgent(t, d.admin, "--consistency", tc.mode)
			ta := filepath.Join(a.dir, "uva", "alpha", name)
			tb := filepath.Join(b.dir, "uva", "alpha", name)
			for _, top := range []string{ta, tb} {
				if _, err := walkSizes(top); err != nil {
					t.Fatal(err)
				}
			}
			// seen walks b's tree until it matches the share's, for
			// at most limit (the first walk must match when limit is 0).
			seen := func(what string, limit time.Duration) {
				t.Helper()
				want, err := walkSizes(share)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				for n := 0; ; n++ {
					got, err := walkSizes(tb)
					if err == nil && maps.Equal(got, want) {
						t.Logf("%s: seen after %v (%d walks)", what, time.Since(start).Round(time.Millisecond), n+1)
						return
					}
					if time.Since(start) > limit {
						t.Fatalf("%s: not seen within %v: walk gives %v (err %v); the share has %v", what, limit, got, err, want)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			// Through agent a: a rename, a delete, a new file, each in a
			// directory whose listing b holds.
			if err := os.Rename(filepath.Join(ta, "d0", "f1.c"), filepath.Join(ta, "d0", "g1.c")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(ta, "d1", "sub", "f2.c")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ta, "d2", "new-a.c"), []byte("int z = 1;\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			limit := tc.bound + slack
			if tc.atOnceAgent {
				limit = 0
			}
			seen("changes through another agent", limit)
			// At the share.
			if err := os.Rename(filepath.Join(share, "d2", "f3.c"), filepath.Join(share, "d2", "h3.c")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(share, "d0", "sub", "f4.c")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(share, "d1", "new-s.c"), []byte("int s;\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			limit = tc.atShare + slack
			if tc.mode == "strict" {
				limit = 0
			}
			seen("changes at the share", limit)
		})
	}
}
