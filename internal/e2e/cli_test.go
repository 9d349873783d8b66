package e2e

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLI exercises every CLI command against a controller and two shares,
// each its own process.
func TestCLI(t *testing.T) {
	d := newDomain(t, "uva")
	alphaRoot := d.addShare("alpha")
	d.addShare("beta")
	a := d.admin

	// Namespace and shares.
	ns := d.pando(a, "ns", "ls").ok().stdout
	for _, want := range []string{"/uva/alpha", "/uva/beta"} {
		if !strings.Contains(ns, want) {
			t.Errorf("ns ls lacks %s:\n%s", want, ns)
		}
	}
	shares := d.pando(a, "share", "ls").ok().stdout
	if strings.Count(shares, "online") != 2 {
		t.Errorf("share ls should show two online shares:\n%s", shares)
	}
	if got := d.pando(a, "ls", "/uva").ok().stdout; got != "alpha/\nbeta/\n" {
		t.Errorf("ls /uva = %q", got)
	}
	if got := d.pando(a, "whoami").ok().stdout; !strings.HasPrefix(got, "admin@uva") {
		t.Errorf("whoami = %q", got)
	}

	// Files: put, ls, stat, cat, get.
	local := t.TempDir()
	payload := make([]byte, 3<<20+17)
	rand.Read(payload)
	src := filepath.Join(local, "blob.bin")
	os.WriteFile(src, payload, 0o640)
	d.pando(a, "mkdir", "-p", "/uva/alpha/x/y").ok()
	d.pando(a, "put", src, "/uva/alpha/x/y/").ok()
	if got, _ := os.ReadFile(filepath.Join(alphaRoot, "x/y/blob.bin")); !bytes.Equal(got, payload) {
		t.Fatalf("put: the share holds %d bytes, want the %d put", len(got), len(payload))
	}
	if ls := d.pando(a, "ls", "-l", "/uva/alpha/x/y").ok().stdout; !strings.Contains(ls, "3145745") || !strings.Contains(ls, "-rw-r-----") {
		t.Errorf("ls -l lacks size or mode:\n%s", ls)
	}
	if st := d.pando(a, "stat", "/uva/alpha/x/y/blob.bin").ok().stdout; !strings.Contains(st, "Size: 3145745") || !strings.Contains(st, "regular file") {
		t.Errorf("stat:\n%s", st)
	}
	if cat := d.pando(a, "cat", "/uva/alpha/x/y/blob.bin").ok().stdout; cat != string(payload) {
		t.Errorf("cat returned %d bytes, want %d", len(cat), len(payload))
	}
	dst := filepath.Join(local, "back.bin")
	d.pando(a, "get", "pando://uva/alpha/x/y/blob.bin", dst).ok()
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, payload) {
		t.Fatalf("get returned different bytes")
	}

	// Trees.
	tree := filepath.Join(local, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(tree, "sub", "b.txt"), []byte("bb"), 0o644)
	d.pando(a, "put", "-r", tree, "/uva/beta/").ok()
	d.pando(a, "get", "-r", "/uva/beta/tree", filepath.Join(local, "tree2")).ok()
	if got, _ := os.ReadFile(filepath.Join(local, "tree2", "sub", "b.txt")); string(got) != "bb" {
		t.Errorf("get -r lost sub/b.txt: %q", got)
	}

	// mv, ln, ln -s, rm.
	d.pando(a, "mv", "/uva/beta/tree/a.txt", "/uva/beta/tree/c.txt").ok()
	d.pando(a, "cat", "/uva/beta/tree/a.txt").fails(3, "/uva/beta/tree/a.txt", "no such file")
	d.pando(a, "mv", "/uva/beta/tree/c.txt", "/uva/alpha/c.txt").fails(1, "same mount")
	d.pando(a, "ln", "/uva/beta/tree/c.txt", "/uva/beta/tree/hard.txt").ok()
	if st := d.pando(a, "stat", "/uva/beta/tree/hard.txt").ok().stdout; !strings.Contains(st, "Links: 2") {
		t.Errorf("hard link count:\n%s", st)
	}
	d.pando(a, "ln", "-s", "c.txt", "/uva/beta/tree/soft").ok()
	if cat := d.pando(a, "cat", "/uva/beta/tree/soft").ok().stdout; cat != "a" {
		t.Errorf("cat through a symlink = %q", cat)
	}
	if ls := d.pando(a, "ls", "-l", "/uva/beta/tree").ok().stdout; !strings.Contains(ls, "soft -> c.txt") {
		t.Errorf("ls -l does not show the link target:\n%s", ls)
	}
	d.pando(a, "rm", "/uva/beta/tree").fails(1, "is a directory")
	d.pando(a, "rm", "-r", "/uva/beta/tree").ok()
	d.pando(a, "ls", "/uva/beta/tree").fails(3, "no such file")
	d.pando(a, "mkdir", "/uva/beta/empty").ok()
	d.pando(a, "rm", "-d", "/uva/beta/empty").ok()

	// Mount table changes.
	d.pando(a, "ns", "mount", "/uva/alpha-x", "alpha:x").ok()
	if ls := d.pando(a, "ls", "/uva/alpha-x").ok().stdout; ls != "y/\n" {
		t.Errorf("a mount of a share's subdirectory lists %q", ls)
	}
	d.pando(a, "ns", "mount", "/uva/alpha-x", "alpha").fails(6, "already a mount")
	d.pando(a, "ns", "mount", "/uva/nope", "nosuchshare").fails(3, "not registered")
	d.pando(a, "ns", "unmount", "/uva/alpha-x").ok()
	d.pando(a, "ns", "mount", "/uva/alpha-x", "alpha:x", "--replica", "nosuchshare").fails(3, "not registered")
	d.pando(a, "ns", "mount", "/uva/alpha-x", "alpha:x", "--replica", "alpha:y").fails(1, "a second time")
	d.pando(a, "ns", "mount", "/uva/alpha-x", "alpha:x", "--replica", "beta:copy/x").ok()
	if ls := d.pando(a, "ls", "/uva/alpha-x").ok().stdout; ls != "y/\n" {
		t.Errorf("a mount with a replica lists %q, not its primary's files", ls)
	}
	ns = d.pando(a, "ns", "ls").ok().stdout
	for _, want := range []string{"/uva/alpha-x  alpha  /x       primary", "/uva/alpha-x  beta   /copy/x  replica"} {
		if !strings.Contains(ns, want) {
			t.Errorf("ns ls lacks %q:\n%s", want, ns)
		}
	}
	d.pando(a, "ns", "unmount", "/uva/alpha-x").ok()
	d.pando(a, "ls", "/uva/alpha-x").fails(3, "no share is mounted")

	// Users and ACLs.
	alice := d.addUser("alice", "staff")
	if users := d.pando(a, "user", "ls").ok().stdout; !strings.Contains(users, "alice") || !strings.Contains(users, "staff") {
		t.Errorf("user ls:\n%s", users)
	}
	d.pando(alice, "cat", "/uva/alpha/x/y/blob.bin").fails(4, "alice@uva", "read")
	d.pando(a, "acl", "set", "/uva/alpha", "group:staff", "read").ok()
	if cat := d.pando(alice, "cat", "/uva/alpha/x/y/blob.bin").ok().stdout; cat != string(payload) {
		t.Errorf("alice reads %d bytes", len(cat))
	}
	d.pando(alice, "put", src, "/uva/alpha/x/alice.bin").fails(4, "alice@uva", "insert")
	acl := d.pando(alice, "acl", "get", "/uva/alpha/x").ok().stdout
	if !strings.Contains(acl, "group:staff") || !strings.Contains(acl, "your rights on /uva/alpha/x: rl") {
		t.Errorf("acl get:\n%s", acl)
	}
	d.pando(alice, "acl", "set", "/uva/alpha", "alice", "all").fails(4, "administer")
	d.pando(alice, "user", "add", "mallory").fails(4, "administer")
}

// TestCLIUsageErrors checks that mistakes get one clear sentence.
func TestCLIUsageErrors(t *testing.T) {
	d := newDomain(t, "uva")
	d.addShare("alpha")
	d.pando(d.admin, "cat").fails(1, "requires at least 1 arg")
	d.pando(d.admin, "cat", "/uva/alpha/missing").fails(3, "/uva/alpha/missing", "no such file")
	d.pando(d.admin, "cat", "/elsewhere/x").fails(3, `domain "elsewhere" is not linked`)
	d.pando(d.admin, "cat", "http://example.org/x").fails(1, "only pando:// URLs")
	d.pando(d.admin, "acl", "set", "/uva/alpha", "bob", "rxz").fails(1, "x")
	runPando(t, "", filepath.Join(t.TempDir(), "none.json"), "ls").fails(4, "no pando configuration", "pando up")
	d.pando(d.admin, "ns", "mount", "/other/x", "alpha").fails(1, "below /uva/")
}
