package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/testenv"
)

// crashAgent is a `pando mount` with a fixed cache and mount directory,
// that a test kills at a fault point and starts again.
type crashAgent struct {
	t               *testing.T
	cfg, cache, mnt string
	cur             *agentProc
}

func newCrashAgent(t *testing.T, cfg string) *crashAgent {
	base := t.TempDir()
	c := &crashAgent{t: t, cfg: cfg, cache: filepath.Join(base, "cache"), mnt: filepath.Join(base, "mnt")}
	os.MkdirAll(c.mnt, 0o755)
	t.Cleanup(func() {
		if c.cur != nil {
			c.cur.unmount(t)
		}
		if mounted(c.mnt) {
			exec.Command("fusermount3", "-u", "-z", c.mnt).Run()
		}
	})
	return c
}

// run starts the agent, with fault points armed by faults ("" for none).
func (c *crashAgent) run(faults string, extra ...string) *agentProc {
	c.t.Helper()
	var env []string
	if faults != "" {
		env = []string{fault.Env + "=" + faults}
	}
	args := append([]string{"--config", c.cfg, "mount", "--cache-dir", c.cache}, extra...)
	args = append(args, c.mnt)
	p, _ := start(c.t, `pando mounted at`, env, args...)
	c.cur = &agentProc{proc: p, dir: c.mnt, cacheDir: c.cache}
	return c.cur
}

// died waits until the agent has killed itself at its fault point.
func (c *crashAgent) died(point string) {
	c.t.Helper()
	select {
	case <-c.cur.done:
	case <-time.After(time.Minute):
		c.t.Fatalf("the agent did not crash at %s:\n%s", point, c.cur.output())
	}
	if !strings.Contains(c.cur.output(), "fault: crashing at "+point) {
		c.t.Fatalf("the agent ended, but not at %s:\n%s", point, c.cur.output())
	}
	c.cur = nil
}

// settled polls cond every 100 ms, up to two minutes (the agent's
// retry backs off to a minute between rounds).
func settled(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1200; i++ {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("still not true after two minutes: %s", what)
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func sameFile(p string, want []byte) bool { return fileDiff(p, want) == "" }

// fileDiff says how the file at p differs from want ("" if it does not).
func fileDiff(p string, want []byte) string {
	got, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return testenv.Diff(got, want)
}

// writeFile writes data to p in one open-write-close and returns close's
// error (or the first one before it).
func writeFile(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestCrashDuringWriteBack kills the agent at each point of the
// write-back path and starts it again on the same cache: every file whose
// close succeeded is at the share byte for byte, and the file whose close
// did not reaches it after the restart, with no conflict reported.
func TestCrashDuringWriteBack(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	for _, point := range []string{"vfs.writeback.before-send", "vfs.writeback.after-first-block", "vfs.writeback.before-markclean"} {
		t.Run(point, func(t *testing.T) {
			c := newCrashAgent(t, d.admin)
			// Two closes succeed; the third write-back dies at the point.
			c.run(point + "@3")
			dir := filepath.Join(c.mnt, "uva", "alpha", point)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			first, second := random(100_000), random(3<<20+17)
			third := random(9<<20 + 4321) // more than one write-back block
			for i, data := range [][]byte{first, second} {
				if err := writeFile(filepath.Join(dir, fmt.Sprint("f", i)), data); err != nil {
					t.Fatalf("close of f%d: %v", i, err)
				}
			}
			err := writeFile(filepath.Join(dir, "f2"), third)
			c.died(point)
			if err == nil {
				t.Fatal("close succeeded although the agent died in its write-back")
			}
			share := filepath.Join(root, point)
			for i, data := range [][]byte{first, second} {
				if !sameFile(filepath.Join(share, fmt.Sprint("f", i)), data) {
					t.Fatalf("f%d, whose close succeeded, is not at the share as written", i)
				}
			}

			a := c.run("")
			// With many writes in flight, a crash after the first was
			// acknowledged may leave later ones applied and never
			// acknowledged: the share's version then moved without the
			// agent knowing it was its own doing, and it keeps its version
			// beside the file rather than risk writing over someone
			// else's change. Nothing is lost either way.
			inFlight := point == "vfs.writeback.after-first-block"
			beside := func() string {
				ents, _ := os.ReadDir(share)
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), "f2.conflict-") && sameFile(filepath.Join(share, e.Name()), third) {
						return e.Name()
					}
				}
				return ""
			}
			settled(t, "the unsent file reaches the share after the restart", func() bool {
				if n := a.stats(t)["conflicts"].(float64); n != 0 && !inFlight {
					t.Fatalf("the agent's own interrupted write-back was reported as %v conflicts:\n%s", n, a.output())
				}
				return sameFile(filepath.Join(share, "f2"), third) || inFlight && beside() != ""
			})
			settled(t, "the agent holds no unsent data", func() bool { return a.stats(t)["unsent"].(float64) == 0 })
			if sameFile(filepath.Join(share, "f2"), third) {
				if n := a.stats(t)["conflicts"].(float64); n != 0 {
					t.Fatalf("the agent's own interrupted write-back was reported as %v conflicts:\n%s", n, a.output())
				}
			} else {
				t.Logf("kept beside as %s (writes in flight at the crash)", beside())
				return
			}
			if diff := fileDiff(filepath.Join(dir, "f2"), third); diff != "" {
				t.Fatalf("the mount does not read back what was written: %s\n%s", diff, a.output())
			}
		})
	}
}

