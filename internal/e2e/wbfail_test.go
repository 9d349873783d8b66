package e2e

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A write-back that cannot be sent: counted, with its cause, in pando
// stats and /metrics; a reader waiting for it is told the cause by the
// share at once; and while a share is away, what writes may leave unsent
// in the cache is bounded (--max-unsent).

// unsentFile returns the entry of path in the agent's unsent files, if any.
func unsentFile(t *testing.T, a *agentProc, path string) map[string]any {
	t.Helper()
	list, _ := a.stats(t)["unsent_files"].([]any)
	for _, x := range list {
		if u, _ := x.(map[string]any); u != nil && u["path"] == path {
			return u
		}
	}
	return nil
}

// TestWriteBackFullShareCounted: data kept back under a write delegation
// whose write-back meets a full share is shown unsent with cause ENOSPC
// (stats, metrics); a reader through another agent, which recalls the
// delegation, fails with ENOSPC within seconds (the CLI says why); once
// space is freed the data arrives and nothing is unsent any more.
func TestWriteBackFullShareCounted(t *testing.T) {
	d, root := smallShare(t, "wf", "16m")
	old := randomBytes(11, 1<<20)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(root, "filler")
	if err := os.WriteFile(filler, make([]byte, 13<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	a := mountBack(t, d.admin, filepath.Join(base, "ca"), filepath.Join(base, "ma"))
	t.Cleanup(func() { a.unmount(t) })
	backChannel(t, a, filepath.Join(a.dir, "wf", "small"))
	data := randomBytes(12, 6<<20+5)
	if err := os.WriteFile(filepath.Join(a.dir, "wf", "small", "f"), data, 0o644); err != nil {
		t.Fatalf("a close kept back under a delegation failed: %v", err)
	}
	if n := delegStat(t, a, "granted"); n != 1 {
		t.Fatalf("%v write delegations granted, want 1", n)
	}

	// The delegation's timer tries to send it: the share is full.
	var u map[string]any
	eventually(t, time.Minute, "the holder shows the file unsent with cause ENOSPC", func() bool {
		u = unsentFile(t, a, "/wf/small/f")
		return u != nil && u["cause"] == "ENOSPC"
	})
	if u["kept_back"] != true || u["errno"].(float64) != float64(syscall.ENOSPC) || u["attempts"].(float64) < 1 || u["bytes"].(float64) < float64(len(data)) {
		t.Errorf("unsent entry of the kept back file: %v", u)
	}
	if n := a.stats(t)["unsent"].(float64); n != 1 {
		t.Errorf("pando stats counts %v unsent files, want 1 (data kept back counts)", n)
	}
	text := runPando(t, "", d.admin, "stats", "--cache-dir", a.cacheDir).ok().stdout
	t.Logf("pando stats of the holder:\n%s", text)
	if !strings.Contains(text, "/wf/small/f") || !strings.Contains(text, "ENOSPC") || !strings.Contains(text, "disk is full") {
		t.Errorf("pando stats does not show the unsent file with its cause:\n%s", text)
	}
	metrics := runPando(t, "", d.admin, "stats", "--metrics", "--cache-dir", a.cacheDir).ok().stdout
	if !strings.Contains(metrics, `pando_unsent_files{cause="ENOSPC"} 1`) || strings.Contains(metrics, "pando_unsent_bytes 0\n") {
		t.Errorf("metrics do not count the unsent file by its cause:\n%s", metrics)
	}
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("the share's file is not the old version: %s", diff)
	}

	// A reader through another agent recalls the delegation; the holder
	// answers that its data cannot be written, and the share says so.
	b := mountAgent(t, d.admin, "--consistency", "callback")
	start := time.Now()
	_, err := os.ReadFile(filepath.Join(b.dir, "wf", "small", "f"))
	took := time.Since(start)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a reader of a file whose holder cannot write it back to a full share: %v after %v, want ENOSPC\nholder:\n%s", err, took, a.output())
	}
	if took > 20*time.Second {
		t.Errorf("the reader was told after %v, want seconds", took)
	}
	t.Logf("the reader got ENOSPC after %v", took)
	r := d.pando(d.admin, "cat", "/wf/small/f")
	r.fails(1, "/wf/small/f", "could not be written to share small", "no space left on device")
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("after the failed recall, the share's file is not the old version: %s", diff)
	}

	// Space freed: the data arrives, nothing is unsent, the reader reads it.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the kept back data reaches the share once there is room", func() bool {
		return sameFile(filepath.Join(root, "f"), data)
	})
	eventually(t, 30*time.Second, "the holder shows nothing unsent", func() bool {
		st := a.stats(t)
		return st["unsent"].(float64) == 0 && st["unsent_files"] == nil
	})
	if got, err := os.ReadFile(filepath.Join(b.dir, "wf", "small", "f")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the reader, after space was freed: %v (%d bytes of %d)", err, len(got), len(data))
	}
	metrics = runPando(t, "", d.admin, "stats", "--metrics", "--cache-dir", a.cacheDir).ok().stdout
	if strings.Contains(metrics, "pando_unsent_files{") || !strings.Contains(metrics, "pando_unsent_bytes 0\n") {
		t.Errorf("metrics still count unsent data:\n%s", metrics)
	}
}

