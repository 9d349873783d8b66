package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	root := d.addShare("alpha")
	const cached, uncached = 5, 400
	for i := range cached {
		putTestFile(t, filepath.Join(root, fmt.Sprintf("c%d", i)), fmt.Sprintf("cached %d", i))
	}
	for i := range uncached {
		putTestFile(t, filepath.Join(root, fmt.Sprintf("u%d", i)), fmt.Sprintf("uncached %d", i))
	}
	modes := []string{"window", "callback"}
	agents := map[string]*agentProc{
		"window":   mountAgent(t, d.admin),
		"callback": mountAgent(t, d.admin, "--consistency", "callback", "--write", "back"),
	}
	for _, m := range modes {
		a := agents[m]
		dir := filepath.Join(a.dir, "uva", "alpha")
		a.settle(t, dir)
		for i := range cached {
			if _, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("c%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		if st := controllerState(t, a); st != "up" {
			t.Fatalf("%s agent: controller %s before it was killed", m, st)
		}
	}

	// What a program does on each mount, round i; every failure is kept.
	var failed []string
	ops := 0
	written := map[string][]string{}
	round := func(i int) {
		for _, m := range modes {
			dir := filepath.Join(agents[m].dir, "uva", "alpha")
			fail := func(what string, err error) {
				failed = append(failed, fmt.Sprintf("%s agent, round %d, %s: %v", m, i, what, err))
			}
			ops += 6
			c := fmt.Sprintf("c%d", i%cached)
			if got, err := os.ReadFile(filepath.Join(dir, c)); err != nil || string(got) != fmt.Sprintf("cached %d", i%cached) {
				fail("read of cached "+c, fmt.Errorf("%q %v", got, err))
			}
			if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
				fail("stat", err)
			}
			if ents, err := os.ReadDir(dir); err != nil || len(ents) < cached+uncached {
				fail("ls", fmt.Errorf("%d entries, %v", len(ents), err))
			}
			u := fmt.Sprintf("u%d", i%uncached)
			if got, err := os.ReadFile(filepath.Join(dir, u)); err != nil || string(got) != fmt.Sprintf("uncached %d", i%uncached) {
				fail("read of "+u, fmt.Errorf("%q %v", got, err))
			}
			w := fmt.Sprintf("%s-%d", m, i)
			if err := os.WriteFile(filepath.Join(dir, w), []byte("written "+w), 0o644); err != nil {
				fail("write of "+w, err)
			} else {
				written[m] = append(written[m], w)
			}
			if got, err := os.ReadFile(filepath.Join(dir, w)); err != nil || string(got) != "written "+w {
				fail("read back of "+w, fmt.Errorf("%q %v", got, err))
			}
		}
	}

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
	during, failedDuring := ops, len(failed)
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
	for _, f := range failed[:min(len(failed), 10)] {
		t.Error(f)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d operations failed (%d of %d while the controller was away)", len(failed), ops, failedDuring, during)
	}

	// What was written reached the share: at each close, and for the
	// write-back agent once it stops (it sends what it kept back).
	agents["callback"].unmount(t)
	for _, m := range modes {
		for _, w := range written[m] {
			if got, err := os.ReadFile(filepath.Join(root, w)); err != nil || string(got) != "written "+w {
				t.Errorf("%s at the share: %q %v", w, got, err)
			}
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