// TestShareCrashAfterApplyBeforeReply kills the share after it applied a
// write-back's commit and before it answered: the close fails, the data
// stays dirty in the agent, and once the share is back the agent's retry
// finds it there, without a conflict.
func TestShareCrashAfterApplyBeforeReply(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	const point = "share.commit.after-apply-before-reply"
	d.shares["alpha"].stop(t)
	d.startShare("alpha", fault.Env+"="+point+"@2")
	sh := d.shares["alpha"]

	a := mountAgent(t, d.admin, "--verbose")
	dir := filepath.Join(a.dir, "uva", "alpha")
	first, second := []byte("the first file, written whole"), random(200_000)
	if err := writeFile(filepath.Join(dir, "first"), first); err != nil {
		t.Fatalf("close of the first file: %v", err)
	}
	if err := writeFile(filepath.Join(dir, "second"), second); err == nil {
		t.Fatal("close succeeded although the share died before it answered")
	}
	select {
	case <-sh.done:
	case <-time.After(time.Minute):
		t.Fatal("the share did not crash at " + point)
	}
	if !strings.Contains(sh.output(), "fault: crashing at "+point) {
		t.Fatalf("the share ended, but not at %s:\n%s", point, sh.output())
	}
	if !sameFile(filepath.Join(root, "first"), first) {
		t.Fatal("the first file, whose close succeeded, is not at the share")
	}
	settled(t, "the agent holds the second file as unsent", func() bool { return a.stats(t)["unsent"].(float64) == 1 })
	d.startShare("alpha")
	settled(t, "the agent's retry settles the unsent file", func() bool { return a.stats(t)["unsent"].(float64) == 0 })
	if !sameFile(filepath.Join(root, "second"), second) {
		t.Fatal("the second file is not at the share as written")
	}
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Fatalf("%v conflicts reported for the agent's own write", n)
	}
	// The share had applied the commit: the agent found it there rather
	// than sending it again.
	settled(t, "the agent logs that it found its write at the share", func() bool {
		return strings.Contains(a.output(), "had reached the share already")
	})
}

