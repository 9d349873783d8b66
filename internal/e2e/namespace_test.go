package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// linkedPair starts domains uva and tacc, each with a share named data
// (the names repeat), linked with the CLI (tacc admits uva's users, uva
// none of tacc's), and a user alice of uva whom both ACLs let write in
// data; it returns the domains and alice's configuration.
func linkedPair(t *testing.T) (uva, tacc *domain, alice string) {
	t.Helper()
	uva, tacc = newDomain(t, "uva"), newDomain(t, "tacc")
	uva.addShare("data")
	tacc.addShare("data")
	fpUva := strings.TrimSpace(uva.pando(uva.admin, "domain", "fingerprint").ok().stdout)
	fpTacc := strings.TrimSpace(tacc.pando(tacc.admin, "domain", "fingerprint").ok().stdout)
	tacc.pando(tacc.admin, "domain", "link", "uva", "--controller", uva.addr, "--fingerprint", fpUva).ok()
	uva.pando(uva.admin, "domain", "link", "tacc", "--controller", tacc.addr, "--fingerprint", fpTacc, "--admit", "none").ok()
	alice = uva.addUser("alice")
	uva.pando(uva.admin, "acl", "set", "/uva/data", "alice", "write").ok()
	tacc.pando(tacc.admin, "acl", "set", "/tacc/data", "alice@uva", "write").ok()
	return uva, tacc, alice
}

