package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
)

// pandoBin is the binary under test, built once by TestMain.
var pandoBin string

func TestMain(m *testing.M) {
	if runWorkerFromEnv() || runLocalUserFromEnv() {
		os.Exit(0)
	}
	// Every agent the tests start overwrites the cache's buffers as it
	// frees them: bytes read after they were given back show as poison.
	os.Setenv("PANDO_POISON_FREED", "1")
	dir, err := os.MkdirTemp("", "pando-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pandoBin = filepath.Join(dir, "pando")
	build := exec.Command("go", "build", "-o", pandoBin, "pando.dev/pando/cmd/pando")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building pando:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a pando server process started by a test.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	mu   sync.Mutex
	done chan struct{}
}

// start runs the binary with args and waits until a line of its standard
// output matches ready; it returns the process and the submatches.
func start(t *testing.T, ready string, env []string, args ...string) (*proc, []string) {
	t.Helper()
	return startIn(t, nil, ready, env, args...)
}

// startIn is start with the binary run by the command prefix (nsenter into
// a network namespace, say); nil runs it directly.
func startIn(t *testing.T, prefix []string, ready string, env []string, args ...string) (*proc, []string) {
	t.Helper()
	argv := append(append(slices.Clone(prefix), pandoBin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{p: p}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(t) })
	re := regexp.MustCompile(ready)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			if m := re.FindStringSubmatch(line); m != nil && !sent {
				found <- m
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		close(found)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case m, ok := <-found:
		if !ok {
			<-p.done
			t.Fatalf("pando %s exited before it was ready:\n%s", strings.Join(args, " "), p.output())
		}
		return p, m
	case <-time.After(30 * time.Second):
		t.Fatalf("pando %s not ready after 30s:\n%s", strings.Join(args, " "), p.output())
	}
	return nil, nil
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop ends the process with SIGTERM (SIGKILL after 10 s) and checks it
// exited cleanly.
func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("pando %v ignored SIGTERM for 10s:\n%s", p.cmd.Args[1:], p.output())
	}
}

// domain is a controller and its shares, each its own process.
type domain struct {
	t      *testing.T
	name   string
	dir    string
	admin  string // path of the admin's configuration
	ctrl   *proc
	addr   string
	roots  map[string]string
	shares map[string]*proc
	site   *site // the network namespace its servers run in (nil: the test's)
}

// newDomain starts a controller for a new domain.
func newDomain(t *testing.T, name string, extra ...string) *domain {
	t.Helper()
	dir := t.TempDir()
	d := &domain{t: t, name: name, dir: dir, roots: map[string]string{}, shares: map[string]*proc{}}
	args := append([]string{"controller", "--state", filepath.Join(dir, "controller"), "--domain", name, "--listen", "127.0.0.1:0"}, extra...)
	var m []string
	d.ctrl, m = start(t, `listening on (\S+)`, nil, args...)
	d.addr = m[1]
	d.admin = filepath.Join(dir, "controller", "admin.json")
	return d
}

// addShare starts a share process exporting a new directory and mounts it
// at /<domain>/<name>.
func (d *domain) addShare(name string) string {
	d.t.Helper()
	root := filepath.Join(d.dir, "export-"+name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		d.t.Fatal(err)
	}
	d.roots[name] = root
	d.startShare(name)
	d.pando(d.admin, "ns", "mount", "/"+d.name+"/"+name, name).ok()
	return root
}

// mountTmpfs mounts a tmpfs with options (such as size=8m) on dir, until
// the test ends. It needs root: elsewhere than in CI, it reports false
// when it cannot.
func mountTmpfs(t *testing.T, dir, options string) bool {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", options, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs: %v: %s", err, out)
		}
		t.Logf("cannot mount a tmpfs here (%v: %s)", err, out)
		return false
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return true
}

// startShare starts (or restarts) the share process of name, with env
// added to its environment.
func (d *domain) startShare(name string, env ...string) {
	d.t.Helper()
	var prefix []string
	listen := "127.0.0.1:0"
	if d.site != nil {
		prefix, listen = d.site.nsenter(), d.site.addr+":0"
	}
	p, _ := startIn(d.t, prefix, `share \S+ exporting`, env, "share", "--config", d.admin, "--root", d.roots[name], "--name", name,
		"--listen", listen, "--state", filepath.Join(d.dir, "share-state"))
	d.shares[name] = p
}

// result is the outcome of one CLI run.
type result struct {
	t              *testing.T
	args           []string
	stdout, stderr string
	code           int
}

func (r result) ok() result {
	r.t.Helper()
	if r.code != 0 {
		r.t.Fatalf("pando %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// fails checks that the command failed with the exit code and that its
// one-line message contains every fragment.
func (r result) fails(code int, fragments ...string) result {
	r.t.Helper()
	if r.code != code {
		r.t.Fatalf("pando %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, code, r.stdout, r.stderr)
	}
	msg := strings.TrimSpace(r.stderr)
	if strings.Count(msg, "\n") > 0 {
		r.t.Errorf("pando %s: error is more than one line:\n%s", strings.Join(r.args, " "), msg)
	}
	for _, f := range fragments {
		if !strings.Contains(msg, f) {
			r.t.Errorf("pando %s: error %q does not mention %q", strings.Join(r.args, " "), msg, f)
		}
	}
	if strings.Contains(msg, "goroutine ") || strings.Contains(msg, "*wire.") || strings.Contains(msg, "panic") {
		r.t.Errorf("pando %s: error leaks internals: %s", strings.Join(r.args, " "), msg)
	}
	return r
}

// pando runs the CLI with a configuration.
func (d *domain) pando(cfg string, args ...string) result {
	return runPando(d.t, "", cfg, args...)
}

func runPando(t *testing.T, stdin, cfg string, args ...string) result {
	t.Helper()
	return runPandoFor(t, 2*time.Minute, stdin, cfg, args...)
}

// runPandoFor is runPando with a bound other than 2 minutes (a command
// killed at it fails the test with its output).
func runPandoFor(t *testing.T, limit time.Duration, stdin, cfg string, args ...string) result {
	t.Helper()
	return runPandoIn(t, nil, limit, stdin, cfg, args...)
}

// runPandoIn is runPandoFor with the binary run by the command prefix.
func runPandoIn(t *testing.T, prefix []string, limit time.Duration, stdin, cfg string, args ...string) result {
	t.Helper()
	full := append(append(slices.Clone(prefix), pandoBin, "--config", cfg), args...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	// Killed, it may leave processes it started holding its output open:
	// do not wait for them.
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = t.TempDir()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running pando: %v", err)
	}
	return result{t: t, args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// addUser creates a user and returns the path of their bundle.
func (d *domain) addUser(name string, groups ...string) string {
	d.t.Helper()
	out := filepath.Join(d.dir, name+".json")
	args := []string{"user", "add", name, "-o", out}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	d.pando(d.admin, args...).ok()
	return out
}

// client returns an in-process client library for a configuration.
func (d *domain) client(cfgPath string) *client.Client {
	d.t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		d.t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Close() })
	return c
}
