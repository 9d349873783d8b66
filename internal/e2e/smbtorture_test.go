package e2e

import (
	"bufio"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/testenv"
)

// smbtortureSuites are the suites of Samba's smbtorture that
// TestSMBTorture runs against an exported folder, each bounded by its
// time limit (on two shared cores; the whole run stays within ~5 min).
var smbtortureSuites = []struct {
	name  string
	limit time.Duration
}{
	{"smb2.connect", 30 * time.Second},
	{"smb2.read", 30 * time.Second},
	{"smb2.create", 60 * time.Second},
	{"smb2.dir", 180 * time.Second},
	{"smb2.rename", 30 * time.Second},
	{"smb2.lock", 60 * time.Second},
	{"smb2.getinfo", 30 * time.Second},
	{"smb2.setinfo", 30 * time.Second},
}

// smbtortureExpected is the list of subtests known to fail, each with
// its reason; the list only shrinks.
const smbtortureExpected = "testdata/smbtorture-expected-failures.txt"

// TestSMBTorture checks that a file or folder made, a mount removed or
// renamed at the domain share's root is refused as Windows refuses it
// (NT_STATUS_ACCESS_DENIED, NT_STATUS_NOT_SAME_DEVICE), and runs
// smbtorture (Debian's samba-testsuite, --target=samba3) against pando
// serve smb --export data=/d/data, as alice with her password: every
// subtest passes but those of the list of expected failures, each of
// which fails. A subtest that fails off the list, one
// on the list that passes (take it off), a suite that ends before its
// subtests are done or that outlives its limit, fail the test.
func TestSMBTorture(t *testing.T) {
	if _, err := exec.LookPath("smbtorture"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("smbtorture is not installed (./dev test installs samba-testsuite)")
		}
		t.Skip("smbtorture is not installed (./dev test installs samba-testsuite)")
	}
	expected := readExpectedFailures(t, smbtortureExpected)
	d := newDomain(t, "d")
	root := d.addShare("data")
	d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwka").ok()
	s := startSMBWith(t, d, []string{"--export", "data=/d/data"}, "alice:alice-password")
	said := func() bool { return strings.Contains(s.p.output(), "smb share /d/data at smb://"+s.addr+"/data\n") }
	if !waitFor(5*time.Second, said) {
		t.Fatalf("pando serve smb does not say where /d/data is served:\n%s", s.p.output())
	}
	// The domain's share: its root holds the domain's mounts, not
	// files; what cannot be done there is refused with the status
	// Windows gives, and nothing changes.
	os.WriteFile(filepath.Join(s.work, "f.txt"), []byte("f\n"), 0o644)
	before := testenv.Tree(t, root)
	for c, want := range map[string]string{`put f.txt new.txt`: "NT_STATUS_ACCESS_DENIED", `mkdir newdir`: "NT_STATUS_ACCESS_DENIED",
		`rmdir data`: "NT_STATUS_ACCESS_DENIED", `rename data moved`: "NT_STATUS_NOT_SAME_DEVICE"} {
		if out := s.client("alice%alice-password", c); !strings.Contains(out, want) {
			t.Errorf("%s at the domain share's root: %s, want %s", c, strings.TrimSpace(out), want)
		}
	}
	if after := testenv.Tree(t, root); !maps.Equal(before, after) {
		t.Errorf("refused changes at the domain share's root changed the share")
	}
	host, port, _ := strings.Cut(s.addr, ":")
	seen := map[string]bool{}
	for _, suite := range smbtortureSuites {
		ctx, cancel := context.WithTimeout(context.Background(), suite.limit)
		cmd := exec.CommandContext(ctx, "smbtorture", "//"+host+"/data", "-p", port, "-U", "alice%alice-password",
			"--client-protection=encrypt", "--target=samba3", "--format=subunit", "--fullname", suite.name)
		cmd.Dir = s.work
		start := time.Now()
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		results := subunitResults(string(out))
		ran := map[string]bool{}
		var pass, fail, skip []string
		for _, r := range results {
			seen[r.name], ran[r.name] = true, true
			why, listed := expected[r.name]
			switch r.status {
			case "success", "xfail":
				pass = append(pass, r.name)
				if listed {
					t.Errorf("%s passes now, but is on %s (%s): take it off", r.name, smbtortureExpected, why)
				}
			case "skip":
				skip = append(skip, r.name)
				why, _, _ := strings.Cut(strings.TrimSpace(r.detail), "\n")
				t.Logf("%s skipped by smbtorture: %s", r.name, why)
			default:
				fail = append(fail, r.name)
				if !listed {
					t.Errorf("%s: %s, and it is not on %s:\n%s", r.name, r.status, smbtortureExpected, r.detail)
				}
			}
		}
		t.Logf("%-13s %3d passed, %3d failed, %2d skipped, %s", suite.name, len(pass), len(fail), len(skip), time.Since(start).Round(time.Second))
		if timedOut {
			t.Errorf("%s did not end within %s:\n%s", suite.name, suite.limit, tail(string(out), 20))
		} else if len(results) == 0 {
			t.Errorf("%s reported no subtest (%v):\n%s", suite.name, err, tail(string(out), 20))
		}
		for _, name := range tortureList(t, suite.name) {
			if !ran[name] {
				t.Errorf("%s has no outcome: smbtorture lists it in %s but did not report it", name, suite.name)
			}
		}
	}
	for name, why := range expected {
		if !seen[name] {
			t.Errorf("%s is on %s (%s) but did not run: take it off", name, smbtortureExpected, why)
		}
	}
}

