package e2e

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shareFile describes a file at the share as the tests compare it before
// and after: mode, owner and hash.
func shareFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%v uid %d gid %d size %d sha256 %x", st.Mode(), sys.Uid, sys.Gid, st.Size(), sha256.Sum256(b))
}

// noUnsent checks that the agent holds nothing to send: per its counters
// and per the cache's index (pando cache ls).
func noUnsent(t *testing.T, a *agentProc, what string) {
	t.Helper()
	if n := a.stats(t)["unsent"].(float64); n != 0 {
		t.Fatalf("%s: the agent counts %v files unsent\n%s", what, n, a.output())
	}
	out, err := exec.Command(pandoBin, "cache", "ls", "--cache-dir", a.cacheDir).CombinedOutput()
	if err != nil {
		t.Fatalf("pando cache ls: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "dirty") {
		t.Fatalf("%s: pando cache ls shows dirty data:\n%s", what, out)
	}
}

// readIs checks that p reads as want through the mount, size included.
func readIs(t *testing.T, p string, want []byte, what string) {
	t.Helper()
	if d := fileDiff(p, want); d != "" {
		t.Fatalf("%s: the mount does not read the share's version: %s", what, d)
	}
	if st, err := os.Stat(p); err != nil || st.Size() != int64(len(want)) {
		t.Fatalf("%s: stat through the mount: %v, %v (want size %d)", what, st, err, len(want))
	}
}

// attackRefusedWrite: a user who may only read opens a file
// cached by their mount for writing, writes and closes. The write or the
// close fails with EACCES; at once the mount reads the share's version,
// holds nothing unsent, and the share's file is unchanged; an agent
// restarted on the same cache brings nothing back, and reads go on.
func attackRefusedWrite(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"through", []string{"--write", "through"}},
		{"close", []string{"--write", "close"}},
		{"callback-back", []string{"--consistency", "callback", "--write", "back"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			d := newDomain(t, "rf")
			root := d.addShare("data")
			original := randomBytes(1, 300<<10+17) // several cache blocks, not block-aligned
			if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
				t.Fatal(err)
			}
			before := shareFile(t, filepath.Join(root, "f"))
			bob := d.addUser("bob")
			d.pando(d.admin, "acl", "set", "/rf/data", "bob", "read").ok()

			c := newCrashAgent(t, bob)
			a := c.run("", mode.args...)
			p := filepath.Join(c.mnt, "rf", "data", "f")
			readIs(t, p, original, "first read")

			// Over the first block's end and past the file's end.
			refused := bytes.Repeat([]byte("REFUSED "), 40<<10)
			var werr, cerr error
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err == nil {
				_, werr = f.WriteAt(refused, 100)
				cerr = f.Close()
			}
			switch {
			case err != nil:
				if !errors.Is(err, syscall.EACCES) {
					t.Fatalf("open for writing: %v, want EACCES or success", err)
				}
			case werr != nil:
				if !errors.Is(werr, syscall.EACCES) {
					t.Fatalf("write: %v, want EACCES", werr)
				}
			case !errors.Is(cerr, syscall.EACCES):
				t.Fatalf("write succeeded and close said %v, want EACCES", cerr)
			}
			t.Logf("open: %v; write: %v; close: %v", err, werr, cerr)

			readIs(t, p, original, "right after the refusal")
			noUnsent(t, a, "right after the refusal")
			if got := shareFile(t, filepath.Join(root, "f")); got != before {
				t.Fatalf("the share's file changed:\n%s\n%s", before, got)
			}

			// Nothing comes back with the agent, nor with its retry.
			a.unmount(t)
			a = c.run("", mode.args...)
			readIs(t, p, original, "after a restart")
			time.Sleep(2 * time.Second) // the retry's first rounds
			noUnsent(t, a, "after a restart")
			readIs(t, p, original, "after the retry's first rounds")
			if got := shareFile(t, filepath.Join(root, "f")); got != before {
				t.Fatalf("the share's file changed after a restart:\n%s\n%s", before, got)
			}
			if n := a.stats(t)["refused"].(float64); n != 0 {
				t.Errorf("the restarted agent met %v refusals: the refused data came back\n%s", n, a.output())
			}
		})
	}
}

