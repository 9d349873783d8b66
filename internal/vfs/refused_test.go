package vfs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wan"
	"pando.dev/pando/internal/wire"
)

// userFS starts a file system for a new user of d with rights on
// /uva/alpha, over its own cache.
func userFS(t *testing.T, d *testenv.Domain, name, rights string, o Options) *FS {
	t.Helper()
	ctx := context.Background()
	admin := d.Client(d.Admin)
	if err := admin.Admin().ACLSet(ctx, "/uva/alpha", []wire.ACLEntry{{Who: name, Rights: rights}}, false); err != nil {
		t.Fatal(err)
	}
	u, err := admin.Admin().UserAdd(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Domain: d.Admin.Domain, Controller: d.Admin.Controller, User: name,
		CA: string(u.CA), Cert: string(u.Cert), Key: string(u.Key)}
	c, err := client.New(cfg, client.Options{Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := cache.Open(cache.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	v := New(c, client.Data(c), ch, o)
	t.Cleanup(v.Close)
	return v
}

// readAll reads p through a new read-only handle.
func readAll(t *testing.T, v *FS, p string) []byte {
	t.Helper()
	ctx := context.Background()
	h, err := v.Open(ctx, p, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	buf := make([]byte, 1<<20)
	n, err := h.Read(ctx, buf, 0)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return buf[:n]
}

// nothingDirty fails the test if the cache holds unsent data.
func nothingDirty(t *testing.T, v *FS, what string) {
	t.Helper()
	if keys := v.cache.DirtyKeys(); len(keys) != 0 {
		t.Fatalf("%s: the cache holds unsent data: %+v", what, keys)
	}
	if n := v.Unsent(); n != 0 {
		t.Fatalf("%s: %d files unsent", what, n)
	}
}

var original = []byte("the share's version, which only the owner may change\n")

// TestRefusedWriteFailsAtWrite: a user who may only read opens a cached
// file for writing; the write fails with a permission error, nothing
// enters the cache, and the file reads as the share's version.
func TestRefusedWriteFailsAtWrite(t *testing.T) {
	for _, mode := range []WriteMode{WriteClose, WriteThrough} {
		t.Run(mode.String(), func(t *testing.T) {
			d := testenv.New(t, "uva")
			root := d.AddShare("alpha")
			if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
				t.Fatal(err)
			}
			v := userFS(t, d, "bob", "read", Options{Write: mode})
			ctx := context.Background()
			const p = "/uva/alpha/f"
			if got := readAll(t, v, p); !bytes.Equal(got, original) {
				t.Fatalf("first read: %q", got)
			}
			h, err := v.Open(ctx, p, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.Write(ctx, []byte("REFUSED"), 4)
			if !errors.Is(err, fs.ErrPermission) || !wire.Permanent(err) {
				t.Fatalf("write by a user who may only read: %v", err)
			}
			nothingDirty(t, v, "after the refused write")
			// The handle still reads, the share's bytes.
			buf := make([]byte, 100)
			if n, err := h.Read(ctx, buf, 0); err != nil || !bytes.Equal(buf[:n], original) {
				t.Fatalf("read through the handle whose write was refused: %q, %v", buf[:n], err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatalf("close after the refused write: %v", err)
			}
			if got := readAll(t, v, p); !bytes.Equal(got, original) {
				t.Fatalf("read after the refused write: %q", got)
			}
			if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, original) {
				t.Fatalf("the share's file changed: %q", got)
			}
			nothingDirty(t, v, "at the end")
		})
	}
}

// waitUp waits until the client of v has found share back (its probe of
// a share marked down runs in the background).
func waitUp(t *testing.T, v *FS, share string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); v.c.DownErr(share) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("share %s is not found back: %v", share, v.c.DownErr(share))
		}
	}
}

// proxied adds share alpha behind a proxy that a test can cut and
// restore: down closes it (and its connections), up opens it again.
func proxied(t *testing.T, d *testenv.Domain) (root string, down, up func()) {
	t.Helper()
	shareAddr, proxyAddr := testenv.FreePort(t), testenv.FreePort(t)
	listen := func() *wan.Proxy {
		px, err := wan.Listen(proxyAddr, shareAddr, wan.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return px
	}
	px := listen()
	t.Cleanup(func() { px.Close() })
	root = d.AddShareAt("alpha", shareAddr, proxyAddr)
	return root, func() { px.Close() }, func() { px = listen() }
}

// TestRefusedAtCloseRevertsTheCache: data written while the share could
// not be reached is kept (a transient failure); when the share, back,
// refuses it at close, close fails with a permission error and the data
// leaves the cache at once: no retry, the file reads as the share's
// version again, through the same handle and new ones.
func TestRefusedAtCloseRevertsTheCache(t *testing.T) {
	d := testenv.New(t, "uva")
	root, down, up := proxied(t, d)
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	// Attributes trusted for an hour: the open below needs no share.
	v := userFS(t, d, "bob", "read", Options{Consistency: consistency.Consistency{Mode: consistency.ModeWindow, Period: time.Hour}})
	ctx := context.Background()
	const p = "/uva/alpha/f"
	if got := readAll(t, v, p); !bytes.Equal(got, original) {
		t.Fatalf("first read: %q", got)
	}
	down()
	h, err := v.Open(ctx, p, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	longer := []byte("REFUSED, and longer than the share's version of the file, by far\n")
	if _, err := h.Write(ctx, longer, 4); err != nil {
		t.Fatalf("write while the share is unreachable (kept for later): %v", err)
	}
	if len(v.cache.Dirty(h.key)) == 0 {
		t.Fatal("the write while the share is unreachable was not kept")
	}
	up()
	waitUp(t, v, "alpha")
	err = h.Flush(ctx)
	if !errors.Is(err, fs.ErrPermission) || !wire.Permanent(err) {
		t.Fatalf("close of data the share refuses: %v", err)
	}
	nothingDirty(t, v, "after the refused close")
	if n := v.Refusals(); n != 1 {
		t.Errorf("%d refusals counted", n)
	}
	buf := make([]byte, 200)
	if n, err := h.Read(ctx, buf, 0); err != nil || !bytes.Equal(buf[:n], original) {
		t.Fatalf("read through the handle after the refusal: %q, %v", buf[:n], err)
	}
	if a, err := h.Getattr(ctx); err != nil || a.Size != int64(len(original)) {
		t.Fatalf("the handle's size after the refusal: %d, %v", a.Size, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("the last close after the refused one: %v", err)
	}
	if got := readAll(t, v, p); !bytes.Equal(got, original) {
		t.Fatalf("read after the refusal: %q", got)
	}
	if a, err := v.GetAttr(ctx, p); err != nil || a.Size != int64(len(original)) {
		t.Fatalf("size after the refusal: %d, %v", a.Size, err)
	}
	if r := v.Replay(ctx, slog.New(slog.DiscardHandler)); r != (ReplayResult{}) {
		t.Errorf("a replay after the refusal found work: %+v", r)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, original) {
		t.Fatalf("the share's file changed: %q", got)
	}
}

// TestReplayDropsRefusedData: unsent data from before (a close that
// failed, an agent that stopped) that the share refuses is dropped at the
// first replay and never tried again; unsent data of a share that cannot
// be reached is kept and tried again.
func TestReplayDropsRefusedData(t *testing.T) {
	d := testenv.New(t, "uva")
	root, down, up := proxied(t, d)
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	v := userFS(t, d, "bob", "read", Options{})
	ctx := context.Background()
	const p = "/uva/alpha/f"
	a, err := v.GetAttr(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	key, err := v.Key(ctx, p, a)
	if err != nil {
		t.Fatal(err)
	}
	v.cache.Validate(key, a.Version, a.Size, p)
	if err := v.cache.WriteAt(ctx, key, []byte("REFUSED"), 4, func(ctx context.Context, b []byte, off int64) (int, error) {
		return copy(b, original[off:]), nil
	}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)

	down()
	if r := v.Replay(ctx, log); r.Waiting != 1 || r.Refused != 0 {
		t.Fatalf("replay while the share is unreachable: %+v", r)
	}
	if len(v.cache.Dirty(key)) == 0 {
		t.Fatal("the replay dropped data it could not send for a passing reason")
	}
	up()
	waitUp(t, v, "alpha")
	if r := v.Replay(ctx, log); r.Refused != 1 || r.Waiting != 0 || r.Sent != 0 {
		t.Fatalf("replay of data the share refuses: %+v", r)
	}
	nothingDirty(t, v, "after the replay")
	if r := v.Replay(ctx, log); r != (ReplayResult{}) {
		t.Fatalf("the refused data was tried again: %+v", r)
	}
	if got := readAll(t, v, p); !bytes.Equal(got, original) {
		t.Fatalf("read after the refusal: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, original) {
		t.Fatalf("the share's file changed: %q", got)
	}
}

// TestRevokedAtCloseDropsData: a user revoked between their write and
// their close gets an error at close; the data leaves the cache as soon
// as the share's refusal is known (a revoked credential is refused for
// good): at that close, or, when the share only cut the connection, at
// the first replay, which meets the refusal when it connects again.
func TestRevokedAtCloseDropsData(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	v := userFS(t, d, "carol", "write", Options{})
	ctx := context.Background()
	const p = "/uva/alpha/f"
	h, err := v.Open(ctx, p, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, []byte("WRITTEN BEFORE THE REVOCATION"), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Client(d.Admin).Admin().UserRevoke(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	// The share learns of the revocation on its own: wait until it
	// refuses carol.
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		_, err := v.c.Stat(ctx, p)
		if wire.Permanent(err) {
			break
		}
		if time.Since(t0) > 30*time.Second {
			t.Fatalf("the share still serves carol after her revocation: %v", err)
		}
	}
	err = h.Flush(ctx)
	if err == nil {
		t.Fatal("close after the revocation succeeded")
	}
	t.Logf("close after the revocation: %v", err)
	h.Release(ctx)
	log := slog.New(slog.DiscardHandler)
	if len(v.cache.DirtyKeys()) > 0 {
		// The close met the share handle its cut connection took along
		// (a passing failure); the replay meets the refusal.
		if r := v.Replay(ctx, log); r.Refused != 1 || r.Waiting != 0 {
			t.Fatalf("replay of a revoked user's data: %+v", r)
		}
	}
	nothingDirty(t, v, "after the refusal")
	if n := v.Refusals(); n != 1 {
		t.Errorf("%d refusals counted", n)
	}
	if r := v.Replay(ctx, log); r != (ReplayResult{}) {
		t.Errorf("a replay after the refusal found work: %+v", r)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, original) {
		t.Fatalf("the share's file changed: %q", got)
	}
}

// TestReaderCloseDropsRefusedData: unsent data that an earlier close left
// goes with the next close of the file, a reader's too; refused, it is
// dropped, and the reader's close, which wrote nothing, does not fail.
func TestReaderCloseDropsRefusedData(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	v := userFS(t, d, "bob", "read", Options{})
	ctx := context.Background()
	const p = "/uva/alpha/f"
	a, err := v.GetAttr(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	key, err := v.Key(ctx, p, a)
	if err != nil {
		t.Fatal(err)
	}
	v.cache.Validate(key, a.Version, a.Size, p)
	if err := v.cache.WriteAt(ctx, key, []byte("REFUSED"), 4, func(ctx context.Context, b []byte, off int64) (int, error) {
		return copy(b, original[off:]), nil
	}); err != nil {
		t.Fatal(err)
	}
	h, err := v.Open(ctx, p, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("a reader's close: %v", err)
	}
	nothingDirty(t, v, "after the reader's close")
	if n := v.Refusals(); n != 1 {
		t.Errorf("%d refusals counted", n)
	}
	if got := readAll(t, v, p); !bytes.Equal(got, original) {
		t.Fatalf("read after the refusal: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, original) {
		t.Fatalf("the share's file changed: %q", got)
	}
}