// TestOneNamespace links two domains, uva and tacc, each a controller and
// a share named data (the names repeat), with the CLI, and holds what one
// namespace promises a user of uva: tacc's namespace beside the home one
// at the root of the CLI and of the mount; a file of tacc read and written
// through the mount, through the CLI (ls, cat, put), through a gateway of
// uva and with pando cp (a copy between the two domains' shares share to
// share, each way), where tacc's ACL names alice@uva;
// under callback, a write through one mount read at once through another; a rename across the two
// refused with EXDEV; with tacc frozen, the home namespace served within
// its bounds and tacc's cached file readable, marked stale; and, once
// uva unlinks tacc, tacc gone from the CLI's and the mount's root.
func TestOneNamespace(t *testing.T) {
	uva, tacc, alice := linkedPair(t)
	uvaRoot, taccRoot := uva.roots["data"], tacc.roots["data"]
	hello := []byte("hello from tacc\n")
	if err := os.WriteFile(filepath.Join(taccRoot, "hello.txt"), hello, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(uvaRoot, "home.txt"), []byte("at home\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The CLI.
	if got := uva.pando(alice, "ls", "/").ok().stdout; got != "tacc/\nuva/\n" {
		t.Errorf("ls / = %q; want both domains", got)
	}
	if got := uva.pando(alice, "ls", "/tacc/data").ok().stdout; !strings.Contains(got, "hello.txt") {
		t.Errorf("ls /tacc/data = %q", got)
	}
	if got := uva.pando(alice, "cat", "/tacc/data/hello.txt").ok().stdout; got != string(hello) {
		t.Errorf("cat /tacc/data/hello.txt = %q", got)
	}
	local := filepath.Join(t.TempDir(), "put.txt")
	os.WriteFile(local, []byte("put by alice@uva\n"), 0o644)
	uva.pando(alice, "put", local, "/tacc/data/").ok()
	if b, err := os.ReadFile(filepath.Join(taccRoot, "put.txt")); err != nil || string(b) != "put by alice@uva\n" {
		t.Errorf("put into /tacc/data: the share holds %q, %v", b, err)
	}
	uva.pando(alice, "mv", "/uva/data/home.txt", "/tacc/data/home.txt").fails(1, "different domains")

	// pando cp, both ways between the domains and from a local file.
	uva.pando(alice, "cp", "pando://tacc/data/hello.txt", "pando://uva/data/from-tacc.txt").ok()
	if b, _ := os.ReadFile(filepath.Join(uvaRoot, "from-tacc.txt")); !bytes.Equal(b, hello) {
		t.Errorf("cp tacc -> uva: the home share holds %q", b)
	}
	big := filepath.Join(t.TempDir(), "big.bin")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	os.WriteFile(big, payload, 0o644)
	uva.pando(alice, "cp", big, "pando://tacc/data/big.bin").ok()
	// Between the two domains' shares, share to share: no file data
	// through alice's clients, each way.
	for _, c := range [][2]string{{"pando://tacc/data/big.bin", "pando://uva/data/big.bin"}, {"pando://uva/data/big.bin", "pando://tacc/data/back.bin"}} {
		var sum struct {
			ThirdParty bool  `json:"third_party"`
			ClientData int64 `json:"client_data_bytes"`
			Bytes      int64 `json:"bytes"`
		}
		out := uva.pando(alice, "cp", "--json", "-", c[0], c[1]).ok().stdout
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatalf("cp --json: %v: %q", err, out)
		}
		if !sum.ThirdParty || sum.ClientData != 0 || sum.Bytes != int64(len(payload)) {
			t.Errorf("cp %s %s: %+v; want the %d bytes share to share, none through the client", c[0], c[1], sum, len(payload))
		}
	}
	for _, p := range []string{filepath.Join(taccRoot, "big.bin"), filepath.Join(uvaRoot, "big.bin"), filepath.Join(taccRoot, "back.bin")} {
		if b, _ := os.ReadFile(p); !bytes.Equal(b, payload) {
			t.Errorf("cp: %s holds %d bytes, want the %d copied", p, len(b), len(payload))
		}
	}

	// The mount.
	a := mountAgent(t, alice)
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"tacc", "uva"}) {
		t.Errorf("the mount's root lists %v; want tacc, uva", names)
	}
	remoteFile := filepath.Join(a.dir, "tacc/data/hello.txt")
	if b, err := os.ReadFile(remoteFile); err != nil || !bytes.Equal(b, hello) {
		t.Fatalf("reading tacc's file through the mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "tacc/data/from-mount.txt"), []byte("written through uva's mount\n"), 0o644); err != nil {
		t.Fatalf("writing into tacc through the mount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(taccRoot, "from-mount.txt")); err != nil || string(b) != "written through uva's mount\n" {
		t.Errorf("the write through the mount: tacc's share holds %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(a.dir, "uva/data/home.txt")); err != nil || string(b) != "at home\n" {
		t.Errorf("reading the home file through the mount: %q, %v", b, err)
	}
	err = os.Rename(filepath.Join(a.dir, "uva/data/home.txt"), filepath.Join(a.dir, "tacc/data/home.txt"))
	if !errors.Is(err, syscall.EXDEV) {
		t.Errorf("a rename from uva to tacc through the mount: %v, want EXDEV", err)
	}

	// Under callback, tacc's share recalls what a mount of uva caches of
	// its files: a write and close through one mount is read at once
	// through the other.
	cb1, cb2 := mountAgent(t, alice, "--consistency", "callback"), mountAgent(t, alice, "--consistency", "callback")
	cbFile := func(a *agentProc) string { return filepath.Join(a.dir, "tacc/data/cb.txt") }
	if err := os.WriteFile(cbFile(cb1), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(cbFile(cb2)); err != nil || string(b) != "first" {
		t.Fatalf("the other mount reads %q, %v", b, err)
	}
	time.Sleep(300 * time.Millisecond) // the long polls are in place
	for i := range 5 {
		want := fmt.Sprintf("version %d", i)
		if err := os.WriteFile(cbFile(cb1), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(cbFile(cb2)); err != nil || string(b) != want {
			t.Errorf("under callback, after a write through one mount the other reads %q, %v; want %q", b, err, want)
		}
	}

	// A gateway of uva, serving alice.
	web := filepath.Join(uva.dir, "web.json")
	uva.pando(uva.admin, "user", "add", "web", "--gateway", "-o", web).ok()
	pw := filepath.Join(uva.dir, "passwd")
	runPando(t, "alice-password\n", web, "serve", "passwd", "--passwords", pw, "alice").ok()
	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(uva.dir, "gwcache"), "--passwords", pw)
	url, cacert := m[1], m[2]
	curl := func(args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--cacert", cacert, "-u", "alice:alice-password", "-w", "%{http_code}"}, args...)...).Output()
		return string(out)
	}
	if out := curl(url + "/tacc/data/hello.txt"); out != string(hello)+"200" {
		t.Errorf("GET /tacc/data/hello.txt through uva's gateway: %q", out)
	}
	if out := curl("-o", "/dev/null", "-T", local, url+"/tacc/data/gw.txt"); out != "201" {
		t.Errorf("PUT /tacc/data/gw.txt through uva's gateway: %s", out)
	}
	if b, err := os.ReadFile(filepath.Join(taccRoot, "gw.txt")); err != nil || string(b) != "put by alice@uva\n" {
		t.Errorf("the write through the gateway: tacc's share holds %q, %v", b, err)
	}

	// tacc stops answering (its controller and share frozen): the home
	// namespace keeps answering, and tacc's cached file stays readable,
	// marked stale.
	for _, p := range []*proc{tacc.ctrl, tacc.shares["data"]} {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGCONT) })
	}
	start := time.Now()
	if b, err := os.ReadFile(filepath.Join(a.dir, "uva/data/home.txt")); err != nil || string(b) != "at home\n" {
		t.Errorf("the home file with tacc frozen: %q, %v", b, err)
	}
	if _, err := os.ReadDir(filepath.Join(a.dir, "uva/data")); err != nil {
		t.Errorf("listing the home share with tacc frozen: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the home namespace took %v to answer with tacc frozen", took)
	}
	// Past the mount's window (3 s), the read must ask tacc again.
	time.Sleep(3500 * time.Millisecond)
	start = time.Now()
	b, err := os.ReadFile(remoteFile)
	if err != nil || !bytes.Equal(b, hello) {
		t.Errorf("tacc's cached file with tacc frozen: %q, %v; want it served stale", b, err)
	}
	t.Logf("tacc's cached file read in %v with tacc frozen", time.Since(start))
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("tacc's cached file took %v with tacc frozen", took)
	}
	if n, err := syscall.Getxattr(remoteFile, "user.pando.stale", make([]byte, 32)); err != nil || n == 0 {
		t.Errorf("tacc's cached file is not marked stale: %v", err)
	}

	// Unlinked, tacc leaves uva's namespace: the CLI's root at once, the
	// mount's once it reads the links again (5 s) and its window passes.
	uva.pando(uva.admin, "domain", "unlink", "tacc").ok()
	if got := uva.pando(alice, "ls", "/").ok().stdout; got != "uva/\n" {
		t.Errorf("ls / after the unlink = %q", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, err := os.ReadDir(a.dir)
		if err == nil && len(ents) == 1 && ents[0].Name() == "uva" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount's root after the unlink: %v, %v; want uva alone", ents, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "tacc/data/hello.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tacc's file through the mount after the unlink: %v, want not found", err)
	}
}