// TestCrashConflictKeptBeside: the agent dies before its write-back; while
// it is down, files are changed, deleted and replaced at the share. After
// the restart the share keeps the newer versions, the local versions
// appear beside the files byte for byte (zeros where the old version was
// not cached), and pando stats reports each conflict.
func TestCrashConflictKeptBeside(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	orig := random(3<<20 + 99)
	os.WriteFile(filepath.Join(root, "report"), orig, 0o644)
	os.WriteFile(filepath.Join(root, "notes"), []byte("old notes"), 0o644)
	sparse := random(4 << 20)
	os.WriteFile(filepath.Join(root, "sparse"), sparse, 0o644)
	os.WriteFile(filepath.Join(root, "swapped"), []byte("saved by an editor"), 0o644)

	c := newCrashAgent(t, d.admin)
	c.run("vfs.writeback.before-send")
	dir := filepath.Join(c.mnt, "uva", "alpha")

	// report: read whole (cached), then changed in its second block.
	local := bytes.Clone(orig)
	patch := []byte("written at the agent before it died")
	copy(local[1<<20+5:], patch)
	r, err := os.OpenFile(filepath.Join(dir, "report"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "report")); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("first read: %v", err)
	}
	if _, err := r.WriteAt(patch, 1<<20+5); err != nil {
		t.Fatal(err)
	}
	// notes: rewritten whole.
	n, err := os.OpenFile(filepath.Join(dir, "notes"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteString("new notes, never sent"); err != nil {
		t.Fatal(err)
	}
	// sparse: written in its third block without reading the rest, so
	// only that block of the old version is cached.
	s, err := os.OpenFile(filepath.Join(dir, "sparse"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(patch, 2<<20+7); err != nil {
		t.Fatal(err)
	}
	// swapped: changed here, replaced at the share by another file (an
	// editor's save: write a new file, rename it over).
	w, err := os.OpenFile(filepath.Join(dir, "swapped"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("SAVED"), 0); err != nil {
		t.Fatal(err)
	}
	partial := make([]byte, len(sparse))
	copy(partial[2<<20:3<<20], sparse[2<<20:3<<20])
	copy(partial[2<<20+7:], patch)

	if err := r.Close(); err == nil {
		t.Fatal("close succeeded although the agent died before sending")
	}
	c.died("vfs.writeback.before-send")
	n.Close()
	s.Close()
	w.Close()

	// Meanwhile, at the share.
	newer := []byte("the newer version, made at the share")
	os.WriteFile(filepath.Join(root, "report"), newer, 0o644)
	os.Remove(filepath.Join(root, "notes"))
	os.WriteFile(filepath.Join(root, "sparse"), newer, 0o644)
	os.WriteFile(filepath.Join(root, "swapped.tmp"), newer, 0o644)
	os.Rename(filepath.Join(root, "swapped.tmp"), filepath.Join(root, "swapped"))

	a := c.run("")
	settled(t, "four conflicts are reported", func() bool { return a.stats(t)["conflicts"].(float64) == 4 })
	st := a.stats(t)
	if st["unsent"].(float64) != 0 {
		t.Errorf("unsent data left after the conflicts were kept beside: %v", st)
	}
	kept := map[string]map[string]any{}
	for _, x := range st["conflict_list"].([]any) {
		m := x.(map[string]any)
		kept[m["path"].(string)] = m
	}
	check := func(name, change string, want []byte, partialCopy bool) {
		t.Helper()
		m := kept["/uva/alpha/"+name]
		if m == nil {
			t.Fatalf("no conflict reported for %s: %v", name, st["conflict_list"])
		}
		if m["change"] != change || (m["partial"] == true) != partialCopy {
			t.Errorf("%s: reported as %v", name, m)
		}
		k, _ := m["kept"].(string)
		base := filepath.Base(k)
		if !strings.HasPrefix(base, name+".conflict-") {
			t.Fatalf("%s kept as %q", name, k)
		}
		if !sameFile(filepath.Join(root, base), want) {
			t.Errorf("%s: the copy beside it is not the local version", name)
		}
		if !sameFile(filepath.Join(dir, base), want) {
			t.Errorf("%s: the copy beside it does not read back through the mount", name)
		}
	}
	check("report", "changed", local, false)
	check("notes", "deleted", []byte("new notes, never sent"), false)
	check("sparse", "changed", partial, true)
	check("swapped", "replaced", []byte("SAVED by an editor"), false)
	for _, name := range []string{"report", "sparse", "swapped"} {
		if !sameFile(filepath.Join(root, name), newer) {
			t.Errorf("the share's newer %s was overwritten", name)
		}
		if !sameFile(filepath.Join(dir, name), newer) {
			t.Errorf("the mount does not serve the share's newer %s", name)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "notes")); err == nil {
		t.Error("the deleted notes came back")
	}
	out, err := exec.Command(pandoBin, "stats", "--cache-dir", a.cacheDir).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "conflicts: 4") || !strings.Contains(string(out), kept["/uva/alpha/report"]["kept"].(string)) {
		t.Errorf("pando stats does not report the conflicts:\n%s", out)
	}
	settled(t, "the agent logs the conflicts", func() bool { return strings.Count(a.output(), "level=WARN msg=\"conflict:") == 4 })
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".pando-conflict-") {
			t.Errorf("temporary file left at the share: %s", e.Name())
		}
	}
}

// TestReplayWaitsForUnreachableShare: an agent restarted while the share
// is down keeps the unsent data dirty and sends it once the share is back.
func TestReplayWaitsForUnreachableShare(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	c := newCrashAgent(t, d.admin)
	c.run("vfs.writeback.before-send")
	data := random(2<<20 + 5)
	if err := writeFile(filepath.Join(c.mnt, "uva", "alpha", "data"), data); err == nil {
		t.Fatal("close succeeded although the agent died before sending")
	}
	c.died("vfs.writeback.before-send")
	d.shares["alpha"].stop(t)

	a := c.run("")
	settled(t, "the restarted agent has tried the share", func() bool {
		return strings.Contains(a.output(), "unsent data waits for its share")
	})
	if n := a.stats(t)["unsent"].(float64); n != 1 {
		t.Fatalf("unsent files while the share is down: %v", n)
	}
	out, err := exec.Command(pandoBin, "cache", "ls", "--cache-dir", a.cacheDir).Output()
	if err != nil || !strings.Contains(string(out), "/uva/alpha/data") || !strings.Contains(string(out), "dirty") {
		t.Fatalf("pando cache ls does not show the data dirty (%v):\n%s", err, out)
	}

	d.startShare("alpha")
	settled(t, "the data reaches the share once it is back", func() bool { return sameFile(filepath.Join(root, "data"), data) })
	settled(t, "nothing unsent", func() bool { return a.stats(t)["unsent"].(float64) == 0 })
	settled(t, "the agent says the data reached the share", func() bool {
		return strings.Contains(a.output(), "unsent data that waited for its share has reached it")
	})
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Fatalf("%v conflicts", n)
	}
}

