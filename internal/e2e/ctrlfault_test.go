package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestControllerKilled: the controller is off the data path. With it
// killed (SIGKILL), programs on two mounts (the default mode, and callback
// with write-back) read cached and uncached files, stat, list, write new
// files and read them back with no error, for as long as it is away: here
// 20 s, four times the mount table's TTL and past the tokens' renewal
// point (tokens of 30 s, renewed from 20 s on). The agents' stats say the
// controller is down; once it is back they say up (the tokens are renewed
// before they expire) and everything still works. PANDO_CTRL_OUTAGE=2m
// runs it with a longer outage (and tokens half as long again).
func TestControllerKilled(t *testing.T) {
	outage := 20 * time.Second
	if s := os.Getenv("PANDO_CTRL_OUTAGE"); s != "" {
		var err error
		if outage, err = time.ParseDuration(s); err != nil || outage < 10*time.Second {
			t.Fatalf("PANDO_CTRL_OUTAGE=%s: want a duration of 10s or more", s)
		}
	}
	ttl := (outage * 3 / 2).String()
	d := newDomain(t, "uva", "--token-ttl", ttl)
	w := newCtrlWorkload(t, d, "window", "callback")
	modes, agents, root := w.modes, w.agents, w.root
	round := w.round

	if err := d.ctrl.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.ctrl.done
	killed := time.Now()
	i := 0
	for ; time.Since(killed) < outage; i++ {
		round(i)
		time.Sleep(100 * time.Millisecond)
	}
	during, failedDuring := w.ops, len(w.failed)
	for _, m := range modes {
		if st := controllerState(t, agents[m]); st != "down" {
			t.Errorf("%s agent: controller %s after %v killed", m, st, time.Since(killed).Round(time.Second))
		}
	}
	t.Logf("%d operations in %v without a controller: %d failed", during, outage, failedDuring)
	a := agents["window"]
	if out := runPando(t, "", d.admin, "stats", "--cache-dir", a.cacheDir).ok().stdout; !strings.Contains(out, "controller DOWN since") ||
		!strings.Contains(out, "cannot connect to the controller of uva") || !strings.Contains(out, "1 token held, the first expires in") {
		t.Errorf("pando stats with the controller away:\n%s", out)
	}
	if out := runPando(t, "", d.admin, "stats", "--metrics", "--cache-dir", a.cacheDir).ok().stdout; !strings.Contains(out, "pando_controller_up 0") ||
		!strings.Contains(out, "pando_mount_table_age_seconds") || !strings.Contains(out, "pando_token_expiry_seconds") {
		t.Errorf("metrics with the controller away:\n%s", out)
	}

	// The controller back, at its address and on its state.
	d.ctrl, _ = start(t, `listening on (\S+)`, nil, "controller", "--state", filepath.Join(d.dir, "controller"),
		"--listen", d.addr, "--token-ttl", ttl)
	back := time.Now()
	for pending := slices.Clone(modes); len(pending) > 0; i++ {
		if time.Since(back) > 30*time.Second {
			t.Fatalf("agents %v still say the controller is down 30s after it came back", pending)
		}
		round(i)
		pending = slices.DeleteFunc(pending, func(m string) bool { return controllerState(t, agents[m]) == "up" })
		time.Sleep(100 * time.Millisecond)
	}
	for range 5 {
		round(i)
		i++
	}
	if out := runPando(t, "", d.admin, "stats", "--cache-dir", a.cacheDir).ok().stdout; !strings.Contains(out, "controller up (at "+d.addr+")") {
		t.Errorf("pando stats with the controller back:\n%s", out)
	}
	w.check(failedDuring, during)

	// What was written reached the share: at each close, and for the
	// write-back agent once it stops (it sends what it kept back).
	agents["callback"].unmount(t)
	for _, m := range modes {
		for _, f := range w.written[m] {
			if got, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(got) != "written "+f {
				t.Errorf("%s at the share: %q %v", f, got, err)
			}
		}
	}
}

// TestControllerFrozen: a controller that stops answering without closing
// anything (SIGSTOP: its connections stay up, new ones are accepted by the
// kernel and never served) holds no operation on a mount up for longer
// than one wait for the mount table (1 s), and none fails; the agent
// finds it down when its requests time out, and up once it runs again.
func TestControllerFrozen(t *testing.T) {
	// Past the mount table's TTL (5 s) and then the 15 s bound on the
	// agent's background request for it.
	const outage = 25 * time.Second
	d := newDomain(t, "uva")
	w := newCtrlWorkload(t, d, "window")
	a := w.agents["window"]
	if err := d.ctrl.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	cont := sync.OnceFunc(func() { d.ctrl.cmd.Process.Signal(syscall.SIGCONT) })
	defer cont()
	i := 0
	for ; time.Since(frozen) < outage; i++ {
		w.round(i)
		time.Sleep(100 * time.Millisecond)
	}
	during, failedDuring := w.ops, len(w.failed)
	t.Logf("%d operations in %v with the controller frozen: %d failed, the slowest took %v", during, outage, failedDuring, w.slowest.Round(time.Millisecond))
	if st := controllerState(t, a); st != "down" {
		t.Errorf("controller %s after %v frozen", st, time.Since(frozen).Round(time.Second))
	}
	// A bound far above the 1 s the agent waits, below the 15 s a request
	// to the frozen controller lasts.
	if w.slowest > 10*time.Second {
		t.Errorf("an operation took %v with the controller frozen", w.slowest)
	}
	cont()
	back := time.Now()
	for ; controllerState(t, a) != "up"; i++ {
		if time.Since(back) > 30*time.Second {
			t.Fatal("the agent still says the controller is down 30s after it ran again")
		}
		w.round(i)
		time.Sleep(100 * time.Millisecond)
	}
	w.round(i)
	w.check(failedDuring, during)
}