// garbageAt listens on addr and answers every connection with bytes that
// are no TLS (a frame header claiming 1 GiB, then noise), then holds it
// open without a word more, until the test ends.
func garbageAt(t *testing.T, addr string) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the process that held the port is just gone
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				c.Write([]byte{0x16, 0x03, 0x01, 0xff, 0xff, 0x40, 0, 0, 0}) // a handshake record of 64 KiB, then a 1 GiB message
				c.Write(bytes.Repeat([]byte{0x5a}, 1<<16))
			}()
		}
	}()
}

// TestHostileLinkedDomain: tacc's controller and share are replaced, at
// their addresses, by servers that send garbage and then hang. The home
// namespace of uva's mount and CLI keeps answering at once; tacc's part
// fails within seconds, and what the mount holds of tacc stays readable,
// marked stale.
func TestHostileLinkedDomain(t *testing.T) {
	uva, tacc, alice := linkedPair(t)
	uvaRoot, taccRoot := uva.roots["data"], tacc.roots["data"]
	os.WriteFile(filepath.Join(taccRoot, "hello.txt"), []byte("hello from tacc\n"), 0o644)
	os.WriteFile(filepath.Join(uvaRoot, "home.txt"), []byte("at home\n"), 0o644)
	a := mountAgent(t, alice)
	remoteFile := filepath.Join(a.dir, "tacc/data/hello.txt")
	if b, err := os.ReadFile(remoteFile); err != nil || string(b) != "hello from tacc\n" {
		t.Fatalf("reading tacc's file through the mount: %q, %v", b, err)
	}

	share := tacc.shares["data"]
	m := regexp.MustCompile(`exporting \S+ on (\S+)`).FindStringSubmatch(share.output())
	if m == nil {
		t.Fatalf("no share address in %q", share.output())
	}
	for _, p := range []*proc{tacc.ctrl, share} {
		p.stop(t)
	}
	garbageAt(t, tacc.addr)
	garbageAt(t, m[1])

	home := func(what string) {
		t.Helper()
		start := time.Now()
		if b, err := os.ReadFile(filepath.Join(a.dir, "uva/data/home.txt")); err != nil || string(b) != "at home\n" {
			t.Errorf("%s: the home file: %q, %v", what, b, err)
		}
		if _, err := os.ReadDir(filepath.Join(a.dir, "uva/data")); err != nil {
			t.Errorf("%s: listing the home share: %v", what, err)
		}
		if err := os.WriteFile(filepath.Join(a.dir, "uva/data/w.txt"), []byte(what), 0o644); err != nil {
			t.Errorf("%s: writing at home: %v", what, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: the home namespace took %v", what, took)
		}
	}
	home("tacc hostile")
	time.Sleep(3500 * time.Millisecond) // past the mount's window: reads ask tacc again
	start := time.Now()
	if b, err := os.ReadFile(remoteFile); err != nil || string(b) != "hello from tacc\n" {
		t.Errorf("tacc's cached file with tacc hostile: %q, %v; want it served stale", b, err)
	}
	if n, err := syscall.Getxattr(remoteFile, "user.pando.stale", make([]byte, 32)); err != nil || n == 0 {
		t.Errorf("tacc's cached file is not marked stale: %v", err)
	}
	if _, err := os.ReadFile(filepath.Join(a.dir, "tacc/data/never-read.txt")); err == nil {
		t.Error("a file of tacc never read was read with tacc hostile")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("tacc's part took %v to answer (stale) or fail", took)
	}
	t.Logf("tacc's part answered in %v", time.Since(start))
	home("after tacc's part failed")
	if got := uva.pando(alice, "cat", "/uva/data/home.txt").ok().stdout; got != "at home\n" {
		t.Errorf("pando cat of the home file with tacc hostile: %q", got)
	}
}