// tortureList names the subtests of suite as smbtorture reports them:
// --list gives each as TESTCASE.TEST, whose outcome is TESTCASE's.
func tortureList(t *testing.T, suite string) []string {
	t.Helper()
	out, err := exec.Command("smbtorture", "--fullname", "--list", suite).Output()
	if err != nil {
		t.Fatalf("smbtorture --list %s: %v", suite, err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.LastIndexByte(line, '.'); i > 0 && strings.HasPrefix(line, suite+".") {
			names = append(names, line[:i])
		}
	}
	if len(names) == 0 {
		t.Fatalf("smbtorture --list %s names no subtest:\n%s", suite, out)
	}
	return names
}

// tortureResult is a subtest's outcome in smbtorture's subunit output.
type tortureResult struct {
	name, status, detail string
}

// subunitResults reads the outcomes of subunit (v1) output: "success:
// NAME", "failure: NAME [", detail lines, "]", and the same for error,
// skip and xfail. A subtest begun ("test: NAME") with no outcome is an
// error.
func subunitResults(out string) []tortureResult {
	var rs []tortureResult
	begun := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kw, rest, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		if kw == "test" {
			begun[strings.TrimSpace(rest)] = true
			continue
		}
		if !slices.Contains([]string{"success", "successful", "failure", "error", "skip", "xfail", "uxsuccess"}, kw) {
			continue
		}
		name, block := strings.CutSuffix(strings.TrimSpace(rest), " [")
		name, _, _ = strings.Cut(name, " [")
		var detail strings.Builder
		if block {
			for sc.Scan() && sc.Text() != "]" {
				detail.WriteString(sc.Text() + "\n")
			}
		}
		if kw == "successful" {
			kw = "success"
		}
		if !begun[name] {
			continue // a suite's own outcome, not a subtest's
		}
		delete(begun, name)
		rs = append(rs, tortureResult{name: name, status: kw, detail: detail.String()})
	}
	for name := range begun {
		rs = append(rs, tortureResult{name: name, status: "error", detail: "no outcome: smbtorture ended or was stopped during it"})
	}
	return rs
}

// readExpectedFailures reads a list of subtests known to fail: "NAME
// reason" a line, # comments. A line without its reason fails the test.
func readExpectedFailures(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, why, _ := strings.Cut(line, " ")
		if strings.TrimSpace(why) == "" {
			t.Fatalf("%s:%d: %s has no reason", filepath.Base(file), i+1, name)
		}
		if _, dup := m[name]; dup {
			t.Fatalf("%s:%d: %s is listed twice", filepath.Base(file), i+1, name)
		}
		m[name] = strings.TrimSpace(why)
	}
	return m
}
