package e2e

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Faults at a share: killed (connections refused) or frozen (SIGSTOP: a
// silent partition). Bounds from the issue: a cached file reads within
// 1 s plus a round trip (here on loopback, the round trip is nothing;
// faultSlack allows for a loaded machine); an uncached one fails within
// 5 s with EHOSTUNREACH; with the share frozen, the second operation
// answers within 1 s, and kill -9 ends a blocked reader within 1 s.
const faultSlack = 250 * time.Millisecond

// signal sends sig to a share or agent process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// freeze stops p (SIGSTOP) until thaw, or the end of the test.
func (p *proc) freeze(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
}

// faultFiles are the files a fault test reads: small and larger cached
// ones, and one not cached (larger than what listings bring along).
type faultFiles struct {
	dir     string // the share's directory through the mount
	root    string // the same directory at the share
	content map[string][]byte
}

func newFaultFiles(t *testing.T, root, mnt string) *faultFiles {
	t.Helper()
	ff := &faultFiles{dir: mnt, root: root, content: map[string][]byte{}}
	for i, size := range []int{100, 5000, 70 << 10, 3 << 20, 1 << 20} {
		b := make([]byte, size)
		rand.Read(b)
		name := "f" + strconv.Itoa(i)
		if i == 4 {
			name = "uncached"
		}
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		ff.content[name] = b
	}
	return ff
}

// warm reads the cached files and lists the directory through the mount.
func (ff *faultFiles) warm(t *testing.T) []string {
	t.Helper()
	names := ff.list(t)
	for name, want := range ff.content {
		if name == "uncached" {
			continue
		}
		got, err := os.ReadFile(filepath.Join(ff.dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("reading %s with the share up: %v (%d bytes of %d)", name, err, len(got), len(want))
		}
	}
	return names
}

func (ff *faultFiles) list(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(ff.dir)
	if err != nil {
		t.Fatalf("listing %s: %v", ff.dir, err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// readCached reads a cached file through the mount and checks its bytes;
// it returns how long that took and the error, if any.
func (ff *faultFiles) readCached(t *testing.T, name string) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	got, err := os.ReadFile(filepath.Join(ff.dir, name))
	took := time.Since(start)
	if err == nil && !bytes.Equal(got, ff.content[name]) {
		t.Fatalf("%s read with the share down: %d bytes, not the %d cached", name, len(got), len(ff.content[name]))
	}
	return took, err
}

// readUncached reads the file that is not cached, which must fail with
// EHOSTUNREACH; it returns how long that took.
func (ff *faultFiles) readUncached(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := os.ReadFile(filepath.Join(ff.dir, "uncached"))
	took := time.Since(start)
	if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("reading a file not cached with the share down: %v, want EHOSTUNREACH", err)
	}
	return took
}

// staleAge reads user.pando.stale of a path through the mount.
func staleAge(p string) (int, error) {
	buf := make([]byte, 64)
	n, err := unix.Getxattr(p, "user.pando.stale", buf)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(buf[:n]))
}

var faultModes = []struct {
	name  string
	args  []string
	serve bool // cached data is served while the share is down
}{
	{"window", []string{"--consistency", "window=1s"}, true},
	{"poll", []string{"--consistency", "poll=1s"}, true},
	{"callback", []string{"--consistency", "callback", "--write", "back"}, true},
	{"strict", []string{"--consistency", "strict"}, false},
	{"offline-fail", []string{"--consistency", "window=1s", "--offline", "fail"}, false},
}

// checkDown checks what a mount gives while its share is down: cached
// files and listings (or, where cached data is not served, an error at
// once), the stale attribute, uncached reads and writes that fail.
func checkDown(t *testing.T, ff *faultFiles, names []string, serve bool, bound time.Duration) {
	t.Helper()
	for _, name := range []string{"f1", "f3", "f0", "f2"} {
		took, err := ff.readCached(t, name)
		switch {
		case serve && err != nil:
			t.Fatalf("cached %s with the share down: %v (after %v)", name, err, took)
		case !serve && !errors.Is(err, syscall.EHOSTUNREACH):
			t.Fatalf("cached %s with the share down, not to be served: %v, want EHOSTUNREACH", name, err)
		}
		if took > bound {
			t.Errorf("cached %s with the share down answered in %v, more than %v", name, took, bound)
		}
		t.Logf("cached %s: %v (err %v)", name, took, err)
	}
	if serve {
		if got := ff.list(t); !slices.Equal(got, names) {
			t.Errorf("cached listing with the share down: %v, want %v", got, names)
		}
		age, err := staleAge(filepath.Join(ff.dir, "f1"))
		if err != nil || age < 1 {
			t.Errorf("user.pando.stale of a cached file with the share down: %d, %v; want an age of a second or more", age, err)
		}
	} else if _, err := os.ReadDir(ff.dir); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("listing with the share down, cached data not to be served: %v, want EHOSTUNREACH", err)
	}
	if took := ff.readUncached(t); took > 5*time.Second {
		t.Errorf("a read of a file not cached failed after %v, more than 5s", took)
	}
	// Writes are refused at once, and change nothing.
	start := time.Now()
	err := os.WriteFile(filepath.Join(ff.dir, "f0"), []byte("overwritten"), 0o644)
	if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("writing a cached file with the share down: %v, want EHOSTUNREACH", err)
	}
	if err := os.WriteFile(filepath.Join(ff.dir, "new"), []byte("x"), 0o644); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("creating a file with the share down: %v, want EHOSTUNREACH", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("refused writes took %v", took)
	}
	if serve {
		if _, err := ff.readCached(t, "f0"); err != nil {
			t.Errorf("f0 after a refused write: %v", err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ff.root, "f0")); !bytes.Equal(b, ff.content["f0"]) {
		t.Errorf("f0 at the share changed after a refused write")
	}
}

// TestShareKilled: with the share killed, cached files and listings stay
// readable in every mode but strict (and --offline=fail), marked stale;
// what is not cached, and writes, fail at once with EHOSTUNREACH.
func TestShareKilled(t *testing.T) {
	for _, m := range faultModes {
		t.Run(m.name, func(t *testing.T) {
			d := newDomain(t, "uva")
			root := d.addShare("alpha")
			a := mountAgent(t, d.admin, m.args...)
			ff := newFaultFiles(t, root, filepath.Join(a.dir, "uva", "alpha"))
			names := ff.warm(t)

			d.shares["alpha"].signal(t, syscall.SIGKILL)
			<-d.shares["alpha"].done
			time.Sleep(1500 * time.Millisecond) // past the window and the poll period: revalidation is due
			checkDown(t, ff, names, m.serve, time.Second+faultSlack)

			st := a.stats(t)
			shares, _ := st["shares"].([]any)
			found := false
			for _, s := range shares {
				s := s.(map[string]any)
				if s["share"] == "alpha" && s["up"] == false && s["last_error"] != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("pando stats does not show share alpha down: %v", st["shares"])
			}
			metrics, err := exec.Command(pandoBin, "stats", "--metrics", "--cache-dir", a.cacheDir).Output()
			if err != nil || !strings.Contains(string(metrics), `pando_share_up{share="alpha"} 0`) {
				t.Errorf("/metrics does not show share alpha down (%v):\n%s", err, metrics)
			}
			if n := strings.Count(a.output(), "share unreachable"); n != 1 {
				t.Errorf("the agent logged %d lines for one outage, want 1:\n%s", n, a.output())
			}
		})
	}
}

// TestShareFrozen: a share that stops answering (SIGSTOP) is found out
// within its detection time; from then on every operation answers at once
// (from the cache, or with EHOSTUNREACH); a reader blocked meanwhile can
// be killed; and when the share answers again the mount reads fresh data
// within seconds.
func TestShareFrozen(t *testing.T) {
	for _, m := range faultModes {
		t.Run(m.name, func(t *testing.T) {
			d := newDomain(t, "uva")
			root := d.addShare("alpha")
			a := mountAgent(t, d.admin, m.args...)
			ff := newFaultFiles(t, root, filepath.Join(a.dir, "uva", "alpha"))
			names := ff.warm(t)
			time.Sleep(1500 * time.Millisecond) // revalidation is due

			share := d.shares["alpha"]
			share.freeze(t)
			frozen := time.Now()
			// A reader of the file not cached blocks until the share is
			// found out; kill -9 ends it at once.
			cat := exec.Command("cat", filepath.Join(ff.dir, "uncached"))
			if err := cat.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = cat.Wait(); close(exited) }()
			time.Sleep(300 * time.Millisecond)
			select {
			case <-exited:
				t.Logf("the reader ended before it was killed (%v after the freeze)", time.Since(frozen))
			default:
				killed := time.Now()
				_ = cat.Process.Kill()
				select {
				case <-exited:
					t.Logf("kill -9 ended the blocked reader in %v", time.Since(killed))
					if took := time.Since(killed); took > time.Second+faultSlack {
						t.Errorf("kill -9 ended a blocked reader after %v, more than 1s", took)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("kill -9 did not end a reader blocked on a frozen share in 30s")
				}
			}

			// The first operations may take the detection time; three at
			// once are answered together, not one after another.
			type answer struct {
				took time.Duration
				err  error
			}
			answers := make(chan answer, 3)
			for _, name := range []string{"f0", "f2", "f3"} {
				go func() {
					took, err := ff.readCached(t, name)
					answers <- answer{took, err}
				}()
			}
			var first, last time.Duration
			for i := range 3 {
				an := <-answers
				if m.serve && an.err != nil || !m.serve && !errors.Is(an.err, syscall.EHOSTUNREACH) {
					t.Fatalf("first reads of cached files with the share frozen: %v", an.err)
				}
				if i == 0 {
					first = an.took
				}
				last = an.took
			}
			t.Logf("three first operations with the share frozen answered after %v to %v (%v after the freeze)", first, last, time.Since(frozen))
			if last > 10*time.Second {
				t.Errorf("the first operations with the share frozen took up to %v", last)
			}
			if last-first > time.Second {
				t.Errorf("three operations at once answered %v apart: one after another, not together", last-first)
			}
			// From the second one on, at once.
			checkDown(t, ff, names, m.serve, time.Second+faultSlack)

			// A change made at the share while it was frozen is read once
			// it answers again.
			fresh := []byte("changed while frozen")
			if err := os.WriteFile(filepath.Join(root, "f1"), fresh, 0o644); err != nil {
				t.Fatal(err)
			}
			share.signal(t, syscall.SIGCONT)
			took := eventually(t, 15*time.Second, "fresh data after the share answers again", func() bool {
				b, err := os.ReadFile(filepath.Join(ff.dir, "f1"))
				return err == nil && bytes.Equal(b, fresh)
			})
			t.Logf("recovered in %v after SIGCONT", took)
			if _, err := staleAge(filepath.Join(ff.dir, "f1")); !errors.Is(err, unix.ENODATA) {
				t.Errorf("user.pando.stale with the share up again: %v, want ENODATA", err)
			}
			if n := strings.Count(a.output(), "share reachable again"); n != 1 {
				t.Errorf("the agent logged %d lines for the end of one outage, want 1:\n%s", n, a.output())
			}
		})
	}
}

// TestShareFrozenWriteBack: data a write delegation kept back before the
// share froze stays in the cache, readable, while the share cannot be
// reached, and reaches the share, without a conflict, once it answers.
func TestShareFrozenWriteBack(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	a := mountAgent(t, d.admin, "--consistency", "callback", "--write", "back")
	p := filepath.Join(a.dir, "uva", "alpha", "kept")
	data := make([]byte, 200<<10)
	rand.Read(data)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	share := d.shares["alpha"]
	share.freeze(t)
	// Past the delegation's send timer (5 s): its write-back fails.
	time.Sleep(7 * time.Second)
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("data kept back, read with the share frozen: %v (%d bytes)", err, len(b))
	}
	share.signal(t, syscall.SIGCONT)
	took := eventually(t, 15*time.Second, "the kept back data at the share", func() bool {
		b, _ := os.ReadFile(filepath.Join(root, "kept"))
		return bytes.Equal(b, data)
	})
	t.Logf("kept back data reached the share %v after SIGCONT", took)
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), "conflict") {
			t.Errorf("a conflict copy was made: %s", e.Name())
		}
	}
}

// TestOfflineFlag: a mode --offline does not know is refused, in one
// sentence that names the choices, and nothing is mounted; the CLI says
// which share it cannot reach, with the exit code of an unavailable
// server.
func TestOfflineFlag(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644)
	dir := filepath.Join(t.TempDir(), "mnt")
	os.MkdirAll(dir, 0o755)
	d.pando(d.admin, "mount", "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--offline", "sometimes", dir).
		fails(2, "--offline", `"sometimes"`, "serve", "fail")
	if mounted(dir) {
		t.Errorf("%s was mounted although --offline was refused", dir)
	}
	d.shares["alpha"].signal(t, syscall.SIGKILL)
	<-d.shares["alpha"].done
	d.pando(d.admin, "cat", "/uva/alpha/f").fails(5, "cannot reach share alpha")
}