// TestCrashConflictDirectoryGone: when the file's directory is gone too,
// the local version cannot be kept beside it: the conflict is reported and
// the data stays dirty in the cache.
func TestCrashConflictDirectoryGone(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.MkdirAll(filepath.Join(root, "project"), 0o755)
	c := newCrashAgent(t, d.admin)
	c.run("vfs.writeback.before-send")
	if err := writeFile(filepath.Join(c.mnt, "uva", "alpha", "project", "draft"), []byte("kept somewhere")); err == nil {
		t.Fatal("close succeeded although the agent died before sending")
	}
	c.died("vfs.writeback.before-send")
	os.RemoveAll(filepath.Join(root, "project"))

	a := c.run("")
	settled(t, "the conflict is reported", func() bool { return a.stats(t)["conflicts"].(float64) == 1 })
	st := a.stats(t)
	m := st["conflict_list"].([]any)[0].(map[string]any)
	if m["path"] != "/uva/alpha/project/draft" || m["change"] != "deleted" || m["kept"] != nil {
		t.Errorf("reported as %v", m)
	}
	if st["unsent"].(float64) != 1 {
		t.Errorf("the data does not stay in the cache: %v", st)
	}
	out, err := exec.Command(pandoBin, "cache", "ls", "--cache-dir", a.cacheDir).Output()
	if err != nil || !strings.Contains(string(out), "/uva/alpha/project/draft") || !strings.Contains(string(out), "dirty") {
		t.Fatalf("pando cache ls does not show the data dirty (%v):\n%s", err, out)
	}
	out, _ = exec.Command(pandoBin, "stats", "--cache-dir", a.cacheDir).Output()
	if !strings.Contains(string(out), "conflicts: 1") || !strings.Contains(string(out), "not kept beside it") {
		t.Errorf("pando stats does not report the conflict:\n%s", out)
	}
	// The conflicts met since the agent started: a counter.
	out, _ = exec.Command(pandoBin, "stats", "--metrics", "--cache-dir", a.cacheDir).Output()
	if !strings.Contains(string(out), "# TYPE pando_conflicts_total counter\npando_conflicts_total 1\n") {
		t.Errorf("the metrics do not count the conflict:\n%s", out)
	}

	// Once the directory is back, the local version goes there (at the
	// next start here; a running agent tries again every minute).
	os.MkdirAll(filepath.Join(root, "project"), 0o755)
	a.unmount(t)
	b := c.run("")
	settled(t, "the local version is kept beside", func() bool {
		l, _ := b.stats(t)["conflict_list"].([]any)
		return len(l) == 1 && l[0].(map[string]any)["kept"] != nil
	})
	k := b.stats(t)["conflict_list"].([]any)[0].(map[string]any)["kept"].(string)
	if !strings.HasPrefix(k, "/uva/alpha/project/draft.conflict-") || !sameFile(filepath.Join(root, "project", filepath.Base(k)), []byte("kept somewhere")) {
		t.Errorf("kept as %s", k)
	}
	if b.stats(t)["unsent"].(float64) != 0 {
		t.Error("unsent data left")
	}
}

