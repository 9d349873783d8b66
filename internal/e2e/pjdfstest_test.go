package e2e

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// updatePjdfstest rewrites the lists of known pjdfstest failures with what
// a run finds, instead of comparing against them:
//
//	go test -count=1 -run TestPjdfstest ./internal/e2e/ -update-pjdfstest
var updatePjdfstest = flag.Bool("update-pjdfstest", false, "rewrite testdata/pjdfstest-known-*.txt from this run")

// pjdModes are the mounts pjdfstest runs in. Each has its list of known
// failures, testdata/pjdfstest-known-<name>.txt; subset, when set, names
// the test directories run there (the whole suite runs in the first).
var pjdModes = []struct {
	name   string
	args   []string
	subset []string
}{
	{"default", []string{"--lend-to", pjdUids}, nil},
	{"callback-back", []string{"--consistency", "callback", "--write", "back", "--lend-to", pjdUids}, nil},
}

// pjdUids are the uids pjdfstest's steps run as (its -u and -g): the
// mount is lent to them, as a mount is to the local users who share it.
const pjdUids = "65534,65533,65532,65531"

// TestPjdfstest runs the POSIX conformance suite pjdfstest as root in a
// directory of a mount, in the default mode and under callback with
// write-back. An assertion that fails and is not on the mode's list of
// known failures fails the test (a regression); a listed one that passes
// now is logged, to be taken off the list (make it with -update-pjdfstest).
// docs/posix.md says why each listed failure fails.
func TestPjdfstest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pjdfstest runs as root")
	}
	bin := buildPjdfstest(t)
	d := newDomain(t, "uva")
	d.addShare("alpha")
	for _, m := range pjdModes {
		t.Run(m.name, func(t *testing.T) {
			a := mountAgent(t, d.admin, m.args...)
			dir := filepath.Join(a.dir, "uva/alpha", "pjd-"+m.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			targets := []string{filepath.Join(bin, "tests")}
			if m.subset != nil {
				targets = nil
				for _, s := range m.subset {
					targets = append(targets, filepath.Join(bin, "tests", s))
				}
			}
			t0 := time.Now()
			res := runProve(t, dir, targets)
			failed := res.failed()
			t.Logf("pjdfstest %s: %d files, %d assertions, %d failed, in %v",
				m.name, len(res.plans), res.total(), len(failed), time.Since(t0).Round(time.Second))
			known := filepath.Join("testdata", "pjdfstest-known-"+m.name+".txt")
			if *updatePjdfstest {
				writeKnown(t, known, failed)
				return
			}
			compareKnown(t, readKnown(t, known), failed, res)
		})
	}
}

// buildPjdfstest finds pjdfstest's source beside the repository (in
// shared/pjdfstest of it or of a directory above it, or at
// $PJDFSTEST_SRC), builds it in a temporary directory and returns that
// directory: the binary and its tests/.
func buildPjdfstest(t *testing.T) string {
	t.Helper()
	src := os.Getenv("PJDFSTEST_SRC")
	if src == "" {
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err == nil {
			for dir := filepath.Dir(strings.TrimSpace(string(top))); ; dir = filepath.Dir(dir) {
				if c := filepath.Join(dir, "shared", "pjdfstest"); isFile(filepath.Join(c, "pjdfstest.c")) {
					src = c
					break
				}
				if dir == filepath.Dir(dir) {
					break
				}
			}
		}
	}
	if src == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("pjdfstest's source is not in shared/pjdfstest beside the repository; put it there or set PJDFSTEST_SRC")
		}
		t.Skip("pjdfstest's source is not in shared/pjdfstest beside the repository (or at $PJDFSTEST_SRC)")
	}
	for _, tool := range []string{"autoreconf", "automake", "prove", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			aptInstall(t, "autoconf", "automake", "perl", "gcc", "make")
			break
		}
	}
	dir := filepath.Join(t.TempDir(), "pjdfstest")
	if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
		t.Fatalf("copying pjdfstest: %v: %s", err, out)
	}
	for _, step := range [][]string{{"autoreconf", "-ifs"}, {"./configure"}, {"make", "pjdfstest"}} {
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building pjdfstest: %s: %v\n%s", strings.Join(step, " "), err, out)
		}
	}
	return dir
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// aptInstall installs packages with apt-get, as ./dev does for fuse3.
func aptInstall(t *testing.T, pkgs ...string) {
	t.Helper()
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Fatalf("pjdfstest needs %s; install them with your package manager", strings.Join(pkgs, ", "))
	}
	exec.Command("apt-get", "update", "-qq").Run()
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("installing %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
}

// proveResult is what prove -v reported: each file's plan and the
// assertions that failed in it. Files are named below tests/ (chmod/00.t).
type proveResult struct {
	plans map[string]int
	ran   map[string]int
	bad   map[string][]int
}

func (r *proveResult) total() int {
	n := 0
	for _, p := range r.plans {
		n += p
	}
	return n
}

