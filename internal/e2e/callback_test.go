package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCallbackMode: under callback, agents answer from their caches with
// no consistency round trips, yet once a write and close through one
// agent has returned, every other agent reads the new data at once (the
// share recalled their copies before acknowledging the change). A seeded
// random run checks that promise against a reference model of the file
// contents.
func TestCallbackMode(t *testing.T) {
	d := newDomain(t, "cb")
	root := d.addShare("data")
	const n = 3
	var agents []*agentProc
	for range n {
		agents = append(agents, mountAgent(t, d.admin, "--consistency", "callback"))
	}
	path := func(a *agentProc, name string) string { return filepath.Join(a.dir, "cb", "data", name) }
	files := []string{"f0", "f1", "f2", "f3"}
	model := map[string]string{}
	for _, f := range files {
		os.WriteFile(filepath.Join(root, f), []byte("initial "+f), 0o644)
		model[f] = "initial " + f
	}
	for _, a := range agents {
		for _, f := range files {
			if b, err := os.ReadFile(path(a, f)); err != nil || string(b) != model[f] {
				t.Fatalf("first read of %s: %q %v", f, b, err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // every agent's long poll is in place

	// Warm: once the first long poll confirmed the cache, stats cost no
	// getattr.
	for _, f := range files {
		os.Stat(path(agents[1], f))
	}
	before := rpcCount(t, agents[1], "getattr")
	for range 100 {
		for _, f := range files {
			if _, err := os.Stat(path(agents[1], f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := rpcCount(t, agents[1], "getattr") - before; got > 0 {
		t.Errorf("400 stats of cached files cost %v getattr requests under callback", got)
	}

	// The model: after a write through one agent returns, every agent
	// reads what was written; no waiting.
	r := rand.New(rand.NewPCG(11, 3))
	for step := range 120 {
		f := files[r.IntN(len(files))]
		w := agents[r.IntN(n)]
		if r.IntN(3) == 0 {
			data := fmt.Sprintf("step %d by agent %d: %s", step, slices.Index(agents, w), string(make([]byte, r.IntN(3000))))
			if err := os.WriteFile(path(w, f), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			model[f] = data
			continue
		}
		rd := agents[r.IntN(n)]
		b, err := os.ReadFile(path(rd, f))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != model[f] {
			t.Fatalf("step %d: agent %d read %q of %s, but %q was written and closed before", step, slices.Index(agents, rd), trunc(string(b)), f, trunc(model[f]))
		}
	}
	if rpcCount(t, agents[0], "getinv") == 0 {
		t.Error("no long polls were sent")
	}

	// Two entries of a directory another agent only listed change: both
	// show at once (the listing's delegation covers its entries).
	for _, f := range []string{"g1", "g2"} {
		os.WriteFile(path(agents[0], f), []byte("short"), 0o644)
	}
	lister := agents[1]
	ents, err := os.ReadDir(filepath.Join(lister.dir, "cb", "data"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		e.Info()
	}
	for i, f := range []string{"g1", "g2"} {
		if err := os.WriteFile(path(agents[0], f), []byte(strings.Repeat("z", 5000+i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range []string{"g1", "g2"} {
		if fi, err := os.Stat(path(lister, f)); err != nil || fi.Size() != int64(5000+i) {
			t.Errorf("%s after a change through another agent: %v bytes, want %d (%v)", f, fi.Size(), 5000+i, err)
		}
	}

	// A new file shows in another agent's listing as soon as it is created.
	os.WriteFile(path(agents[0], "new"), []byte("n"), 0o644)
	ents, _ = os.ReadDir(filepath.Join(agents[2].dir, "cb", "data"))
	if !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "new" }) {
		t.Error("a file created through another agent is missing from a listing")
	}

	// An agent that dies holds up changes only until its lease ends.
	agents[2].cmd.Process.Kill()
	<-agents[2].done
	syscall.Unmount(agents[2].dir, syscall.MNT_DETACH) // what the next pando mount would clean up
	t0 := time.Now()
	if err := os.WriteFile(path(agents[0], "f0"), []byte("after a death"), 0o644); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > 10*time.Second {
		t.Errorf("a write waited %v for a dead agent", el)
	}
	if b, _ := os.ReadFile(path(agents[1], "f0")); string(b) != "after a death" {
		t.Errorf("after an agent died, another reads %q", b)
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
