package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/vfs"
)

// The faults scenario: a share frozen (SIGSTOP, a silent partition) under
// each consistency mode: the time from the freeze to the first answered
// operation on a cached file and on one not cached (an answer is data or
// an error), and the time from the end of the freeze (SIGCONT) to fresh
// data, each beside the same operation with the share up. The share runs
// as a process of its own (this binary's `pando share`) so that it can be
// frozen for real. Then the controller is stopped for a while under the
// default mode, and the operations on the mount that failed meanwhile are
// counted (the target is none).

func runFaults(ctx context.Context, o Options) ([]Row, error) {
	e, err := NewEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	var rows []Row
	for i, mode := range o.modes([]string{"window=1s", "poll=1s", "callback", "strict"}) {
		r, err := faultsMode(ctx, o, e, fmt.Sprintf("f%d", i), mode)
		if err != nil {
			return nil, fmt.Errorf("faults, %s: %w", mode, err)
		}
		rows = append(rows, r...)
	}
	r, err := faultsController(ctx, o, e)
	if err != nil {
		return nil, fmt.Errorf("faults, controller: %w", err)
	}
	return append(rows, r...), nil
}

// shareProc is a share run as a process of its own.
type shareProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *shareProc) signal(sig syscall.Signal) { _ = s.cmd.Process.Signal(sig) }

// startShareProc runs `pando share` for a new directory, mounted at
// /bench/<name>.
func startShareProc(ctx context.Context, e *Env, name string) (string, *shareProc, error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	root := filepath.Join(e.Dir, "export-"+name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "share", "--config", e.ctrl.AdminBundlePath(), "--root", root, "--name", name,
		"--listen", "127.0.0.1:0", "--state", filepath.Join(e.Dir, "share-"+name))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting a share process (%s share): %w", self, err)
	}
	sp := &shareProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(sp.done) }()
	e.closes = append(e.closes, func() {
		sp.signal(syscall.SIGCONT)
		sp.signal(syscall.SIGKILL)
		<-sp.done
	})
	switch ok, timedOut := awaitLine(out, regexp.MustCompile(`share \S+ exporting`), 30*time.Second); {
	case timedOut:
		return "", nil, fmt.Errorf("the share process %s was not ready after 30s", name)
	case !ok:
		return "", nil, fmt.Errorf("the share process %s exited before it was ready", name)
	}
	c, err := client.New(e.Admin, client.Options{})
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	if err := c.Admin().MountAdd(ctx, "/"+e.Domain+"/"+name, name, ""); err != nil {
		return "", nil, err
	}
	return root, sp, nil
}

// timed runs op and returns how long it took.
func timed(op func() error) (time.Duration, error) {
	t0 := time.Now()
	err := op()
	return time.Since(t0), err
}

func faultsMode(ctx context.Context, o Options, e *Env, name, mode string) ([]Row, error) {
	c, err := consistency.Parse(mode)
	if err != nil {
		return nil, err
	}
	root, sp, err := startShareProc(ctx, e, name)
	if err != nil {
		return nil, err
	}
	a, err := e.Mount(vfs.Options{Consistency: c}, 0)
	if err != nil {
		return nil, err
	}
	defer a.Unmount()
	dir := a.Path("/" + e.Domain + "/" + name)
	data := bytes.Repeat([]byte("cached data "), 1<<16) // 768 KiB
	if err := os.WriteFile(filepath.Join(root, "cached"), data, 0o644); err != nil {
		return nil, err
	}
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("uncached%d", i)), data, 0o644); err != nil {
			return nil, err
		}
	}
	cached := filepath.Join(dir, "cached")
	readCached := func() error {
		b, err := os.ReadFile(cached)
		if err == nil && !bytes.Equal(b, data) && !bytes.HasPrefix(b, []byte("fresh")) {
			return fmt.Errorf("the cached file read wrong")
		}
		return err
	}
	if err := readCached(); err != nil {
		return nil, err
	}
	due := c.Period + 500*time.Millisecond // revalidation is due (window, poll)
	if c.Mode == consistency.ModeCallback {
		due = 500 * time.Millisecond
	}
	time.Sleep(due)
	refCached, err := timed(readCached)
	if err != nil {
		return nil, err
	}
	refUncached, err := timed(func() error { _, err := os.ReadFile(filepath.Join(dir, "uncached0")); return err })
	if err != nil {
		return nil, err
	}

	var rows []Row
	row := func(metric string, v time.Duration, ref string, refv time.Duration, note string) {
		rows = append(rows, Row{Scenario: "faults", Case: mode, Metric: metric, Value: ms(v), Unit: "ms", Ref: ref, RefValue: ms(refv), Note: note})
	}
	// Two freezes: the first operation after each pays the detection,
	// once on a cached file, once on one not cached.
	for round, what := range []string{"cached", "uncached"} {
		time.Sleep(due)
		o.say("faults %s: share frozen, first %s read", mode, what)
		sp.signal(syscall.SIGSTOP)
		frozen := time.Now()
		var opErr error
		if what == "cached" {
			opErr = readCached()
		} else {
			_, opErr = os.ReadFile(filepath.Join(dir, fmt.Sprintf("uncached%d", round)))
		}
		first := time.Since(frozen)
		second, secondErr := timed(readCached)
		answer := "data"
		if opErr != nil {
			answer = "error: " + errnoName(opErr)
		}
		ref, refName := refCached, "the same read, share up"
		if what == "uncached" {
			ref = refUncached
		}
		row("freeze → first "+what+" read answered", first, refName, ref,
			fmt.Sprintf("answer: %s; the next cached read then took %.1f ms (%s)", answer, ms(second), orData(secondErr)))
		// A change at the share while it is frozen, read once it answers.
		fresh := []byte(fmt.Sprintf("fresh %d", round))
		if err := os.WriteFile(filepath.Join(root, "cached"), fresh, 0o644); err != nil {
			return nil, err
		}
		sp.signal(syscall.SIGCONT)
		thawed := time.Now()
		for {
			b, err := os.ReadFile(cached)
			if err == nil && bytes.Equal(b, fresh) {
				break
			}
			if time.Since(thawed) > 30*time.Second {
				return nil, fmt.Errorf("no fresh data 30s after the share answers again")
			}
			time.Sleep(20 * time.Millisecond)
		}
		row("share answers again → fresh data ("+what+" round)", time.Since(thawed), "the same read, share up", refCached, "")
		data = fresh
	}
	return rows, nil
}