// failed lists "file:assertion" for every assertion that failed, and for
// every planned assertion a file did not reach (it died on the way).
func (r *proveResult) failed() []string {
	var out []string
	for f, ns := range r.bad {
		for _, n := range ns {
			out = append(out, f+":"+strconv.Itoa(n))
		}
	}
	for f, p := range r.plans {
		for n := r.ran[f] + 1; n <= p; n++ {
			out = append(out, f+":"+strconv.Itoa(n))
		}
	}
	sortAssertions(out)
	return out
}

var (
	proveFile = regexp.MustCompile(`^(?:.*/)?tests/(\S+\.t) \.+`)
	tapPlan   = regexp.MustCompile(`^1\.\.(\d+)`)
	tapLine   = regexp.MustCompile(`^(ok|not ok) (\d+)`)
	// An assertion marked TODO or SKIP is no failure (TAP): pjdfstest
	// marks so what POSIX allows Linux to do otherwise.
	tapTodo = regexp.MustCompile(`#\s*(TODO|SKIP)\b`)
)

// runProve runs prove -v -r on targets from inside dir and parses its
// report.
func runProve(t *testing.T, dir string, targets []string) *proveResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "prove", append([]string{"-v", "-r", "--merge"}, targets...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("pjdfstest did not end within 20 minutes; its output ends:\n%s", tail(string(out), 40))
	}
	if os.Getenv("PANDO_PJDFSTEST_OUT") != "" {
		os.WriteFile(os.Getenv("PANDO_PJDFSTEST_OUT")+"."+filepath.Base(dir), out, 0o644)
	}
	res := parseProve(string(out))
	if len(res.plans) == 0 {
		t.Fatalf("prove ran no test file (%v); its output:\n%s", err, tail(string(out), 40))
	}
	return res
}

func parseProve(out string) *proveResult {
	res := &proveResult{plans: map[string]int{}, ran: map[string]int{}, bad: map[string][]int{}}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := proveFile.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if cur == "" {
			continue
		}
		if m := tapPlan.FindStringSubmatch(line); m != nil {
			res.plans[cur], _ = strconv.Atoi(m[1])
			continue
		}
		if m := tapLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			if n > res.ran[cur] {
				res.ran[cur] = n
			}
			if m[1] == "not ok" && !tapTodo.MatchString(line) {
				res.bad[cur] = append(res.bad[cur], n)
			}
		}
	}
	return res
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sortAssertions orders "file:n" by file, then by number.
func sortAssertions(s []string) {
	sort.Slice(s, func(i, j int) bool {
		fi, ni := splitAssertion(s[i])
		fj, nj := splitAssertion(s[j])
		if fi != fj {
			return fi < fj
		}
		return ni < nj
	})
}

func splitAssertion(s string) (string, int) {
	i := strings.LastIndexByte(s, ':')
	n, _ := strconv.Atoi(s[i+1:])
	return s[:i], n
}

func readKnown(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the known failures: %v (make the list with -update-pjdfstest)", err)
	}
	known := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			known[line] = true
		}
	}
	return known
}

func writeKnown(t *testing.T, path string, failed []string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# pjdfstest assertions known to fail here, file:assertion; docs/posix.md says why.\n")
	b.WriteString("# Made by go test -run TestPjdfstest ./internal/e2e/ -update-pjdfstest; it only shrinks.\n")
	for _, f := range failed {
		b.WriteString(f + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d known failures to %s", len(failed), path)
}

// compareKnown fails the test for each failure not on the known list and
// logs the listed ones that pass now.
func compareKnown(t *testing.T, known map[string]bool, failed []string, res *proveResult) {
	t.Helper()
	now := map[string]bool{}
	var regressions []string
	for _, f := range failed {
		now[f] = true
		if !known[f] {
			regressions = append(regressions, f)
		}
	}
	var fixed []string
	for k := range known {
		f, _ := splitAssertion(k)
		if _, ran := res.plans[f]; ran && !now[k] {
			fixed = append(fixed, k)
		}
	}
	sortAssertions(fixed)
	if len(fixed) > 0 {
		t.Logf("%d known failures pass now; take them off the list (-update-pjdfstest): %s",
			len(fixed), strings.Join(fixed, " "))
	}
	if len(regressions) > 0 {
		t.Errorf("%d pjdfstest assertions fail that passed before: %s", len(regressions), strings.Join(regressions, " "))
	}
}

// TestParseProve: prove's verbose report is read as each file's plan and
// failed assertions; a TODO is no failure; planned assertions a file did
// not reach are failures.
func TestParseProve(t *testing.T) {
	out := `/tmp/x/pjdfstest/tests/chmod/00.t ........
1..4
ok 1
not ok 2 - tried 'mkfifo a 0644', expected 0, got EOPNOTSUPP
ok 3
not ok 4 # TODO According to POSIX: EPERM
ok
/tmp/x/pjdfstest/tests/mknod/01.t ........
1..5
not ok 1 - tried 'mknod b', expected 0, got EPERM
ok 2
Failed 4/5 subtests
`
	res := parseProve(out)
	got := strings.Join(res.failed(), " ")
	want := "chmod/00.t:2 mknod/01.t:1 mknod/01.t:3 mknod/01.t:4 mknod/01.t:5"
	if got != want || res.total() != 9 {
		t.Errorf("parsed %q of %d assertions, want %q of 9", got, res.total(), want)
	}
}
