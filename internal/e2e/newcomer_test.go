package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewcomerMistakes: each mistake a newcomer makes gets one sentence
// that names the thing and the way out, and never an internal name (a
// temporary or partial file). Nothing is left behind by a refused step.
func TestNewcomerMistakes(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("software")
	local := t.TempDir()
	big := filepath.Join(local, "big")
	if err := os.WriteFile(big, make([]byte, 9<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	putTestFile(t, filepath.Join(root, "x.txt"), "x")
	full := t.TempDir()
	putTestFile(t, filepath.Join(full, "keep.txt"), "mine")

	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		want  []string
		never []string
	}{
		{"copy into a share that does not exist", []string{"cp", big, "pando://uva/nosuchshare/big"}, 1,
			[]string{"pando://uva/nosuchshare", "nothing is mounted", "pando ls /uva"}, []string{"pando-part", "--resume"}},
		{"get into a local directory that does not exist", []string{"get", "/uva/software/x.txt", filepath.Join(local, "missing", "x.txt")}, 1,
			[]string{filepath.Join(local, "missing"), "does not exist", "mkdir -p"}, []string{".pando-"}},
		{"a grid path written without pando://", []string{"cp", big, "uva/software/big2"}, 1,
			[]string{"pando://uva/software/big2", "local path"}, nil},
		{"a grid source written without pando://", []string{"cp", "/uva/software/x.txt", local}, 1,
			[]string{"pando://uva/software/x.txt"}, nil},
		{"a mount over a directory that holds files", []string{"mount", "--cache-dir", filepath.Join(t.TempDir(), "c"), full}, 1,
			[]string{full, "not empty", "keep.txt", "--nonempty"}, nil},
		{"a second controller on the same state", []string{"controller", "--state", filepath.Join(d.dir, "controller"), "--listen", "127.0.0.1:0"}, 1,
			[]string{"in use by another pando process by PID", "--state"}, nil},
		{"a controller on a port in use", []string{"controller", "--state", t.TempDir(), "--domain", "x", "--listen", d.addr}, 1,
			[]string{d.addr, "held by PID", "--listen"}, nil},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			r := runPando(t, "", d.admin, tc.args...).fails(tc.code, tc.want...)
			t.Log(strings.TrimSpace(r.stderr))
			for _, n := range tc.never {
				if strings.Contains(r.stderr, n) {
					t.Errorf("the message names %q: %s", n, r.stderr)
				}
			}
		})
	}
	// Nothing left behind by the refusals.
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Errorf("the share holds %d entries after the refused copies", len(ents))
	}
	if ents, _ := os.ReadDir(local); len(ents) != 1 {
		t.Errorf("the local directory holds %d entries after the refused get", len(ents))
	}
	if got, _ := os.ReadFile(filepath.Join(full, "keep.txt")); string(got) != "mine" {
		t.Errorf("the directory a mount was refused over changed")
	}

	// A mount point mounted already: refused, and the first mount works on.
	a := mountAgent(t, d.admin)
	runPando(t, "", d.admin, "mount", "--cache-dir", filepath.Join(t.TempDir(), "c2"), a.dir).fails(1, a.dir, "mounted there already", "fusermount3 -u")
	if _, err := os.ReadDir(filepath.Join(a.dir, "uva", "software")); err != nil {
		t.Errorf("the first mount after a second was refused: %v", err)
	}
}
