package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// agentProc is a `pando mount` process.
type agentProc struct {
	*proc
	dir, cacheDir string
	baseFDs       int
}

// mountAgent starts `pando mount` on a new directory and registers a
// teardown that unmounts it and checks that nothing leaked.
func mountAgent(t *testing.T, cfg string, extra ...string) *agentProc {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "mnt")
	cache := filepath.Join(base, "cache")
	os.MkdirAll(dir, 0o755)
	args := append([]string{"--config", cfg, "mount", "--cache-dir", cache}, extra...)
	args = append(args, dir)
	p, _ := start(t, `pando mounted at`, nil, args...)
	a := &agentProc{proc: p, dir: dir, cacheDir: cache}
	t.Cleanup(func() { a.unmount(t) })
	return a
}

// fdCount counts the descriptors that a leak would add: files and
// sockets. Pipes (go-fuse's splice pool) and the runtime's cgroup files
// come and go on their own.
func fdCount(pid int) int {
	n := 0
	for _, t := range fdTargets(pid) {
		if !strings.HasPrefix(t, "pipe:") && !strings.HasPrefix(t, "/sys/fs/cgroup") && !strings.HasPrefix(t, "anon_inode:") {
			n++
		}
	}
	return n
}

func fdTargets(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		t, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, t)
	}
	return out
}

func mounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

// settle warms the agent up (connections to the share, data channels)
// with a write and a read below dir, and records its descriptor count.
func (a *agentProc) settle(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, ".warmup")
	if err := os.WriteFile(p, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	a.baseFDs = fdCount(a.cmd.Process.Pid)
}

// stats asks the running agent for its counters.
func (a *agentProc) stats(t *testing.T) map[string]any {
	t.Helper()
	out, err := exec.Command(pandoBin, "stats", "--json", "--cache-dir", a.cacheDir).Output()
	if err != nil {
		t.Fatalf("pando stats: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// unmount stops the agent and checks for leaks: open handles, descriptors,
// the mount itself, the process.
func (a *agentProc) unmount(t *testing.T) {
	select {
	case <-a.done:
		return
	default:
	}
	// The kernel sends a file's release after its last close has
	// returned, in the background: give it a moment.
	var open float64
	waitFor(3*time.Second, func() bool { open = a.stats(t)["open_files"].(float64); return open == 0 })
	if open != 0 {
		t.Errorf("agent holds %v open files after the test closed all of its", open)
	}
	if a.baseFDs > 0 {
		if n := fdCount(a.cmd.Process.Pid); n > a.baseFDs+4 {
			t.Errorf("agent descriptors grew from %d to %d: %v", a.baseFDs, n, fdTargets(a.cmd.Process.Pid))
		}
	}
	a.stop(t)
	if mounted(a.dir) {
		t.Errorf("%s is still mounted after the agent stopped", a.dir)
		syscall.Unmount(a.dir, syscall.MNT_DETACH)
	}
}

// TestPosix runs go-fuse's POSIX conformance suite against a pando mount.
func TestPosix(t *testing.T) {
	d := newDomain(t, "uva")
	d.addShare("alpha")
	// XAttrLarge sets a value of 8 KiB, more than ext4 holds for a file
	// (about a block's worth of attributes): it runs on a share over a
	// tmpfs, which holds values of 64 KiB.
	unsupported := maps.Clone(posixUnsupported)
	if mountTmpfs(t, filepath.Join(d.dir, "export-big"), "size=64m") {
		d.addShare("big")
	} else {
		unsupported["XAttrLarge"] = "needs a share over a tmpfs, which only root can mount"
	}
	for _, mode := range []string{"close", "through", "back"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--write", mode}
			if mode == "back" {
				args = append(args, "--consistency", "callback") // write-back needs delegations
			}
			a := mountAgent(t, d.admin, args...)
			a.settle(t, filepath.Join(a.dir, "uva", "alpha"))
			for name, fn := range posixtest.All {
				if reason, skip := unsupported[name]; skip {
					t.Logf("%s: not run: %s", name, reason)
					continue
				}
				t.Run(name, func(t *testing.T) {
					share := "alpha"
					if name == "XAttrLarge" {
						share = "big"
					}
					if strings.HasPrefix(name, "XAttr") {
						// They skip when the file system answers ENOTSUP,
						// which would hide the attributes not travelling.
						defer func() {
							if t.Skipped() {
								t.Errorf("%s was skipped: extended attributes must work on a share that stores them", name)
							}
						}()
					}
					dir := filepath.Join(a.dir, "uva", share, mode+"-"+name)
					if err := os.Mkdir(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					fn(t, dir)
				})
			}
		})
	}
}

// posixUnsupported lists the conformance tests pando does not pass, and
// why (none now); the README repeats this list.
var posixUnsupported = map[string]string{}

type syscallStat = syscall.Stat_t

// TestMountLifecycle: the agent stops cleanly when unmounted from outside;
// a mount left by an agent that was killed is cleaned up by the next one;
// pando cache and pando stats talk to the running agent.
func TestMountLifecycle(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("content"), 0o644)

	a := mountAgent(t, d.admin)
	if got, err := os.ReadFile(filepath.Join(a.dir, "uva", "alpha", "f")); string(got) != "content" {
		t.Fatalf("read: %q %v", got, err)
	}
	ls := runPando(t, "", d.admin, "cache", "ls", "--cache-dir", a.cacheDir).ok().stdout
	if !strings.Contains(ls, "/uva/alpha/f") {
		t.Errorf("cache ls:\n%s", ls)
	}
	st := runPando(t, "", d.admin, "stats", "--cache-dir", a.cacheDir).ok().stdout
	// A file this small comes with its open: one fetch, no read request.
	for _, want := range []string{"consistency window=3s", "getattr", "open", "1 blocks fetched (7 B)"} {
		if !strings.Contains(st, want) {
			t.Errorf("stats lacks %q:\n%s", want, st)
		}
	}
	if out := runPando(t, "", d.admin, "cache", "drop", "/uva/alpha", "--cache-dir", a.cacheDir).ok().stdout; !strings.Contains(out, "dropped 1") {
		t.Errorf("cache drop: %s", out)
	}

	// Unmounted from outside: the agent notices and exits by itself.
	if out, err := exec.Command("fusermount3", "-u", a.dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, out)
	}
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not exit after fusermount3 -u")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("agent exit code %d after an outside unmount:\n%s", code, a.output())
	}

	// An agent killed outright leaves a dead mount; the next one cleans up.
	b := mountAgent(t, d.admin)
	b.cmd.Process.Kill()
	<-b.done
	if _, err := os.Stat(filepath.Join(b.dir, "uva")); err == nil {
		t.Fatal("the mount of a killed agent still answers")
	}
	p, _ := start(t, `pando mounted at`, nil, "--config", d.admin, "mount", "--cache-dir", b.cacheDir, b.dir)
	c := &agentProc{proc: p, dir: b.dir, cacheDir: b.cacheDir}
	t.Cleanup(func() { c.unmount(t) })
	if got, err := os.ReadFile(filepath.Join(b.dir, "uva", "alpha", "f")); string(got) != "content" {
		t.Fatalf("read after cleaning up a dead mount: %q %v", got, err)
	}
}
