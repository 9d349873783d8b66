package e2e

import (
	"os"
	"os/exec"
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

	mistakes := []struct {
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
	}
	for _, tc := range mistakes {
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
	// The same session at a terminal (a pseudo-terminal, as a newcomer
	// types it): the same sentences, and no internal name in anything
	// printed, progress included; a copy that works shows its progress.
	for _, tc := range mistakes {
		out, code := inTerminal(t, d.admin, tc.args...)
		if code == 0 {
			t.Errorf("at a terminal, %s succeeded", tc.name)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("at a terminal, %s: %q does not mention %q", tc.name, out, w)
			}
		}
		for _, n := range append(tc.never, ".pando-") {
			if strings.Contains(out, n) {
				t.Errorf("at a terminal, %s names %q: %s", tc.name, n, out)
			}
		}
	}
	out, code := inTerminal(t, d.admin, "cp", big, "pando://uva/software/big")
	if code != 0 || strings.Contains(out, ".pando-") || !strings.Contains(out, "9.0 MiB / 9.0 MiB") {
		t.Errorf("a copy at a terminal (exit %d) printed: %q", code, out)
	}
	runPando(t, "", d.admin, "rm", "/uva/software/big").ok()

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

// inTerminal runs pando with cfg and args on a pseudo-terminal (util-linux
// script), as a person at a terminal would, and returns everything it
// printed there and its exit code.
func inTerminal(t *testing.T, cfg string, args ...string) (string, int) {
	t.Helper()
	line := shellQuote(pandoBin) + " --config " + shellQuote(cfg)
	for _, a := range args {
		line += " " + shellQuote(a)
	}
	cmd := exec.Command("script", "-qefc", line, "/dev/null")
	cmd.Dir = t.TempDir()
	// A person's terminal, not CI's (CI=true turns progress off).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("script: %v", err)
	}
	return string(out), code
}
