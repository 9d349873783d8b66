package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// addShareWith is addShare with extra flags for the share process.
func (d *domain) addShareWith(name string, flags ...string) string {
	d.t.Helper()
	root := filepath.Join(d.dir, "export-"+name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		d.t.Fatal(err)
	}
	d.roots[name] = root
	args := append([]string{"share", "--config", d.admin, "--root", root, "--name", name,
		"--listen", "127.0.0.1:0", "--state", filepath.Join(d.dir, "share-state")}, flags...)
	d.shares[name], _ = start(d.t, `share \S+ exporting`, nil, args...)
	d.pando(d.admin, "ns", "mount", "/"+d.name+"/"+name, name).ok()
	return root
}

// rawSession dials the share as cfgPath's user and installs a token.
func rawSession(t *testing.T, d *domain, cfgPath, share, session string) (*rpc.Conn, uint32) {
	t.Helper()
	ctx := context.Background()
	var res wire.ResolveResp
	if err := d.client(cfgPath).ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/" + d.name + "/" + share}, &res); err != nil {
		t.Fatal(err)
	}
	conn := dialShare(t, cfgPath, res.Addrs[0], share)
	var auth wire.AuthResp
	if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: res.Token, Session: session}, nil, &auth, nil); err != nil {
		t.Fatal(err)
	}
	return conn, auth.Tok
}

// readAll opens gpath, reads it and closes it.
func readAll(ctx context.Context, c *client.Client, gpath string) (string, error) {
	f, err := c.Open(ctx, gpath, wire.OpenRead)
	if err != nil {
		return "", err
	}
	defer f.Close(ctx)
	buf := make([]byte, 64)
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && n == 0 {
		return "", err
	}
	return string(buf[:n]), nil
}