// TestCrashWhileKeepingBeside: an agent killed after it wrote the local
// version beside a changed file, before it dropped its cache entry, writes
// it again at the next start: a second copy, nothing lost.
func TestCrashWhileKeepingBeside(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644)
	c := newCrashAgent(t, d.admin)
	c.run("vfs.writeback.before-send")
	local := []byte("written here, never sent")
	if err := writeFile(filepath.Join(c.mnt, "uva", "alpha", "f"), local); err == nil {
		t.Fatal("close succeeded although the agent died before sending")
	}
	c.died("vfs.writeback.before-send")
	os.WriteFile(filepath.Join(root, "f"), []byte("newer, at the share"), 0o644)

	c.run("vfs.replay.before-drop")
	c.died("vfs.replay.before-drop")
	a := c.run("")
	settled(t, "the conflict is reported", func() bool { return a.stats(t)["conflicts"].(float64) == 1 })
	if a.stats(t)["unsent"].(float64) != 0 {
		t.Error("unsent data left")
	}
	ents, _ := os.ReadDir(root)
	copies := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "f.conflict-") {
			copies++
			if !sameFile(filepath.Join(root, e.Name()), local) {
				t.Errorf("%s is not the local version", e.Name())
			}
		}
		if strings.Contains(e.Name(), ".pando-conflict-") {
			t.Errorf("temporary file left at the share: %s", e.Name())
		}
	}
	if copies != 2 {
		t.Errorf("%d copies beside the file, want 2 (one per run that wrote it)", copies)
	}
	if !sameFile(filepath.Join(root, "f"), []byte("newer, at the share")) {
		t.Error("the share's newer version was overwritten")
	}
}

// TestFailedCloseThenChangedAtShare: a close fails (share down), the file
// is changed at the share once it is back, and then opened through the
// mount. Whether the open or the agent's retry gets there first, the
// local data must not be written over the newer version: the open sees
// the share's version and the local one is kept beside it.
func TestFailedCloseThenChangedAtShare(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	a := mountAgent(t, d.admin, "--consistency", "strict")
	p := filepath.Join(a.dir, "uva", "alpha", "doc")
	if err := writeFile(p, []byte("version one of the document")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("LOCAL"), 0); err != nil {
		t.Fatal(err)
	}
	d.shares["alpha"].stop(t)
	if err := f.Close(); err == nil {
		t.Fatal("close succeeded although the share was down")
	}
	d.startShare("alpha")
	newer := []byte("the newer version, made at the share")
	os.WriteFile(filepath.Join(root, "doc"), newer, 0o644)

	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("read through the mount: %q, %v", got, err)
	}
	settled(t, "the conflict is reported", func() bool { return a.stats(t)["conflicts"].(float64) == 1 })
	if !sameFile(filepath.Join(root, "doc"), newer) {
		t.Fatal("the local data was written over the share's newer version")
	}
	k, _ := a.stats(t)["conflict_list"].([]any)[0].(map[string]any)["kept"].(string)
	if !sameFile(filepath.Join(root, filepath.Base(k)), []byte("LOCALon one of the document")) {
		got, _ := os.ReadFile(filepath.Join(root, filepath.Base(k)))
		t.Errorf("the copy beside the file (%s) is not the local version: %q\n%s", k, got, a.output())
	}
}