func orData(err error) string {
	if err != nil {
		return errnoName(err)
	}
	return "data"
}

func errnoName(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// faultsController stops the controller for a while (2 minutes; 15 s
// with --quick) while a program reads, stats and writes through a mount
// to a live share, and counts the operations that failed.
func faultsController(ctx context.Context, o Options, e *Env) ([]Row, error) {
	if _, _, err := startShareProc(ctx, e, "ctl"); err != nil {
		return nil, err
	}
	a, err := e.Mount(vfs.Options{}, 0)
	if err != nil {
		return nil, err
	}
	defer a.Unmount()
	dir := a.Path("/" + e.Domain + "/ctl")
	data := bytes.Repeat([]byte("x"), 64<<10)
	if err := os.WriteFile(filepath.Join(dir, "r"), data, 0o644); err != nil {
		return nil, err
	}
	down := 2 * time.Minute
	if o.Quick {
		down = 15 * time.Second
	}
	var ops, failed int
	var firstErr error
	loop := func(d time.Duration) {
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			var err error
			switch i % 3 {
			case 0:
				_, err = os.ReadFile(filepath.Join(dir, "r"))
			case 1:
				_, err = os.Stat(filepath.Join(dir, "r"))
			case 2:
				err = os.WriteFile(filepath.Join(dir, "w"), data[:4096], 0o644)
			}
			ops++
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	loop(time.Second)
	if failed > 0 {
		return nil, fmt.Errorf("%d of %d operations failed with the controller up: %w", failed, ops, firstErr)
	}
	ops, failed = 0, 0
	o.say("faults: controller stopped for %v", down)
	addr := e.ctrl.Addr()
	cfg := controller.Config{StateDir: filepath.Join(e.Dir, "controller"), Domain: e.Domain, Listen: addr}
	e.ctrl.Close()
	loop(down)
	c, err := controller.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("restarting the controller on %s: %w", addr, err)
	}
	e.ctrl = c
	loop(3 * time.Second)
	note := "a read, a stat or a write of a 4 KiB file every 50 ms, while the controller was down and for 3 s after it returned; target 0 failed"
	if firstErr != nil {
		note += "; first error: " + errnoName(firstErr)
	}
	return []Row{{Scenario: "faults", Case: "controller stopped " + down.String(), Metric: "operations failed", Value: float64(failed), Unit: "ops",
		Ref: "operations tried", RefValue: float64(ops), Note: note}}, nil
}

// awaitLine waits (up to limit) for a line of a process's output that
// matches re; ok is false if the output ended first. The rest of the
// output is read and dropped, so that the process never blocks on it.
func awaitLine(out io.Reader, re *regexp.Regexp, limit time.Duration) (ok, timedOut bool) {
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent && re.MatchString(sc.Text()) {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		return ok, false
	case <-time.After(limit):
		return false, true
	}
}