// TestRefusedWriteKeptBack: data kept back under a write delegation, whose
// holder then loses the right to write, is dropped when the share refuses
// it (no retry): the delegation is given back, the mount reads the share's
// version, and the share's file is unchanged.
func TestRefusedWriteKeptBack(t *testing.T) {
	d := newDomain(t, "rb")
	root := d.addShare("data")
	original := randomBytes(2, 200<<10+3)
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	before := shareFile(t, filepath.Join(root, "f"))
	bob := d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/rb/data", "bob", "write").ok()

	c := newCrashAgent(t, bob)
	a := c.run("", "--consistency", "callback", "--write", "back")
	p := filepath.Join(c.mnt, "rb", "data", "f")
	readIs(t, p, original, "first read")
	backChannel(t, a, filepath.Join(c.mnt, "rb", "data"))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("KEPT BACK, THEN REFUSED"), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if delegStat(t, a, "held") != 1 {
		t.Fatalf("no write delegation held after the close\n%s", a.output())
	}
	if got := shareFile(t, filepath.Join(root, "f")); got != before {
		t.Fatalf("kept-back data reached the share before the test took the right away")
	}
	d.pando(d.admin, "acl", "set", "/rb/data", "bob", "read").ok()

	// The delegation's timer sends the data a few seconds after the close.
	eventually(t, time.Minute, "the agent drops the refused data", func() bool {
		return a.stats(t)["refused"].(float64) == 1
	})
	if n := delegStat(t, a, "held"); n != 0 {
		t.Errorf("%v write delegations still held after the refusal", n)
	}
	noUnsent(t, a, "after the refusal")
	readIs(t, p, original, "after the refusal")
	if got := shareFile(t, filepath.Join(root, "f")); got != before {
		t.Fatalf("the share's file changed:\n%s\n%s", before, got)
	}
	// The log reaches the test through a pipe: give it a moment.
	eventually(t, 10*time.Second, "the agent says it dropped refused data", func() bool {
		return strings.Contains(a.output(), "the share refused written data")
	})
	// Never tried again.
	time.Sleep(2 * time.Second)
	if n := a.stats(t)["refused"].(float64); n != 1 {
		t.Errorf("%v refusals: the data was tried again", n)
	}
}

// TestRefusedUnsentAfterRestart: a close that failed (the agent stopped
// before sending) leaves the data unsent; the user loses the right to
// write meanwhile; the restarted agent's replay drops the data when the
// share refuses it, and never tries it again.
func TestRefusedUnsentAfterRestart(t *testing.T) {
	d := newDomain(t, "ru")
	root := d.addShare("data")
	original := randomBytes(3, 100<<10)
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	before := shareFile(t, filepath.Join(root, "f"))
	bob := d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/ru/data", "bob", "write").ok()

	c := newCrashAgent(t, bob)
	c.run("vfs.writeback.before-send")
	p := filepath.Join(c.mnt, "ru", "data", "f")
	readIs(t, p, original, "first read")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("UNSENT, THEN REFUSED"), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err == nil {
		t.Fatal("close succeeded although the agent died before sending")
	}
	c.died("vfs.writeback.before-send")
	d.pando(d.admin, "acl", "set", "/ru/data", "bob", "read").ok()

	a := c.run("")
	eventually(t, time.Minute, "the replay drops the refused data", func() bool {
		return a.stats(t)["refused"].(float64) == 1
	})
	noUnsent(t, a, "after the replay")
	readIs(t, p, original, "after the replay")
	if got := shareFile(t, filepath.Join(root, "f")); got != before {
		t.Fatalf("the share's file changed:\n%s\n%s", before, got)
	}
	if strings.Contains(a.output(), "unsent data waits for its share") {
		t.Errorf("the refused data was taken for data waiting for its share:\n%s", a.output())
	}
	a.unmount(t)
	a = c.run("")
	time.Sleep(2 * time.Second)
	noUnsent(t, a, "after a second restart")
	if n := a.stats(t)["refused"].(float64); n != 0 {
		t.Errorf("the refused data came back after a second restart (%v refusals)", n)
	}
	readIs(t, p, original, "after a second restart")
}