// TestMaxUnsentWhileShareDown: with the share killed, writes through a
// file held under a write delegation are kept in the cache up to
// --max-unsent; the write past it fails with EHOSTUNREACH and changes
// nothing; the close keeps the data back; what was accepted reaches the
// share when it returns. A bound that is not a size is refused.
func TestMaxUnsentWhileShareDown(t *testing.T) {
	d := newDomain(t, "mu")
	root := d.addShare("alpha")
	bad := filepath.Join(t.TempDir(), "mnt")
	os.MkdirAll(bad, 0o755)
	d.pando(d.admin, "mount", "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--max-unsent", "lots", bad).
		fails(2, "--max-unsent", "size")
	if mounted(bad) {
		t.Errorf("%s was mounted although --max-unsent was refused", bad)
	}

	base := t.TempDir()
	cache, mnt := filepath.Join(base, "ca"), filepath.Join(base, "ma")
	os.MkdirAll(mnt, 0o755)
	p, _ := start(t, `pando mounted at`, nil, "--config", d.admin, "mount", "--cache-dir", cache,
		"--consistency", "callback", "--write", "back", "--max-unsent", "4MiB", mnt)
	a := &agentProc{proc: p, dir: mnt, cacheDir: cache}
	t.Cleanup(func() { a.unmount(t) })
	dir := filepath.Join(mnt, "mu", "alpha")
	backChannel(t, a, dir)
	if st := a.stats(t); st["max_unsent"].(float64) != 4<<20 {
		t.Fatalf("max_unsent %v, want 4 MiB", st["max_unsent"])
	}

	f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const chunk = 1 << 20
	var accepted []byte
	write := func(seed uint64) error {
		b := randomBytes(seed, chunk)
		if _, err := f.WriteAt(b, int64(len(accepted))); err != nil {
			return err
		}
		accepted = append(accepted, b...)
		return nil
	}
	if err := write(1); err != nil {
		t.Fatal(err)
	}
	if n := delegStat(t, a, "granted"); n != 1 {
		t.Fatalf("%v write delegations granted, want 1", n)
	}

	share := d.shares["alpha"]
	share.signal(t, syscall.SIGKILL)
	<-share.done
	eventually(t, 30*time.Second, "the agent marks the share unreachable", func() bool {
		os.ReadDir(dir)
		shares, _ := a.stats(t)["shares"].([]any)
		for _, x := range shares {
			if s, _ := x.(map[string]any); s != nil && s["share"] == "alpha" && s["up"] == false {
				return true
			}
		}
		return false
	})

	var werr error
	for i := uint64(2); i < 20 && werr == nil; i++ {
		werr = write(i)
	}
	if !errors.Is(werr, syscall.EHOSTUNREACH) {
		t.Fatalf("writes with the share down past --max-unsent: %v, want EHOSTUNREACH", werr)
	}
	if len(accepted) < 3*chunk || len(accepted) > 4<<20 {
		t.Errorf("%d MiB accepted with the share down under --max-unsent 4MiB, want 3 or 4", len(accepted)>>20)
	}
	t.Logf("%d MiB accepted, then %v", len(accepted)>>20, werr)
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(accepted)) {
		t.Errorf("after the refused write the file has %v bytes (%v), want the %d accepted", fi.Size(), err, len(accepted))
	}
	if dirty := a.stats(t)["cache"].(map[string]any)["DirtyBytes"].(float64); dirty > 4<<20 {
		t.Errorf("the cache holds %v unsent bytes, past --max-unsent", dirty)
	}
	if err := f.Close(); err != nil {
		t.Errorf("closing a file kept back under a delegation with the share down: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || !bytes.Equal(got, accepted) {
		t.Errorf("reading the kept back file with the share down: %v (%d bytes of %d)", err, len(got), len(accepted))
	}
	if u := unsentFile(t, a, "/mu/alpha/f"); u == nil || u["kept_back"] != true {
		t.Errorf("the kept back file is not shown unsent: %v", u)
	}

	d.startShare("alpha")
	eventually(t, time.Minute, "the accepted data reaches the share when it returns", func() bool {
		return sameFile(filepath.Join(root, "f"), accepted)
	})
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), "conflict") {
			t.Errorf("a conflict copy was made: %s", e.Name())
		}
	}
}
