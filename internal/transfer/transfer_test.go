package transfer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

func opts(t *testing.T, d *testenv.Domain) Options {
	c, err := client.New(d.Admin, client.Options{Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return Options{Streams: 2, Block: 64 << 10, Retries: 3, JournalDir: t.TempDir(),
		Grid: func() (*client.Client, error) { return c, nil }}
}

func TestCopyFilesBothWays(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	o := opts(t, d)
	o.Verify = true
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	testenv.MakeFile(t, big, 3<<20+12345) // not a whole number of blocks
	small := filepath.Join(dir, "small")
	os.WriteFile(small, []byte("small file\n"), 0o640)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	ctx := context.Background()

	s, err := Copy(ctx, []string{big, small, empty}, "pando://t/data", o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Files != 3 || s.Moved != 3<<20+12345+11 || s.Verified != 3<<20+12345 {
		t.Errorf("summary %+v", s)
	}
	for _, n := range []string{"big", "small", "empty"} {
		testenv.SameFile(t, filepath.Join(dir, n), filepath.Join(root, n))
		a, _ := os.Stat(filepath.Join(dir, n))
		b, _ := os.Stat(filepath.Join(root, n))
		if !a.ModTime().Equal(b.ModTime()) {
			t.Errorf("%s: mtime %v, source %v", n, b.ModTime(), a.ModTime())
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, "small")); fi.Mode().Perm() != 0o640 {
		t.Errorf("small: mode %v", fi.Mode())
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), "pando-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	// And back, under another name.
	back := filepath.Join(dir, "back")
	if _, err := Copy(ctx, []string{"pando://t/data/big"}, back, o); err != nil {
		t.Fatal(err)
	}
	testenv.SameFile(t, big, back)
	// Onto a web source.
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	if _, err := Copy(ctx, []string{srv.URL + "/big"}, "pando://t/data/fromweb", o); err != nil {
		t.Fatal(err)
	}
	testenv.SameFile(t, big, filepath.Join(root, "fromweb"))
	if _, err := Copy(ctx, []string{big}, srv.URL+"/x", o); err == nil || !strings.Contains(err.Error(), "source only") {
		t.Errorf("copy to a web server: %v", err)
	}
	if _, err := Copy(ctx, []string{dir}, "pando://t/data/d", o); err == nil || !strings.Contains(err.Error(), "-r") {
		t.Errorf("directory without -r: %v", err)
	}
}

func TestCopyTree(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	o := opts(t, d)
	o.Recursive = true
	src := filepath.Join(t.TempDir(), "tree")
	for i := range 300 {
		p := filepath.Join(src, fmt.Sprintf("d%d", i%7), fmt.Sprintf("e%d", i%3), fmt.Sprintf("f%d", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, i*37), 0o644)
	}
	testenv.MakeFile(t, filepath.Join(src, "d0", "large"), 1<<20)
	ctx := context.Background()
	s, err := Copy(ctx, []string{src}, "pando://t/data", o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Files != 301 || s.Dirs != 1+7+21 {
		t.Errorf("summary %+v", s)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Copy(ctx, []string{"pando://t/data/tree"}, out, o); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(src, p)
		if !fi.IsDir() {
			testenv.SameFile(t, p, filepath.Join(root, "tree", rel))
			testenv.SameFile(t, p, filepath.Join(out, rel))
		}
		return nil
	})
	// A second run with --resume finds everything there.
	o.Resume = true
	s, err = Copy(ctx, []string{src}, "pando://t/data", o)
	if err != nil || s.Moved != 0 || s.Skipped != s.Bytes {
		t.Errorf("resume of a complete tree moved %d bytes, skipped %d of %d: %v", s.Moved, s.Skipped, s.Bytes, err)
	}
}

// interruptedCopy copies a new file of 8 MiB to pando://t/data/f at
// 8 MB/s, checkpointing often, and cancels the copy once its journal holds
// a part of the file. It returns the source, its size and the journal's
// path.
func interruptedCopy(t *testing.T, o Options) (string, int64, string) {
	t.Helper()
	o.Checkpoint = 20 * time.Millisecond
	o.Rate = 8 << 20 // 8 MB/s: about a second for the file
	src := filepath.Join(t.TempDir(), "f")
	size := int64(8<<20 + 777)
	testenv.MakeFile(t, src, size)
	jp := journalPath(o.JournalDir, src, "pando://t/data/f")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	o.Progress = func(Progress) {
		if _, _, committed, err := ReadJournal(jp); err == nil && committed > 0 {
			cancel()
		}
	}
	_, err := Copy(ctx, []string{src}, "pando://t/data/f", o)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("interrupted copy: %v", err)
	}
	return src, size, jp
}

// TestResumeMovesOnlyMissing interrupts a copy (cancelled context), then
// resumes: the bytes moved the second time are exactly those the journal
// did not hold.
func TestResumeMovesOnlyMissing(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	o := opts(t, d)
	src, size, jp := interruptedCopy(t, o)
	_, _, committed, err := ReadJournal(jp)
	if err != nil || committed == 0 || committed == size {
		t.Fatalf("journal after interruption: %d of %d committed, %v", committed, size, err)
	}
	o.Resume = true
	s, err := Copy(context.Background(), []string{src}, "pando://t/data/f", o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Skipped != committed || s.Moved != size-committed {
		t.Errorf("resume moved %d and skipped %d; the journal held %d of %d", s.Moved, s.Skipped, committed, size)
	}
	testenv.SameFile(t, src, filepath.Join(root, "f"))
	if _, err := os.Stat(jp); !os.IsNotExist(err) {
		t.Errorf("journal left after success: %v", err)
	}
	// Without --resume, a copy starts over.
	o.Resume = false
	s, _ = Copy(context.Background(), []string{src}, "pando://t/data/f", o)
	if s.Moved != size {
		t.Errorf("fresh copy moved %d of %d", s.Moved, size)
	}
}

// TestResumeNoSyncRechecks interrupts a copy made with NoSync, then
// damages a block its journal holds, as a machine crash that lost the page
// cache would: the resume checks the journaled blocks and moves that one
// again.
func TestResumeNoSyncRechecks(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	o := opts(t, d)
	o.NoSync = true
	src, size, jp := interruptedCopy(t, o)
	b, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	var jr journal
	if err := json.Unmarshal(b, &jr); err != nil {
		t.Fatal(err)
	}
	committed := jr.committed()
	if !jr.Unsynced || committed == 0 || committed == size {
		t.Fatalf("journal after interruption: %d of %d committed, unsynced %v", committed, size, jr.Unsynced)
	}
	lost := -1
	for i := range jr.Sums {
		if jr.done(i) {
			lost = i
			break
		}
	}
	part := filepath.Join(root, ".f.pando-part")
	pf, err := os.OpenFile(part, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pf.WriteAt(make([]byte, o.Block), int64(lost)*int64(o.Block)); err != nil {
		t.Fatal(err)
	}
	pf.Close()
	o.Resume, o.NoSync = true, false
	s, err := Copy(context.Background(), []string{src}, "pando://t/data/f", o)
	if err != nil {
		t.Fatal(err)
	}
	testenv.SameFile(t, src, filepath.Join(root, "f"))
	if s.Skipped != committed-int64(o.Block) || s.Moved != size-committed+int64(o.Block) {
		t.Errorf("resume moved %d and skipped %d; the journal held %d of %d, one block of %d of it lost",
			s.Moved, s.Skipped, committed, size, o.Block)
	}
}

func TestRing(t *testing.T) {
	r := newRing(4, 8, 3)
	ctx := context.Background()
	var got [][]byte
	for range 4 {
		got = append(got, r.get(ctx))
	}
	// Empty: a getter waits until three (the low mark) are free again.
	ready := make(chan []byte)
	go func() { ready <- r.get(ctx) }()
	time.Sleep(20 * time.Millisecond) // let it find the ring empty
	r.put(got[0])
	r.put(got[1])
	select {
	case <-ready:
		t.Fatal("a starved reader woke below the low water mark")
	case <-time.After(50 * time.Millisecond):
	}
	r.put(got[2])
	if b := <-ready; len(b) != 8 {
		t.Fatalf("buffer of %d bytes", len(b))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r2 := newRing(1, 8, 1)
	r2.get(ctx)
	if r2.get(cctx) != nil {
		t.Fatal("get on a cancelled context returned a buffer")
	}
}

// TestThirdParty copies between two shares: the data goes share to share
// (no file data through the client), with the user's rights, checked.
func TestThirdParty(t *testing.T) {
	d := testenv.New(t, "t")
	a := d.AddShare("a")
	b := d.AddShare("b")
	o := opts(t, d)
	o.Recursive, o.Verify = true, true
	os.MkdirAll(filepath.Join(a, "tree", "sub"), 0o755)
	testenv.MakeFile(t, filepath.Join(a, "tree", "big"), 5<<20+3)
	for i := range 50 {
		os.WriteFile(filepath.Join(a, "tree", "sub", fmt.Sprint(i)), bytes.Repeat([]byte{byte(i)}, i*100), 0o644)
	}
	ctx := context.Background()
	s, err := Copy(ctx, []string{"pando://t/a/tree"}, "pando://t/b", o)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ThirdParty || s.ClientData != 0 || s.Files != 51 || s.Moved != s.Bytes || s.Verified != 5<<20+3 {
		t.Errorf("summary %+v", s)
	}
	filepath.Walk(filepath.Join(a, "tree"), func(p string, fi os.FileInfo, err error) error {
		if !fi.IsDir() {
			rel, _ := filepath.Rel(a, p)
			testenv.SameFile(t, p, filepath.Join(b, rel))
		}
		return nil
	})
	// The same through the client, for contrast.
	o.ViaClient = true
	s, err = Copy(ctx, []string{"pando://t/a/tree/big"}, "pando://t/b/big2", o)
	if err != nil || s.ThirdParty || s.ClientData < 2*(5<<20) {
		t.Errorf("copy via the client: %+v %v", s, err)
	}
}

// TestProtection copies over data channels of each protection, and checks
// that a share refuses the ones its policy does not allow.
func TestProtection(t *testing.T) {
	d := testenv.New(t, "t")
	d.Protection = []string{"private", "safe", "clear"}
	open := d.AddShare("open")
	d.Protection = nil // private and safe
	d.AddShare("strict")
	src := filepath.Join(t.TempDir(), "f")
	testenv.MakeFile(t, src, 3<<20+5)
	for _, p := range []string{"private", "safe", "clear"} {
		c, err := client.New(d.Admin, client.Options{Streams: 2, Protection: p})
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Streams: 2, Block: 256 << 10, JournalDir: t.TempDir(), Verify: true,
			Grid: func() (*client.Client, error) { return c, nil }}
		if _, err := Copy(context.Background(), []string{src}, "pando://t/open/"+p, o); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		testenv.SameFile(t, src, filepath.Join(open, p))
		back := filepath.Join(t.TempDir(), "back")
		if _, err := Copy(context.Background(), []string{"pando://t/open/" + p}, back, o); err != nil {
			t.Fatalf("%s back: %v", p, err)
		}
		testenv.SameFile(t, src, back)
		if n := c.Counts()["ticket"]; (p == "private") != (n == 0) {
			t.Errorf("%s: %d tickets", p, n)
		}
		// Share to share, under the same protection: the destination's
		// policy holds for the pushing share too.
		s, err := Copy(context.Background(), []string{"pando://t/open/" + p}, "pando://t/open/tp-"+p, o)
		if err != nil || !s.ThirdParty {
			t.Fatalf("%s third-party: %+v %v", p, s, err)
		}
		testenv.SameFile(t, src, filepath.Join(open, "tp-"+p))
		_, terr := Copy(context.Background(), []string{"pando://t/open/" + p}, "pando://t/strict/tp-"+p, o)
		if (p == "clear") != (terr != nil) || terr != nil && !strings.Contains(terr.Error(), "does not allow clear") {
			t.Errorf("%s third-party to the strict share: %v", p, terr)
		}
		_, err = Copy(context.Background(), []string{src}, "pando://t/strict/"+p, o)
		if p == "clear" {
			if err == nil || !strings.Contains(err.Error(), "does not allow clear") {
				t.Errorf("clear to a share that refuses it: %v", err)
			}
		} else if err != nil {
			t.Errorf("%s to the strict share: %v", p, err)
		}
		c.Close()
	}
}

// TestForgedTicket: a data channel without TLS needs a ticket the share
// issued, and the key of the TLS session it was issued on.
func TestForgedTicket(t *testing.T) {
	d := testenv.New(t, "t")
	d.Protection = []string{"safe", "clear"}
	d.AddShare("s")
	for _, ch := range []byte{wire.ChannelDataSafe, wire.ChannelDataClear} {
		c, err := rpc.DialPlain(context.Background(), d.Shares["s"].Addr, ch, make([]byte, rpc.TicketSize), make([]byte, 32))
		if err == nil {
			_, err = c.Call(context.Background(), wire.OpPing, wire.Empty{}, nil, nil, nil)
			c.Close()
		}
		if err == nil {
			t.Errorf("channel %d opened with a forged ticket", ch)
		}
	}
}

// TestSourceShrinks: a source file truncated while a clear data channel
// sends it (the share's reads go straight from the file to the socket)
// fails the copy with a clear error that says to copy it again (not
// --resume: nothing of the old file can be kept), and the same command
// with --resume then copies the file as it now is.
func TestSourceShrinks(t *testing.T) {
	d := testenv.New(t, "t")
	d.Protection = []string{"clear"}
	root := d.AddShare("s")
	src := filepath.Join(root, "f")
	testenv.MakeFile(t, src, 8<<20)
	c, err := client.New(d.Admin, client.Options{Streams: 2, Protection: "clear"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := filepath.Join(t.TempDir(), "f")
	truncated := false
	o := Options{Streams: 2, Block: 256 << 10, Retries: 2, Rate: 8 << 20, JournalDir: t.TempDir(),
		Grid: func() (*client.Client, error) { return c, nil },
		Progress: func(p Progress) {
			if !truncated && p.Bytes >= 1<<20 {
				truncated = true
				if err := os.Truncate(src, 3<<20+7); err != nil {
					t.Error(err)
				}
			}
		}}
	_, err = Copy(context.Background(), []string{"pando://t/s/f"}, dst, o)
	if err == nil || !strings.Contains(err.Error(), "shrank") || !strings.Contains(err.Error(), "copy it again") || strings.Contains(err.Error(), "--resume") {
		t.Fatalf("copy of a file truncated under it: %v, want it to say the file shrank", err)
	}
	t.Log(err)
	if _, serr := os.Stat(dst); serr == nil {
		t.Errorf("a partial copy is in place")
	}
	o.Resume, o.Rate, o.Progress = true, 0, nil
	if _, err := Copy(context.Background(), []string{"pando://t/s/f"}, dst, o); err != nil {
		t.Fatalf("resume after the source shrank: %v", err)
	}
	testenv.SameFile(t, src, dst)
}
