package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/transfer"
	"pando.dev/pando/internal/wan"
)

// shareVia starts share name listening on a free port and advertising
// advertise (a proxy in front of it); it returns the listen address.
func (d *domain) shareVia(name, listen, advertise string) {
	d.t.Helper()
	if d.roots[name] == "" {
		d.roots[name] = filepath.Join(d.dir, "export-"+name)
		os.MkdirAll(d.roots[name], 0o755)
	}
	p, _ := start(d.t, `share \S+ exporting`, nil, "share", "--config", d.admin, "--root", d.roots[name], "--name", name,
		"--listen", listen, "--advertise", advertise, "--state", filepath.Join(d.dir, "share-state"), "--protection", "private,safe,clear")
	d.shares[name] = p
}

func cpSummary(t *testing.T, path string) transfer.Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s transfer.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCopyKillResume kills `pando cp` at random points (seeded) and resumes:
// each resumed run moves exactly the bytes its journal lacked, and the
// result is identical to the source.
func TestCopyKillResume(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	d := newDomain(t, "k")
	d.addShare("data")
	// Slow the link down so that a copy takes seconds.
	listen := testenv.FreePort(t)
	px, err := wan.Listen("127.0.0.1:0", listen, wan.Config{RTT: 2 * time.Millisecond, Rate: 16e6}) // 2 MB/s a stream
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	d.shareVia("slow", listen, px.Addr())
	d.pando(d.admin, "ns", "mount", "/k/slow", "slow").ok()

	dir := t.TempDir()
	src := filepath.Join(dir, "big")
	size := int64(12<<20 + 4321) // about 3 s over two streams
	if err := pattern.WriteFile(src, size); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(42, 7))
	cases := []struct{ from, to, local string }{
		{src, "pando://k/slow/big", filepath.Join(d.roots["slow"], "big")},
		{"pando://k/slow/big", filepath.Join(dir, "back"), filepath.Join(dir, "back")},
	}
	for _, c := range cases {
		for round := 0; round < 2; round++ {
			os.Remove(c.local)
			kill := time.Duration(1400+rng.IntN(1200)) * time.Millisecond
			cmd := exec.Command(pandoBin, "--config", d.admin, "cp", "-p", "2", "--block", "256KiB", c.from, c.to)
			if round == 1 {
				cmd.Args = append(cmd.Args[:4:4], append([]string{"--resume"}, cmd.Args[4:]...)...) // a resume can be interrupted too
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(kill)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			ents, _ := filepath.Glob(filepath.Join(state, "pando", "transfers", "*.json"))
			if len(ents) != 1 {
				t.Fatalf("%d journals after killing cp at %v", len(ents), kill)
			}
			_, _, committed, err := transfer.ReadJournal(ents[0])
			if err != nil {
				t.Fatal(err)
			}
			js := filepath.Join(dir, "summary.json")
			d.pando(d.admin, "cp", "--resume", "--json", js, "--block", "256KiB", c.from, c.to).ok()
			s := cpSummary(t, js)
			t.Logf("%s -> %s: killed at %v with %d of %d bytes committed; resume moved %d", c.from, c.to, kill, committed, size, s.Moved)
			if s.Skipped != committed || s.Moved != size-committed {
				t.Errorf("resume moved %d and skipped %d bytes; the journal held %d of %d", s.Moved, s.Skipped, committed, size)
			}
			if committed == 0 {
				t.Errorf("nothing was committed in %v", kill)
			}
			testenv.SameFile(t, src, c.local)
			if ents, _ := filepath.Glob(filepath.Join(state, "pando", "transfers", "*.json")); len(ents) != 0 {
				t.Errorf("journals left after success: %v", ents)
			}
		}
	}
}

// corrupter relays TCP and flips one byte of the server's stream once it
// has passed after bytes, n times in all.
type corrupter struct {
	ln     net.Listener
	to     string
	after  int64
	n      atomic.Int32
	flips  atomic.Int32
	closed sync.WaitGroup
}

