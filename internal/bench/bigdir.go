package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/vfs"
)

// The bigdir scenario: `ls -f` (names only) and `ls -l` (a stat of every
// entry) of directories of 10,000, 100,000 and 1,000,000 entries through
// the mount, beside the same commands on the share's local directory,
// with the resident memory of the agent and of the share after each; then
// a walk (a stat of every file) of a tree of 200,000 files, by a new
// agent of the default metadata bound and by one of a quarter of it,
// with each one's RSS. The agents and the share run as processes of their
// own, so that each one's RSS is its own.
func runBigdir(ctx context.Context, o Options) ([]Row, error) {
	sizes := []int{10_000, 100_000, 1_000_000}
	tree, perDir := 200_000, 1_000
	if o.Quick {
		sizes = []int{2_000, 10_000}
		tree = 20_000
	}

	e, err := NewEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	root, sp, err := startShareProc(ctx, e, "data")
	if err != nil {
		return nil, err
	}
	// Every directory is made before the agent starts: one made later
	// would hide behind the listing of data/ the agent holds for its
	// consistency window.
	for _, n := range sizes {
		o.say("bigdir: making %d entries", n)
		if err := makeEntries(filepath.Join(root, fmt.Sprintf("big-%d", n)), n); err != nil {
			return nil, err
		}
	}
	o.say("bigdir: making a tree of %d files", tree)
	if err := os.Mkdir(filepath.Join(root, "tree"), 0o755); err != nil {
		return nil, err
	}
	for i := 0; i < tree/perDir; i++ {
		if err := makeEntries(filepath.Join(root, "tree", fmt.Sprintf("d%04d", i)), perDir); err != nil {
			return nil, err
		}
	}
	ap, mnt, err := startAgentProc(e)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, n := range sizes {
		name := fmt.Sprintf("big-%d", n)
		local := filepath.Join(root, name)
		remote := filepath.Join(mnt, e.Domain, "data", name)
		c := fmt.Sprintf("%d entries", n)
		for _, flag := range []string{"-f", "-l"} {
			o.say("bigdir: ls %s of %d entries", flag, n)
			dm, err := timeLs(flag, remote, n)
			if err != nil {
				return rows, fmt.Errorf("through the mount: %w", err)
			}
			dl, err := timeLs(flag, local, n)
			if err != nil {
				return rows, fmt.Errorf("on the share's directory: %w", err)
			}
			rows = append(rows,
				Row{Scenario: "bigdir", Case: c, Metric: "ls " + flag, Value: ms(dm), Unit: "ms", Ref: "local directory", RefValue: ms(dl)},
				Row{Scenario: "bigdir", Case: c, Metric: "agent RSS after ls " + flag, Value: rssMiB(ap.Pid), Unit: "MiB"},
				Row{Scenario: "bigdir", Case: c, Metric: "share RSS after ls " + flag, Value: rssMiB(sp.cmd.Process.Pid), Unit: "MiB"})
		}
	}
	// The walks, each by an agent of its own: what it keeps of the tree
	// is bounded by --meta-entries, not by the files it has seen.
	for _, bound := range []int{vfs.DefaultMetaEntries, vfs.DefaultMetaEntries / 4} {
		o.say("bigdir: walking %d files, --meta-entries %d", tree, bound)
		wp, wmnt, err := startAgentProc(e, "--meta-entries", strconv.Itoa(bound))
		if err != nil {
			return rows, err
		}
		t0 := time.Now()
		seen, err := walkStat(filepath.Join(wmnt, e.Domain, "data", "tree"))
		if err != nil {
			return rows, fmt.Errorf("walking through the mount: %w", err)
		}
		if seen != tree {
			return rows, fmt.Errorf("the walk saw %d files of %d", seen, tree)
		}
		c := fmt.Sprintf("walk of %d files", tree)
		rows = append(rows,
			Row{Scenario: "bigdir", Case: c, Metric: fmt.Sprintf("agent RSS, --meta-entries %d", bound), Value: rssMiB(wp.Pid), Unit: "MiB", Note: fmt.Sprintf("walked in %.1f s", time.Since(t0).Seconds())})
	}
	return rows, nil
}

// walkStat stats every file under dir, as find -type f and ls -lR do, and
// returns how many it saw.
func walkStat(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := d.Info(); err != nil {
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	return n, err
}

// makeEntries makes n empty files of 40-character names in a new dir.
func makeEntries(dir string, n int) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	pad := strings.Repeat("x", 26)
	for i := 0; i < n; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("entry-%07d-%s", i, pad)))
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// timeLs runs ls with flag on dir and checks that it lists n entries.
func timeLs(flag, dir string, n int) (time.Duration, error) {
	cmd := exec.Command("ls", flag, dir)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("ls %s %s: %w: %s", flag, dir, err, strings.TrimSpace(stderr.String()))
	}
	lines := 0
	for _, l := range bytes.Split(out.Bytes(), []byte("\n")) {
		// ls -f lists . and .. where the directory gives them; ls -l has a total
		if len(l) > 0 && string(l) != "." && string(l) != ".." && !bytes.HasPrefix(l, []byte("total ")) {
			lines++
		}
	}
	if lines != n {
		return 0, fmt.Errorf("ls %s %s listed %d entries, not %d", flag, dir, lines, n)
	}
	return d, nil
}

// rssMiB is the resident set of process pid, in MiB (0 if unknown).
func rssMiB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb / 1024
}

// startAgentProc runs `pando mount` as a process of its own and returns
// it and its mount point; Env.Close stops it (SIGTERM: it unmounts).
func startAgentProc(e *Env, flags ...string) (*os.Process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp(e.Dir, "agent-")
	if err != nil {
		return nil, "", err
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, "", err
	}
	args := append([]string{"--config", e.ctrl.AdminBundlePath(), "mount", "--cache-dir", filepath.Join(dir, "cache")}, flags...)
	cmd := exec.Command(self, append(args, mnt)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting an agent process (%s mount): %w", self, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.closes = append(e.closes, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			_ = exec.Command("fusermount3", "-u", "-z", mnt).Run()
		}
	})
	switch ok, timedOut := awaitLine(out, regexp.MustCompile(`pando mounted at`), 30*time.Second); {
	case timedOut:
		return nil, "", fmt.Errorf("the agent process had not mounted after 30s")
	case !ok:
		return nil, "", fmt.Errorf("the agent process exited before it mounted")
	}
	return cmd.Process, mnt, nil
}
