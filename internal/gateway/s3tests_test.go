package gateway

import (
	"bufio"
	"context"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pando.dev/pando/internal/wire"
)

// s3TestsExclusions is the marker expression users of Ceph's s3-tests
// run it with against a server that is not RGW: the features no S3
// server but RGW and AWS is expected to have.
const s3TestsExclusions = "not fails_on_rgw and not lifecycle and not versioning and not encryption and not bucket_policy" +
	" and not s3website and not sse_s3 and not tagging and not object_lock and not appendobject and not checksum" +
	" and not iam_account and not iam_user and not iam_tenant and not sns and not webidentity_test and not session_policy" +
	" and not test_of_sts and not bucket_logging"

// TestS3Tests runs Ceph's s3-tests (test_s3.py, beside the repository in
// ../shared/s3-tests, or $PANDO_S3TESTS) against the S3 front end, as a
// new user would: with the usual exclusions, buckets made over S3 below
// --buckets, the main user alice and the alt user bob. Every test that
// fails must be on the list of expected failures with its reason
// (testdata/s3tests-expected-failures.txt), and every test on the list
// must still fail: the list only shrinks.
func TestS3Tests(t *testing.T) {
	if testing.Short() {
		t.Skip("s3-tests takes minutes")
	}
	dir := os.Getenv("PANDO_S3TESTS")
	if dir == "" {
		dir, _ = filepath.Abs(filepath.Join("..", "..", "..", "shared", "s3-tests"))
	}
	if _, err := os.Stat(filepath.Join(dir, "s3tests", "functional", "test_s3.py")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("s3-tests is not at %s (set PANDO_S3TESTS)", dir)
		}
		t.Skipf("s3-tests is not at %s (set PANDO_S3TESTS)", dir)
	}
	needTool(t, "python3")
	if out, err := exec.Command("python3", "-c", "import pytest, boto3, munch, gevent, isodate, requests, pytz, httplib2, lxml, yaml").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("s3-tests' Python packages are missing (./dev test installs them with pip): %s", out)
		}
		t.Skipf("s3-tests' Python packages are missing (./dev test installs them with pip): %s", out)
	}
	expected := readExpectedFailures(t, filepath.Join("testdata", "s3tests-expected-failures.txt"))

	e := newEnv(t, false)
	os.Mkdir(filepath.Join(e.root, "s3"), 0o755)
	// Both users may make buckets (the alt user makes its own).
	if err := e.d.Client(e.d.Admin).Admin().ACLSet(context.Background(), "/d/data/s3",
		[]wire.ACLEntry{{Who: "alice", Rights: "rlidwk"}, {Who: "bob", Rights: "rlidwk"}}, false); err != nil {
		t.Fatal(err)
	}
	e.startS3Buckets(t, "/d/data/s3", true)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(e.s3url, "http://"))
	a, b := e.s3keys["alice"], e.s3keys["bob"]
	conf := filepath.Join(e.dir, "s3tests.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`[DEFAULT]
host = %[1]s
port = %[2]s
is_secure = False
ssl_verify = False
[fixtures]
bucket prefix = pando-{random}-
[s3 main]
display_name = alice
user_id = alice
email = alice@example.com
access_key = %[3]s
secret_key = %[4]s
[s3 alt]
display_name = bob
user_id = bob
email = bob@example.com
access_key = %[5]s
secret_key = %[6]s
[s3 tenant]
display_name = alice
user_id = alice
email = alice@example.com
access_key = %[3]s
secret_key = %[4]s
tenant = none
[iam]
display_name = iam
user_id = iam
email = iam@example.com
access_key = PANDONOIAM
secret_key = none
[iam root]
access_key = PANDONOIAMROOT
secret_key = none
user_id = root
email = root@example.com
[iam alt root]
access_key = PANDONOIAMALTROOT
secret_key = none
user_id = altroot
email = altroot@example.com
`, host, port, a[0], a[1], b[0], b[1])), 0o600)
	// The tenant user (tests of tenants are left out by the exclusions,
	// but every test's set-up lists its buckets) is alice again.
	junit := filepath.Join(e.dir, "s3tests.xml")
	args := []string{"-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", s3TestsExclusions,
		"--junitxml", junit, "-o", "junit_family=xunit1", "--durations=30", "s3tests/functional/test_s3.py"}
	// PANDO_S3TESTS_K runs only the tests pytest's -k selects (while
	// working on a few; the lists are then not compared).
	only := os.Getenv("PANDO_S3TESTS_K")
	if only != "" {
		args = append(args, "-k", only)
	}
	cmd := exec.Command("python3", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "S3TEST_CONF="+conf, "PYTHONDONTWRITEBYTECODE=1")
	out, _ := cmd.CombinedOutput()
	// PANDO_S3TESTS_OUT keeps pytest's output and results there.
	if keep := os.Getenv("PANDO_S3TESTS_OUT"); keep != "" {
		os.WriteFile(keep+".log", out, 0o644)
		if b, err := os.ReadFile(junit); err == nil {
			os.WriteFile(keep+".xml", b, 0o644)
		}
	}
	results := readJUnit(t, junit, out)
	if only != "" {
		t.Logf("-k %s:\n%s", only, tail(string(out), 200))
		return
	}

	var passed, failed, skipped []string
	for _, r := range results {
		switch r.outcome {
		case "passed":
			passed = append(passed, r.name)
		case "skipped":
			skipped = append(skipped, r.name)
		default:
			failed = append(failed, r.name)
		}
	}
	t.Logf("s3-tests test_s3.py with the usual exclusions: %d selected, %d passed, %d failed, %d skipped; %d on the list of expected failures",
		len(results), len(passed), len(failed), len(skipped), len(expected))
	for _, name := range failed {
		if _, ok := expected[name]; !ok {
			t.Errorf("%s failed, and is not on the list of expected failures", name)
		}
	}
	for _, name := range passed {
		if _, ok := expected[name]; ok {
			t.Errorf("%s passes now: take it off testdata/s3tests-expected-failures.txt", name)
		}
	}
	if t.Failed() {
		t.Logf("pytest's output (last lines):\n%s", tail(string(out), 60))
	}
}

type junitCase struct {
	name, outcome string
}

// readJUnit reads pytest's JUnit XML: each test case and its outcome.
func readJUnit(t *testing.T, file string, out []byte) []junitCase {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("pytest wrote no results (%v):\n%s", err, tail(string(out), 40))
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("pytest's results: %v", err)
	}
	var res []junitCase
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			o := "passed"
			switch {
			case c.Failure != nil || c.Error != nil:
				o = "failed"
			case c.Skipped != nil:
				o = "skipped"
			}
			res = append(res, junitCase{c.Name, o})
		}
	}
	if len(res) < 100 && os.Getenv("PANDO_S3TESTS_K") == "" {
		t.Fatalf("pytest ran %d tests of s3-tests:\n%s", len(res), tail(string(out), 40))
	}
	return res
}

// readExpectedFailures reads a list of tests expected to fail: a test's
// name, then its reason after " # ", a line each; # begins a comment
// line. Every entry must give its reason.
func readExpectedFailures(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, why, _ := strings.Cut(line, " # ")
		name, why = strings.TrimSpace(name), strings.TrimSpace(why)
		if why == "" {
			t.Errorf("%s:%d: %s has no reason", file, n, name)
		}
		if _, dup := m[name]; dup {
			t.Errorf("%s:%d: %s is listed twice", file, n, name)
		}
		m[name] = why
	}
	return m
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
