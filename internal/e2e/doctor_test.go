package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runDoctor runs pando doctor with the configuration and extra
// environment (which replaces variables of the same name).
func runDoctor(t *testing.T, cfg string, env ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pandoBin, "--config", cfg, "doctor", "--cache-dir", t.TempDir())
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running pando doctor: %v", err)
	}
	return out.String(), errb.String(), code
}

// doctorLines maps each check's name to its status and message.
func doctorLines(t *testing.T, out string) map[string][2]string {
	t.Helper()
	m := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("doctor line %q: want STATUS CHECK MESSAGE", line)
		}
		name := f[1]
		if name == "share" {
			name += " " + f[2]
		}
		m[name] = [2]string{f[0], line}
	}
	return m
}

// TestDoctor: on a healthy domain every check of pando doctor is ok; with
// the share stopped, or fusermount3 missing from PATH, it fails and the
// line names the share, or fusermount3 and how to install it.
func TestDoctor(t *testing.T) {
	d := newDomain(t, "doc")
	d.addShare("data")

	out, errOut, code := runDoctor(t, d.admin)
	if code != 0 {
		t.Fatalf("doctor on a healthy domain: exit %d\n%s%s", code, out, errOut)
	}
	lines := doctorLines(t, out)
	for _, c := range []string{"fuse", "fusermount3", "passthrough", "cache-dir", "config", "certificate", "controller", "clock", "share data"} {
		l, ok := lines[c]
		if !ok {
			t.Errorf("doctor printed no %s check:\n%s", c, out)
			continue
		}
		// Passthrough depends on the kernel: older than 6.9 is a
		// warning, not a failure.
		if l[0] != "ok" && !(c == "passthrough" && l[0] == "warn" && strings.Contains(l[1], "needs")) {
			t.Errorf("doctor on a healthy domain: %s", l[1])
		}
	}
	if len(lines) != 9 {
		t.Errorf("doctor printed %d checks, want 9:\n%s", len(lines), out)
	}

	// fusermount3 missing from PATH: an empty directory is all of it.
	out, errOut, code = runDoctor(t, d.admin, "PATH="+t.TempDir())
	if code != 1 {
		t.Fatalf("doctor without fusermount3: exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines = doctorLines(t, out)
	if l := lines["fusermount3"]; l[0] != "FAIL" || !strings.Contains(l[1], "apt-get install fuse3") {
		t.Errorf("doctor without fusermount3 in PATH: %q, want a FAIL that says apt-get install fuse3", l[1])
	}
	if l := lines["share data"]; l[0] != "ok" {
		t.Errorf("doctor without fusermount3: the share check changed: %s", l[1])
	}
	if !strings.Contains(errOut, "1 of 9 checks failed") {
		t.Errorf("doctor's error: %q, want it to count 1 of 9 failed", errOut)
	}

	// The share stopped.
	d.shares["data"].stop(t)
	out, errOut, code = runDoctor(t, d.admin)
	t.Logf("doctor with the share stopped:\n%s", out)
	if code != 1 {
		t.Fatalf("doctor with the share stopped: exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines = doctorLines(t, out)
	if l := lines["share data"]; l[0] != "FAIL" || !strings.Contains(l[1], "share data") || !strings.Contains(l[1], "start it again") {
		t.Errorf("doctor with the share stopped: %q, want a FAIL naming share data and saying to start it", l[1])
	}
	for _, c := range []string{"controller", "clock", "fusermount3", "certificate"} {
		if l := lines[c]; l[0] != "ok" {
			t.Errorf("doctor with the share stopped: %s", l[1])
		}
	}
}

// TestDoctorNoConfig: without a configuration, doctor still checks this
// machine, fails the configuration check with the way to get one, and
// skips the checks of the domain; it writes nothing.
func TestDoctorNoConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := dir + "/none.json"
	out, errOut, code := runDoctor(t, cfg)
	if code != 1 {
		t.Fatalf("doctor without a configuration: exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines := doctorLines(t, out)
	if l := lines["config"]; l[0] != "FAIL" || !strings.Contains(l[1], cfg) || !strings.Contains(l[1], "pando up") {
		t.Errorf("config check: %q, want a FAIL naming %s and pando up", l[1], cfg)
	}
	for _, c := range []string{"certificate", "controller", "clock"} {
		if l := lines[c]; l[0] != "skip" {
			t.Errorf("%s check without a configuration: %q, want skip", c, l[1])
		}
	}
	if l := lines["fuse"]; l[0] != "ok" {
		t.Errorf("fuse check without a configuration: %q", l[1])
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("doctor wrote %d files", len(ents))
	}
}
