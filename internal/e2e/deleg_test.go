package e2e

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// delegStat reads one counter of an agent's write delegations.
func delegStat(t *testing.T, a *agentProc, field string) float64 {
	t.Helper()
	d, _ := a.stats(t)["delegations"].(map[string]any)
	n, _ := d[field].(float64)
	return n
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// mountBack starts an agent in callback mode with write mode back, with
// env for its process, on the given cache and mount directories.
func mountBack(t *testing.T, cfg, cache, mnt string, env ...string) *agentProc {
	t.Helper()
	os.MkdirAll(mnt, 0o755)
	p, _ := start(t, `pando mounted at`, env, "--config", cfg, "mount", "--cache-dir", cache,
		"--consistency", "callback", "--write", "back", mnt)
	return &agentProc{proc: p, dir: mnt, cacheDir: cache}
}

// waitFor retries check until it passes (true) or limit runs out.
func waitFor(limit time.Duration, check func() bool) bool {
	for t0 := time.Now(); time.Since(t0) < limit; time.Sleep(50 * time.Millisecond) {
		if check() {
			return true
		}
	}
	return check()
}

// backChannel waits until agent a's long poll to the share behind dir is
// in place (a cached entry's first use starts it).
func backChannel(t *testing.T, a *agentProc, dir string) {
	t.Helper()
	eventually(t, 10*time.Second, "the back channel is up", func() bool {
		os.Stat(dir)
		return rpcCount(t, a, "getinv") > 0
	})
	time.Sleep(300 * time.Millisecond)
}

// TestWriteDelegation: under a write delegation the writer's close
// returns with the data kept back in its cache (no write reaches the
// share); another agent's read, or a plain client, recalls it and reads
// exactly what was written; data kept back goes to the share on its own
// after a while, and when the agent stops.
func TestWriteDelegation(t *testing.T) {
	d := newDomain(t, "wd")
	root := d.addShare("data")
	r := d.pando(d.admin, "mount", "--consistency", "window=3s", "--write", "back", t.TempDir())
	r.fails(2, "callback")

	base := t.TempDir()
	a := mountBack(t, d.admin, filepath.Join(base, "ca"), filepath.Join(base, "ma"))
	t.Cleanup(func() { a.unmount(t) })
	b := mountAgent(t, d.admin, "--consistency", "callback")
	at := func(x *agentProc, name string) string { return filepath.Join(x.dir, "wd", "data", name) }
	backChannel(t, a, filepath.Join(a.dir, "wd", "data"))

	// Kept back: close returns, nothing written at the share.
	data := randomBytes(1, 3<<20+4321)
	if err := os.WriteFile(at(a, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := delegStat(t, a, "granted"); n != 1 {
		t.Fatalf("%v write delegations granted, want 1", n)
	}
	if n := rpcCount(t, a, "write"); n != 0 {
		t.Errorf("%v writes reached the share under a write delegation", n)
	}
	if fi, err := os.Stat(filepath.Join(root, "f")); err != nil || fi.Size() != 0 {
		t.Errorf("the share has %v bytes of a file whose data was kept back (%v)", fi.Size(), err)
	}
	if fi, err := os.Stat(at(a, "f")); err != nil || fi.Size() != int64(len(data)) {
		t.Errorf("the writer sees size %v, want %d (%v)", fi.Size(), len(data), err)
	}

	// Another agent's read recalls it and reads what was written.
	got, err := os.ReadFile(at(b, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("another agent read %d bytes (%v), not the %d written; recalls %v\nwriter:\n%s\nshare:\n%s", len(got), err, len(data),
			delegStat(t, a, "recalls"), a.output(), d.shares["data"].output())
	}
	if n := delegStat(t, a, "recalls"); n < 1 {
		t.Errorf("no recall reached the writer")
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, data) {
		t.Errorf("after the recall the share holds %d bytes, not the data", len(got))
	}

	// A plain client (no agent) recalls too.
	small := []byte("kept back, then recalled by pando cat")
	if err := os.WriteFile(at(a, "g"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := d.pando(d.admin, "cat", "/wd/data/g").ok().stdout; out != string(small) {
		t.Errorf("pando cat read %q", out)
	}

	// Kept back data goes to the share after a while on its own.
	later := randomBytes(2, 100000)
	if err := os.WriteFile(at(a, "h"), later, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "kept back data reaches the share", func() bool {
		got, _ := os.ReadFile(filepath.Join(root, "h"))
		return bytes.Equal(got, later)
	})

	// And when the agent stops.
	last := randomBytes(3, 200000)
	if err := os.WriteFile(at(a, "u"), last, 0o644); err != nil {
		t.Fatal(err)
	}
	a.unmount(t)
	if got, _ := os.ReadFile(filepath.Join(root, "u")); !bytes.Equal(got, last) {
		t.Errorf("after the agent stopped the share holds %d bytes of u, not the %d written", len(got), len(last))
	}
}

// TestDelegationCrashAndRestart: what a close acknowledged under a write
// delegation survives the writer's crash (replayed when it comes back),
// and a restart of the share (reclaimed in its grace period, so that
// another agent still reads the kept back data, not the share's old copy).
func TestDelegationCrashAndRestart(t *testing.T) {
	d := newDomain(t, "wc")
	root := d.addShare("data")
	base := t.TempDir()
	cache, mnt := filepath.Join(base, "ca"), filepath.Join(base, "ma")
	a := mountBack(t, d.admin, cache, mnt)
	b := mountAgent(t, d.admin, "--consistency", "callback")
	at := func(x *agentProc, name string) string { return filepath.Join(x.dir, "wc", "data", name) }
	backChannel(t, a, filepath.Join(a.dir, "wc", "data"))

	// The share restarts while data is kept back: the writer reclaims its
	// delegation, and a reader after the restart gets the kept back data.
	kept := randomBytes(4, 2<<20+77)
	if err := os.WriteFile(at(a, "r"), kept, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := delegStat(t, a, "granted"); n != 1 {
		t.Fatalf("%v write delegations granted, want 1", n)
	}
	d.shares["data"].stop(t)
	d.startShare("data")
	got, err := os.ReadFile(at(b, "r"))
	if err != nil || !bytes.Equal(got, kept) {
		t.Fatalf("after a share restart another agent read %d bytes (%v), not the %d kept back", len(got), err, len(kept))
	}

	// The writer crashes with data kept back; its restart sends it.
	eventually(t, 10*time.Second, "the recalled delegation is returned", func() bool { return delegStat(t, a, "held") == 0 })
	crashed := randomBytes(5, 1<<20+5)
	if err := os.WriteFile(at(a, "k"), crashed, 0o644); err != nil {
		t.Fatal(err)
	}
	a.cmd.Process.Kill()
	<-a.done
	t.Logf("writer before the crash:\n%s", a.output())
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	a = mountBack(t, d.admin, cache, mnt)
	t.Cleanup(func() { a.unmount(t) })
	if !waitFor(30*time.Second, func() bool {
		got, _ := os.ReadFile(filepath.Join(root, "k"))
		return bytes.Equal(got, crashed)
	}) {
		t.Fatalf("the data kept back before the crash did not reach the share; the agent said:\n%s", a.output())
	}
	if got, _ := os.ReadFile(at(b, "k")); !bytes.Equal(got, crashed) {
		t.Errorf("another agent reads %d bytes of k after the writer came back, not the %d written", len(got), len(crashed))
	}
}

// TestDelegationRecallFaults kills the holder and the share at chosen
// points of a recall and checks that nothing a close acknowledged is lost.
func TestDelegationRecallFaults(t *testing.T) {
	t.Run("holder dies after the first return step", func(t *testing.T) {
		d := newDomain(t, "fh")
		root := d.addShare("data")
		base := t.TempDir()
		cache, mnt := filepath.Join(base, "ca"), filepath.Join(base, "ma")
		a := mountBack(t, d.admin, cache, mnt, "PANDO_FAULT=vfs.deleg.first-return")
		b := mountAgent(t, d.admin, "--consistency", "callback")
		at := func(x *agentProc, name string) string { return filepath.Join(x.dir, "fh", "data", name) }
		backChannel(t, a, filepath.Join(a.dir, "fh", "data"))
		data := randomBytes(6, 3<<20+999)
		if err := os.WriteFile(at(a, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		// The reader's recall makes the holder crash once its data is
		// committed at the share and the delegation returned (in one
		// step: the commit brings all of it at once); the reader gets
		// the data, and the holder's restart has nothing left to send.
		f, err := os.Open(at(b, "f"))
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4096)
		if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, data[:4096]) {
			t.Fatalf("the reader's first block differs (%v)", err)
		}
		f.Close()
		<-a.done
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		if !strings.Contains(a.output(), "crashing at vfs.deleg.first-return") {
			t.Fatalf("the holder did not crash where it was told:\n%s", a.output())
		}
		a = mountBack(t, d.admin, cache, mnt)
		t.Cleanup(func() { a.unmount(t) })
		if !waitFor(30*time.Second, func() bool {
			got, _ := os.ReadFile(filepath.Join(root, "f"))
			return bytes.Equal(got, data)
		}) {
			t.Fatalf("the rest of the file did not reach the share after the holder came back:\n%s", a.output())
		}
	})

	t.Run("share dies in the middle of the recall's commit", func(t *testing.T) {
		d := newDomain(t, "fs")
		root := d.addShare("data")
		d.shares["data"].stop(t)
		d.startShare("data", "PANDO_FAULT=share.commit.mid-copy")
		base := t.TempDir()
		a := mountBack(t, d.admin, filepath.Join(base, "ca"), filepath.Join(base, "ma"))
		t.Cleanup(func() { a.unmount(t) })
		b := mountAgent(t, d.admin, "--consistency", "callback")
		at := func(x *agentProc, name string) string { return filepath.Join(x.dir, "fs", "data", name) }
		backChannel(t, a, filepath.Join(a.dir, "fs", "data"))
		data := randomBytes(7, 2<<20+31)
		if err := os.WriteFile(at(a, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		share := d.shares["data"]
		done := make(chan struct{})
		go func() { os.ReadFile(at(b, "f")); close(done) }() // fails or waits: the share dies under it
		select {
		case <-share.done:
		case <-time.After(time.Minute):
			t.Fatalf("the share did not crash in the recall's commit:\n%s", share.output())
		}
		if !strings.Contains(share.output(), "crashing at share.commit.mid-copy") {
			t.Fatalf("the share did not crash where it was told:\n%s", share.output())
		}
		d.startShare("data")
		<-done
		// The restarted share completes the commit from its stage before
		// it serves; the holder finds its data there, and the reader's
		// next look gets everything.
		got, err := os.ReadFile(at(b, "f"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after the share came back the reader got %d bytes (%v), not the %d written\nholder:\n%s", len(got), err, len(data), a.output())
		}
		if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, data) {
			t.Errorf("the share holds %d bytes, not the data", len(got))
		}
	})
}