// attackOpenFiles: a user with read rights who opens one
// file more times than the share allows one principal gets a sentence
// naming the limit (EMFILE); another user opens and reads throughout;
// once the hog closes a file it may open again. Nothing at the share
// changes.
func attackOpenFiles(t *testing.T) {
	const limit = 5
	d := newDomain(t, "uva")
	root := d.addShareWith("data", "--max-open", "5")
	os.WriteFile(filepath.Join(root, "f"), []byte("shared"), 0o644)
	bobPath, alicePath := d.addUser("bob"), d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/uva/data", "bob", "read", "alice", "read").ok()
	ctx := context.Background()
	bob, alice := d.client(bobPath), d.client(alicePath)

	var held []*client.File
	for i := range limit {
		f, err := bob.Open(ctx, "/uva/data/f", wire.OpenRead)
		if err != nil {
			t.Fatalf("open %d of %d: %v", i+1, limit, err)
		}
		held = append(held, f)
	}
	_, err := bob.Open(ctx, "/uva/data/f", wire.OpenRead)
	if err == nil {
		t.Fatal("an open past the limit succeeded")
	}
	if want := "bob@uva has 5 files open on share data, the limit; close some"; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
	if wire.CodeOf(err) != wire.CodeTooManyOpen || !errors.Is(err, syscall.EMFILE) {
		t.Errorf("refusal code %d, want EMFILE", wire.CodeOf(err))
	}
	// The refusal is bob's alone: alice opens as many as she may, and
	// reads, through the library and the CLI.
	for i := range limit {
		if got, err := readAll(ctx, alice, "/uva/data/f"); err != nil || got != "shared" {
			t.Fatalf("alice's read %d while bob is at his limit: %q, %v", i, got, err)
		}
	}
	if got := d.pando(alicePath, "cat", "/uva/data/f").ok().stdout; got != "shared" {
		t.Errorf("alice's pando cat: %q", got)
	}
	// bob's open files still work; the CLI, another connection of his,
	// is refused with the same sentence.
	buf := make([]byte, 6)
	if n, err := held[0].ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "shared" {
		t.Errorf("a read through one of bob's open files: %q, %v", buf[:n], err)
	}
	d.pando(bobPath, "cat", "/uva/data/f").fails(1, "bob@uva has 5 files open on share data, the limit; close some")
	// Closing one lets bob open again, once.
	if err := held[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := bob.Open(ctx, "/uva/data/f", wire.OpenRead)
	if err != nil {
		t.Fatalf("an open after closing one: %v", err)
	}
	held[0] = f
	if _, err := bob.Open(ctx, "/uva/data/f", wire.OpenRead); wire.CodeOf(err) != wire.CodeTooManyOpen {
		t.Errorf("the limit after closing and opening one: %v", err)
	}
	for _, f := range held {
		f.Close(ctx)
	}
	if got, err := readAll(ctx, bob, "/uva/data/f"); err != nil || got != "shared" {
		t.Errorf("bob's read after closing all: %q, %v", got, err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "shared" {
		t.Errorf("the file changed: %q", got)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Errorf("the share's directory holds %d entries, want 1", len(ents))
	}
}

// attackConnections: a user's connection past the share's
// limit is refused with a sentence naming it, at its first call; another
// user connects throughout; a connection closed makes room for one.
func attackConnections(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShareWith("data", "--max-conns", "3")
	os.WriteFile(filepath.Join(root, "f"), []byte("shared"), 0o644)
	carolPath, alicePath := d.addUser("carol"), d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/uva/data", "carol", "read", "alice", "read").ok()
	ctx := context.Background()
	addr, _ := shareAddr(t, d, "data")
	ping := func(c *rpc.Conn) error {
		_, err := c.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil)
		return err
	}
	var conns []*rpc.Conn
	for i := range 3 {
		c := dialShare(t, carolPath, addr, "data")
		if err := ping(c); err != nil {
			t.Fatalf("connection %d of 3: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	over := dialShare(t, carolPath, addr, "data")
	err := ping(over)
	if want := "carol@uva has 3 connections open to share data, the limit"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a connection past the limit: %v, want %q", err, want)
	}
	if wire.CodeOf(err) != wire.CodeAgain {
		t.Errorf("refusal code %d, want EAGAIN", wire.CodeOf(err))
	}
	// alice is not limited by carol's connections: she has as many.
	for i := range 3 {
		if err := ping(dialShare(t, alicePath, addr, "data")); err != nil {
			t.Fatalf("alice's connection %d while carol is at her limit: %v", i+1, err)
		}
	}
	// carol's connections still serve her.
	if err := ping(conns[0]); err != nil {
		t.Errorf("carol's open connection: %v", err)
	}
	// One closed, one more may open (the share notices the close soon).
	conns[0].Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := dialShare(t, carolPath, addr, "data")
		err := ping(c)
		if err == nil {
			break
		}
		c.Close()
		if wire.CodeOf(err) != wire.CodeAgain || time.Now().After(deadline) {
			t.Fatalf("a connection after closing one: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// attackRequests: a user with as many requests waiting at
// the share as it allows one principal gets a sentence naming the limit
// for the next (EAGAIN); another user is served meanwhile; once the
// requests are answered the user is served again.
func attackRequests(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShareWith("data", "--max-requests", "3")
	os.WriteFile(filepath.Join(root, "f"), []byte("shared"), 0o644)
	davePath, alicePath := d.addUser("dave"), d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/uva/data", "dave", "read", "alice", "read").ok()
	ctx := context.Background()
	dave, tok := rawSession(t, d, davePath, "data", "s1")
	getattr := func(c *rpc.Conn, tok uint32) error {
		_, err := c.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: tok, Path: "f"}, nil, nil, nil)
		return err
	}
	// Three invalidation polls that wait for a change, which does not
	// come, hold three requests in flight for 10 s.
	var first wire.GetInvResp
	if _, err := dave.Call(ctx, wire.OpGetInv, wire.GetInvReq{Tok: tok, Session: "s1", Max: 100,
		Wait: int64(time.Millisecond), Lease: int64(time.Minute)}, nil, &first, nil); err != nil {
		t.Fatal(err)
	}
	polls := make(chan error, 3)
	poll := func() {
		var r wire.GetInvResp
		_, err := dave.Call(ctx, wire.OpGetInv, wire.GetInvReq{Tok: tok, Session: "s1", Since: first.Stamp, Max: 100,
			Wait: int64(10 * time.Second), Lease: int64(time.Minute)}, nil, &r, nil)
		polls <- err
	}
	for range 3 {
		go poll()
	}
	// A poll the share answers early (the session's state changed) is
	// sent again: what is tested is the limit on requests in flight.
	deadline := time.Now().Add(8 * time.Second)
	inFlight := 3
	var err error
	for {
		for drained := false; !drained; {
			select {
			case <-polls:
				if time.Now().Before(deadline) {
					go poll()
				} else {
					inFlight--
				}
			default:
				drained = true
			}
		}
		if err = getattr(dave, tok); err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := "dave@uva has 3 requests in progress at share data, the limit"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a request past the limit: %v, want %q", err, want)
	}
	if wire.CodeOf(err) != wire.CodeAgain {
		t.Errorf("refusal code %d, want EAGAIN", wire.CodeOf(err))
	}
	alice, atok := rawSession(t, d, alicePath, "data", "")
	if err := getattr(alice, atok); err != nil {
		t.Errorf("alice's request while dave is at his limit: %v", err)
	}
	// Once the polls are answered, dave is served.
	for range inFlight {
		select {
		case err := <-polls:
			if err != nil {
				t.Errorf("a poll: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the polls were not answered")
		}
	}
	if err := getattr(dave, tok); err != nil {
		t.Errorf("dave's request once his others were answered: %v", err)
	}
}