// ctrlWorkload is what programs do on mounts while the controller is away:
// each round reads a cached file, stats it, lists the directory, reads a
// file never read before, writes a new file and reads it back.
type ctrlWorkload struct {
	t       *testing.T
	root    string
	modes   []string
	agents  map[string]*agentProc
	failed  []string
	ops     int
	written map[string][]string
	slowest time.Duration
}

const ctrlCached, ctrlUncached = 5, 400

// newCtrlWorkload adds share alpha to d with files to read, and mounts an
// agent per mode ("window": the default; "callback": with write-back),
// each with the cached files read once.
func newCtrlWorkload(t *testing.T, d *domain, modes ...string) *ctrlWorkload {
	t.Helper()
	w := &ctrlWorkload{t: t, root: d.addShare("alpha"), modes: modes, agents: map[string]*agentProc{}, written: map[string][]string{}}
	for i := range ctrlCached {
		putTestFile(t, filepath.Join(w.root, fmt.Sprintf("c%d", i)), fmt.Sprintf("cached %d", i))
	}
	for i := range ctrlUncached {
		putTestFile(t, filepath.Join(w.root, fmt.Sprintf("u%d", i)), fmt.Sprintf("uncached %d", i))
	}
	for _, m := range modes {
		var a *agentProc
		if m == "callback" {
			a = mountAgent(t, d.admin, "--consistency", "callback", "--write", "back")
		} else {
			a = mountAgent(t, d.admin)
		}
		w.agents[m] = a
		dir := filepath.Join(a.dir, "uva", "alpha")
		a.settle(t, dir)
		for i := range ctrlCached {
			if _, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("c%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		if st := controllerState(t, a); st != "up" {
			t.Fatalf("%s agent: controller %s before the fault", m, st)
		}
	}
	return w
}

// round runs round i on every mount, keeping every failure and the
// slowest operation.
func (w *ctrlWorkload) round(i int) {
	for _, m := range w.modes {
		dir := filepath.Join(w.agents[m].dir, "uva", "alpha")
		op := func(what string, fn func() error) {
			w.ops++
			t0 := time.Now()
			err := fn()
			w.slowest = max(w.slowest, time.Since(t0))
			if err != nil {
				w.failed = append(w.failed, fmt.Sprintf("%s agent, round %d, %s: %v", m, i, what, err))
			}
		}
		read := func(name, want string) func() error {
			return func() error {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err == nil && string(got) != want {
					err = fmt.Errorf("read %q, want %q", got, want)
				}
				return err
			}
		}
		c := fmt.Sprintf("c%d", i%ctrlCached)
		op("read of cached "+c, read(c, fmt.Sprintf("cached %d", i%ctrlCached)))
		op("stat of "+c, func() error { _, err := os.Stat(filepath.Join(dir, c)); return err })
		op("ls", func() error {
			ents, err := os.ReadDir(dir)
			if err == nil && len(ents) < ctrlCached+ctrlUncached {
				err = fmt.Errorf("%d entries", len(ents))
			}
			return err
		})
		u := fmt.Sprintf("u%d", i%ctrlUncached)
		op("read of "+u, read(u, fmt.Sprintf("uncached %d", i%ctrlUncached)))
		f := fmt.Sprintf("%s-%d", m, i)
		op("write of "+f, func() error {
			err := os.WriteFile(filepath.Join(dir, f), []byte("written "+f), 0o644)
			if err == nil {
				w.written[m] = append(w.written[m], f)
			}
			return err
		})
		op("read back of "+f, read(f, "written "+f))
	}
}

// check fails the test if any operation failed.
func (w *ctrlWorkload) check(failedDuring, during int) {
	w.t.Helper()
	for _, f := range w.failed[:min(len(w.failed), 10)] {
		w.t.Error(f)
	}
	if len(w.failed) > 0 {
		w.t.Errorf("%d of %d operations failed (%d of %d during the fault)", len(w.failed), w.ops, failedDuring, during)
		for _, m := range w.modes {
			w.t.Logf("%s agent's log:\n%s", m, w.agents[m].output())
		}
	}
}

// controllerState is what the agent's stats say of the controller.
func controllerState(t *testing.T, a *agentProc) string {
	t.Helper()
	c, _ := a.stats(t)["controller"].(map[string]any)
	s, _ := c["state"].(string)
	return s
}

func putTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