func newCorrupter(t *testing.T, to string, after int64, n int32) *corrupter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &corrupter{ln: ln, to: to, after: after}
	c.n.Store(n)
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", to)
			if err != nil {
				a.Close()
				continue
			}
			go func() { io.Copy(b, a); b.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				var seen int64
				for {
					k, err := b.Read(buf)
					if k > 0 {
						if seen <= c.after && seen+int64(k) > c.after && c.n.Add(-1) >= 0 {
							buf[c.after-seen] ^= 0x40
							c.flips.Add(1)
						}
						seen += int64(k)
						if _, werr := a.Write(buf[:k]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				a.Close()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

// TestCopyCorruptBlock damages the stream from the share, under each data
// channel protection: the damage is detected (TLS or the record MAC refuse
// it and the connection drops; in clear, the frame's CRC32C), the block is
// fetched again, and the copy comes out whole.
func TestCopyCorruptBlock(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	d := newDomain(t, "c")
	listen := testenv.FreePort(t)
	cr := newCorrupter(t, listen, 3<<20, 0)
	d.shareVia("data", listen, cr.ln.Addr().String())
	d.pando(d.admin, "ns", "mount", "/c/data", "data").ok()
	src := filepath.Join(d.roots["data"], "f")
	if err := pattern.WriteFile(src, 16<<20); err != nil {
		t.Fatal(err)
	}
	for _, prot := range []string{"private", "safe", "clear"} {
		before := cr.flips.Load()
		cr.n.Store(2)
		dir := t.TempDir()
		js := filepath.Join(dir, "s.json")
		d.pando(d.admin, "cp", "--json", js, "-p", "2", "--protection", prot, "pando://c/data/f", filepath.Join(dir, "f")).ok()
		testenv.SameFile(t, src, filepath.Join(dir, "f"))
		if cr.flips.Load() == before {
			t.Errorf("%s: the corrupter damaged nothing; summary %+v", prot, cpSummary(t, js))
		}
	}
}

// TestCopyShareRestart kills the share in the middle of a copy and starts
// it again: the copy retries on its own and completes.
func TestCopyShareRestart(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	d := newDomain(t, "r")
	listen := testenv.FreePort(t)
	px, err := wan.Listen("127.0.0.1:0", listen, wan.Config{Rate: 16e6}) // 2 MB/s a stream
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	d.shareVia("data", listen, px.Addr())
	d.pando(d.admin, "ns", "mount", "/r/data", "data").ok()
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	size := int64(20 << 20)
	pattern.WriteFile(src, size)
	js := filepath.Join(dir, "s.json")
	cmd := exec.Command(pandoBin, "--config", d.admin, "cp", "--json", js, src, "pando://r/data/f")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	d.shares["data"].cmd.Process.Signal(syscall.SIGKILL)
	<-d.shares["data"].done
	time.Sleep(300 * time.Millisecond)
	d.shareVia("data", listen, px.Addr())
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cp across a share restart: %v\n%s", err, stderr.String())
	}
	testenv.SameFile(t, src, filepath.Join(d.roots["data"], "f"))
	if s := cpSummary(t, js); s.Retries == 0 || s.Moved < size {
		t.Errorf("summary %+v", s)
	}
}

// TestCopyDiskFull copies onto a small file system: a clear error, a
// journal of what is safe, and a resume that finishes once there is room.
func TestCopyDiskFull(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	d := newDomain(t, "f")
	root := d.addShare("data")
	src := filepath.Join(root, "f")
	size := int64(12 << 20)
	pattern.WriteFile(src, size)
	mnt := t.TempDir()
	if !mountTmpfs(t, mnt, "size=8m") {
		t.Skip("the test needs a small file system")
	}
	dst := filepath.Join(mnt, "f")
	r := d.pando(d.admin, "cp", "pando://f/data/f", dst).fails(1, "full", "--resume")
	if !strings.Contains(r.stderr, dst) {
		t.Errorf("the error does not name the file: %s", r.stderr)
	}
	if out, err := exec.Command("mount", "-o", "remount,size=32m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("growing the tmpfs: %v: %s", err, out)
	}
	js := filepath.Join(t.TempDir(), "s.json")
	d.pando(d.admin, "cp", "--resume", "--json", js, "pando://f/data/f", dst).ok()
	testenv.SameFile(t, src, dst)
	if s := cpSummary(t, js); s.Skipped == 0 || s.Moved+s.Skipped != size {
		t.Errorf("resume after a full disk: %+v", s)
	}
}

// TestCopyThirdParty copies a tree between two share processes through the
// binary: the data goes share to share, none of it through the client.
func TestCopyThirdParty(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	d := newDomain(t, "tp")
	a := d.addShare("a")
	b := d.addShare("b")
	os.MkdirAll(filepath.Join(a, "run", "logs"), 0o755)
	pattern.WriteFile(filepath.Join(a, "run", "big"), 9<<20+1)
	for i := range 20 {
		os.WriteFile(filepath.Join(a, "run", "logs", strings.Repeat("x", i+1)), bytes.Repeat([]byte{byte(i)}, 1000*i), 0o644)
	}
	js := filepath.Join(t.TempDir(), "s.json")
	d.pando(d.admin, "cp", "-r", "--verify", "--json", js, "pando://tp/a/run", "pando://tp/b/").ok()
	s := cpSummary(t, js)
	if !s.ThirdParty || s.ClientData != 0 || s.Files != 21 || s.Moved != s.Bytes {
		t.Errorf("summary %+v", s)
	}
	filepath.Walk(filepath.Join(a, "run"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(a, p)
			testenv.SameFile(t, p, filepath.Join(b, rel))
		}
		return nil
	})
	// A user who may only read b cannot write there through a share either.
	bob := d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/tp", "bob", "rl").ok()
	d.pando(bob, "cp", "pando://tp/a/run/big", "pando://tp/b/bobs").fails(4, "lacks the insert right")
}
