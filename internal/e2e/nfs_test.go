package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
)

// nfsGateway is a `pando serve nfs` process.
type nfsGateway struct {
	*proc
	addr, port string
}

// serveNFS starts `pando serve nfs` with the gateway credentials web.
func serveNFS(t *testing.T, d *domain, web, name string, args ...string) *nfsGateway {
	t.Helper()
	a := append([]string{"--config", web, "serve", "nfs", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "nfs-"+name)}, args...)
	p, m := start(t, `at nfs://(127\.0\.0\.1:(\d+))/`, nil, a...)
	return &nfsGateway{proc: p, addr: m[1], port: m[2]}
}

// url is the libnfs URL of a global path through g, without the
// portmapper (MOUNT and NFS on the one port).
func (g *nfsGateway) url(p string) string {
	return "nfs://127.0.0.1" + p + "?mountport=" + g.port + "&nfsport=" + g.port + "&version=3"
}

// libnfs runs a tool of libnfs-utils, bounded in time.
func libnfs(t *testing.T, tool string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
		}
	}()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// nfsMount mounts dir through g with go-nfs-client (a Go NFSv3 client),
// over one connection without the portmapper.
func nfsMount(t *testing.T, g *nfsGateway, dir string) *nfsc.Target {
	t.Helper()
	// go-nfs-client binds a random local port and tries again only for
	// privileged ones: one in use fails the dial.
	c, err := rpc.DialTCP("tcp", g.addr, false)
	for i := 0; err != nil && errors.Is(err, syscall.EADDRINUSE) && i < 20; i++ {
		c, err = rpc.DialTCP("tcp", g.addr, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &nfsc.Mount{Client: c}
	v, err := m.Mount(dir, rpc.AuthNull)
	if err != nil {
		t.Fatalf("mounting %s through go-nfs-client: %v", dir, err)
	}
	return v
}

// TestNFSGateway: pando serve nfs, against libnfs-utils (nfs-ls, nfs-cat,
// nfs-cp) and go-nfs-client: listings, reads whole and in ranges byte for
// byte, a write seen through a pando mount and the reverse, mkdir and
// rm; an export whose principal lacks w refuses every change with
// NFS3ERR_ACCES and the share is unchanged; a client of a network not
// allowed is refused at accept; malformed calls close their connection
// and the gateway serves on.
func TestNFSGateway(t *testing.T) {
	for _, tool := range []string{"nfs-ls", "nfs-cp", "nfs-cat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (./dev test installs libnfs-utils)", tool)
		}
	}
	d := newDomain(t, "d")
	root := d.addShare("data")
	alice := d.addUser("alice")
	d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwk", "bob", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	d.pando(d.admin, "user", "add", "nfsgw", "--gateway", "-o", web).ok()

	big := make([]byte, 24<<20+12345)
	rand.Read(big)
	os.WriteFile(filepath.Join(root, "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(root, "small.txt"), []byte("small file\n"), 0o644)
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "sub", "deep.txt"), []byte("deep\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "team", "inner"), 0o755)
	os.WriteFile(filepath.Join(root, "team", "doc.txt"), []byte("the team's\n"), 0o644)

	// Usage mistakes are one sentence each.
	d.pando(web, "serve", "nfs", "--listen", "127.0.0.1:0", "--allow", "127.0.0.1").fails(2, "--export")
	d.pando(web, "serve", "nfs", "--listen", "127.0.0.1:0", "--export", "/d/data=alice").fails(2, "--allow", "not authenticated")
	d.pando(web, "serve", "nfs", "--listen", "127.0.0.1:0", "--export", "d/data=alice", "--allow", "127.0.0.1").fails(2, "global path")
	d.pando(web, "serve", "nfs", "--listen", "127.0.0.1:0", "--export", "/d/data=alice", "--allow", "localhost").fails(2, "--allow")

	d.pando(web, "serve", "nfs", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "nfs-x"), "--export", "/d/nothere=alice", "--allow", "127.0.0.1").fails(3, "/d/nothere", "no such directory")
	d.pando(web, "serve", "nfs", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "nfs-x"), "--export", "/d/data=carol", "--allow", "127.0.0.1").fails(3, "carol", "not known")

	// Two exports, two principals, one gateway: /d/data/team (mounted
	// there or below) is bob's, the rest of /d/data alice's.
	ga := serveNFS(t, d, web, "alice", "--export", "/d/data=alice,/d/data/team=bob", "--allow", "127.0.0.1/32,::1")

	out, err := libnfs(t, "nfs-ls", ga.url("/d/data"))
	if err != nil || !strings.Contains(out, "small.txt") || !strings.Contains(out, "big.bin") || !strings.Contains(out, "sub") {
		t.Fatalf("nfs-ls: %v\n%s", err, out)
	}
	if out, err := libnfs(t, "nfs-cat", ga.url("/d/data/sub/deep.txt")); err != nil || out != "deep\n" {
		t.Errorf("nfs-cat of a file below the export: %v %q", err, out)
	}
	got := filepath.Join(d.dir, "big.got")
	if out, err := libnfs(t, "nfs-cp", ga.url("/d/data/big.bin"), got); err != nil {
		t.Fatalf("nfs-cp from the gateway: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, big) {
		t.Errorf("nfs-cp read %d bytes, not the share's file of %d byte for byte", len(b), len(big))
	}

	// Ranges, across block boundaries and at the end, with a Go client.
	v := nfsMount(t, ga, "/d/data")
	f, err := v.Open("big.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, 1}, {1<<20 - 7, 100}, {4<<20 - 1, 1<<20 + 2}, {int64(len(big)) - 10, 10}, {int64(len(big)) - 5, 100}} {
		p := make([]byte, r[1])
		n, err := f.ReadAt(p, r[0])
		want := big[r[0]:min(r[0]+r[1], int64(len(big)))]
		if (err != nil && err != io.EOF) || !bytes.Equal(p[:n], want) {
			t.Errorf("READ of %d bytes at %d: %d bytes, %v, equal %v", r[1], r[0], n, err, bytes.Equal(p[:n], want))
		}
	}

	// A write through NFS is seen through a pando mount, and the reverse.
	m := mountAgent(t, alice, "--consistency", "window=3s")
	src := filepath.Join(d.dir, "src.bin")
	written := make([]byte, 3<<20+17)
	rand.Read(written)
	os.WriteFile(src, written, 0o644)
	if out, err := libnfs(t, "nfs-cp", src, ga.url("/d/data/sub/from-nfs.bin")); err != nil {
		t.Fatalf("nfs-cp to the gateway: %v\n%s", err, out)
	}
	t0 := time.Now()
	seen := func(read func() ([]byte, error), want []byte) bool {
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if b, err := read(); err == nil && bytes.Equal(b, want) {
				return true
			}
		}
		return false
	}
	if !seen(func() ([]byte, error) { return os.ReadFile(filepath.Join(m.dir, "d", "data", "sub", "from-nfs.bin")) }, written) {
		t.Errorf("the file nfs-cp wrote is not read through the mount after 15 s")
	}
	t.Logf("nfs-cp's file read through the mount after %v", time.Since(t0).Round(10*time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(root, "sub", "from-nfs.bin")); !bytes.Equal(b, written) {
		t.Errorf("the share holds %d bytes of the %d nfs-cp wrote, or others", len(b), len(written))
	}
	os.WriteFile(filepath.Join(m.dir, "d", "data", "from-mount.txt"), []byte("through the mount\n"), 0o644)
	t0 = time.Now()
	if !seen(func() ([]byte, error) {
		out, err := libnfs(t, "nfs-cat", ga.url("/d/data/from-mount.txt"))
		return []byte(out), err
	}, []byte("through the mount\n")) {
		t.Errorf("the mount's file is not read through NFS after 15 s")
	}
	t.Logf("the mount's file read through NFS after %v", time.Since(t0).Round(10*time.Millisecond))

	// mkdir, a file in it, rm, rmdir (go-nfs-client; libnfs-utils has no
	// such tools).
	if _, err := v.Mkdir("made", 0o755); err != nil {
		t.Errorf("MKDIR: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "made")); err != nil || !fi.IsDir() {
		t.Errorf("MKDIR made no directory at the share: %v", err)
	}
	if out, err := libnfs(t, "nfs-cp", src, ga.url("/d/data/made/x.bin")); err != nil {
		t.Errorf("nfs-cp into the new directory: %v\n%s", err, out)
	}
	if err := v.Remove("made/x.bin"); err != nil {
		t.Errorf("REMOVE: %v", err)
	}
	if err := v.RmDir("made"); err != nil {
		t.Errorf("RMDIR: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "made")); !os.IsNotExist(err) {
		t.Errorf("the directory removed through NFS is still at the share: %v", err)
	}

	nfsRefusals(t, d, web, ga, root, src)
	nfsHostile(t, ga)
	nfsNotServed(t, ga, root)
	if out, err := libnfs(t, "nfs-cat", ga.url("/d/data/small.txt")); err != nil || out != "small file\n" {
		t.Errorf("nfs-cat after the malformed calls: %v %q", err, out)
	}
}

// nfsRefusals: bob's export refuses every change with ACCES and leaves the
// share as it was, while alice's, in the same gateway, writes there; a
// gateway that allows another network refuses 127.0.0.1 at accept.
func nfsRefusals(t *testing.T, d *domain, web string, g *nfsGateway, root, src string) {
	before := treeState(t, root)
	if out, err := libnfs(t, "nfs-cat", g.url("/d/data/team/doc.txt")); err != nil || out != "the team's\n" {
		t.Errorf("bob cannot read through his export: %v %q", err, out)
	}
	// (nfs-cp creates GUARDED: it writes new files only.)
	for _, dst := range []string{"/d/data/team/bob.bin", "/d/data/team/inner/bob.bin"} {
		out, err := libnfs(t, "nfs-cp", src, g.url(dst))
		if err == nil || !strings.Contains(out, "ACCES") {
			t.Errorf("nfs-cp to %s as bob, who may not write: %v\n%s", dst, err, out)
		}
	}
	v := nfsMount(t, g, "/d/data/team")
	if f, err := v.OpenFile("doc.txt", 0o644); err != nil {
		t.Errorf("bob's lookup of doc.txt: %v", err)
	} else if _, err := f.Write([]byte("bob was here")); err == nil || !strings.Contains(err.Error(), "ACCES") {
		t.Errorf("WRITE of doc.txt as bob: %v", err)
	}
	if _, err := v.Mkdir("bobdir", 0o755); err == nil || !strings.Contains(err.Error(), "ACCES") {
		t.Errorf("MKDIR as bob: %v", err)
	}
	if err := v.Remove("doc.txt"); err == nil {
		t.Errorf("REMOVE as bob was not refused")
	}
	if err := v.RmDir("inner"); err == nil {
		t.Errorf("RMDIR as bob was not refused")
	}
	if err := v.Rename("doc.txt", "moved.txt"); err == nil {
		t.Errorf("RENAME as bob was not refused")
	}
	if after := treeState(t, root); after != before {
		t.Errorf("bob's refused changes changed the share:\nbefore %s\nafter  %s", before, after)
	}
	// The same directory through alice's export of the same gateway.
	va := nfsMount(t, g, "/d/data")
	f, err := va.OpenFile("team/alice.txt", 0o644)
	if err == nil {
		_, err = f.Write([]byte("alice's\n"))
	}
	if err != nil {
		t.Errorf("alice's write beside bob's refused ones: %v", err)
	}
	var b []byte
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end) && string(b) != "alice's\n"; time.Sleep(100 * time.Millisecond) {
		b, _ = os.ReadFile(filepath.Join(root, "team", "alice.txt"))
	}
	if string(b) != "alice's\n" {
		t.Errorf("alice's write through her export is not at the share after 15 s: %q", b)
	}

	gc := serveNFS(t, d, web, "elsewhere", "--export", "/d/data=alice", "--allow", "10.9.0.0/16", "--metrics", "127.0.0.1:0")
	if out, err := libnfs(t, "nfs-ls", gc.url("/d/data")); err == nil {
		t.Errorf("a client of 127.0.0.1 was served by a gateway that allows 10.9.0.0/16:\n%s", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(gc.output(), "network not allowed") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(gc.output(), "network not allowed") || !strings.Contains(gc.output(), "client=127.0.0.1:") {
		t.Errorf("the refusal is not logged:\n%s", gc.output())
	}
	metrics := between(gc.output(), "metrics at ", "\n")
	resp, err := http.Get(metrics)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "pando_gateway_nfs_connections_refused_total ") || strings.Contains(string(b), "pando_gateway_nfs_connections_refused_total 0") {
		t.Errorf("the refused connection is not counted:\n%s", b)
	}
}

// treeState is every path below root with its mode and contents.
func treeState(t *testing.T, root string) string {
	var sb strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		sb.WriteString(strings.TrimPrefix(p, root) + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			sb.WriteString(fmt.Sprintf(" %d %x", len(b), sha256.Sum256(b)))
		}
		sb.WriteString("; ")
		return nil
	})
	return sb.String()
}

// rpcCall is an ONC RPC call record: prog, version, proc, AUTH_NULL, and
// the arguments given.
func rpcCall(xid, prog, vers, proc uint32, args []byte) []byte {
	var b []byte
	for _, v := range []uint32{xid, 0, 2, prog, vers, proc, 0, 0, 0, 0} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = append(b, args...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))|1<<31), b...)
}

func xdrOpaque(p []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(p)))
	b = append(b, p...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// rpcExchange sends records on a new connection and returns the replies'
// bodies, up to the connection's end (or 5 s).
func rpcExchange(t *testing.T, addr string, records ...[]byte) ([][]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, r := range records {
		if _, err := c.Write(r); err != nil {
			break
		}
	}
	var out [][]byte
	for range records {
		var m [4]byte
		if _, err := io.ReadFull(c, m[:]); err != nil {
			return out, err
		}
		body := make([]byte, binary.BigEndian.Uint32(m[:])&^(1<<31))
		if _, err := io.ReadFull(c, body); err != nil {
			return out, err
		}
		out = append(out, body)
	}
	return out, nil
}

// nfsHostile sends what no client should: garbage, an oversized record,
// an NFSv4 call, a handle 4 GiB long, a 129th connection, a bogus handle, names that climb out.
func nfsHostile(t *testing.T, g *nfsGateway) {
	const nfsProg, mountProg = 100003, 100005
	garbage := make([]byte, 4096)
	rand.Read(garbage)
	garbage[0] = 0x7f // not the last fragment
	if r, err := rpcExchange(t, g.addr, garbage); err == nil || len(r) != 0 {
		t.Errorf("garbage was answered: %d replies, %v", len(r), err)
	}
	if r, err := rpcExchange(t, g.addr, []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}); err == nil || len(r) != 0 {
		t.Errorf("a record of 2 GiB was answered: %d replies, %v", len(r), err)
	}
	if r, err := rpcExchange(t, g.addr, rpcCall(1, nfsProg, 4, 1, make([]byte, 8))); err == nil || len(r) != 0 {
		t.Errorf("an NFSv4 COMPOUND was answered as v3: %d replies, %v", len(r), err)
	}
	huge := binary.BigEndian.AppendUint32(nil, 0xffffffff) // GETATTR of a handle 4 GiB long
	if r, err := rpcExchange(t, g.addr, rpcCall(1, nfsProg, 3, 1, huge)); err == nil || len(r) != 0 {
		t.Errorf("a handle of 4 GiB was answered: %d replies, %v", len(r), err)
	}
	// A well-formed call with a bogus handle: NFS3ERR_STALE (70) or
	// BADHANDLE (10001), and the connection serves the next call.
	mnt, err := rpcExchange(t, g.addr, rpcCall(2, mountProg, 3, 1, xdrOpaque([]byte("/d/data"))))
	if err != nil || len(mnt) != 1 || len(mnt[0]) < 32 {
		t.Fatalf("MNT: %v", err)
	}
	rootFH := mnt[0][32 : 32+binary.BigEndian.Uint32(mnt[0][28:])]
	bogus := make([]byte, 24)
	rand.Read(bogus)
	lookup := func(name string) []byte { return append(xdrOpaque(rootFH), xdrOpaque([]byte(name))...) }
	r, err := rpcExchange(t, g.addr, rpcCall(3, nfsProg, 3, 1, xdrOpaque(bogus)), rpcCall(4, nfsProg, 3, 3, lookup("..")),
		rpcCall(5, nfsProg, 3, 3, lookup("../../etc")), rpcCall(6, nfsProg, 3, 3, lookup("sub/deep.txt")),
		rpcCall(7, nfsProg, 3, 3, lookup("small.txt")))
	if err != nil || len(r) != 5 {
		t.Fatalf("well-formed calls after bad ones: %d replies, %v", len(r), err)
	}
	status := func(b []byte) uint32 { return binary.BigEndian.Uint32(b[24:]) }
	if s := status(r[0]); s != 70 && s != 10001 {
		t.Errorf("GETATTR of a bogus handle: status %d", s)
	}
	if s := status(r[1]); s == 0 {
		t.Errorf("LOOKUP of .. at the export's root succeeded")
	}
	if s := status(r[2]); s == 0 {
		t.Errorf("LOOKUP of ../../etc succeeded")
	}
	if s := status(r[3]); s == 0 {
		t.Errorf("LOOKUP of a name with a slash succeeded")
	}
	if s := status(r[4]); s != 0 {
		t.Errorf("LOOKUP of small.txt after the bad calls: status %d", s)
	}
	// Random arguments after the root's handle, to every procedure but
	// those that could make a huge or special file (SETATTR, WRITE,
	// CREATE, MKNOD): each gets a reply or its connection closed, and the
	// gateway lives on (go-nfs does not recover a panic).
	seed := [32]byte{7}
	rnd := mrand.New(mrand.NewChaCha8(seed))
	for _, proc := range []uint32{1, 3, 4, 5, 6, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21} {
		for range 30 {
			junk := make([]byte, rnd.IntN(200))
			for i := range junk {
				junk[i] = byte(rnd.UintN(256))
			}
			rpcExchange(t, g.addr, rpcCall(10, nfsProg, 3, proc, append(xdrOpaque(rootFH), junk...)))
		}
	}
	if r, err := rpcExchange(t, g.addr, rpcCall(11, nfsProg, 3, 3, lookup("small.txt"))); err != nil || status(r[0]) != 0 {
		t.Fatalf("LOOKUP after random arguments: %v", err)
	}

	// At most 128 connections at once (the test's clients hold a few):
	// the next is closed at accept, and served again once others end.
	null := rpcCall(9, nfsProg, 3, 0, nil)
	var held []net.Conn
	refused := false
	for len(held) <= 128 && !refused {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(null)
		_, err = io.ReadFull(c, make([]byte, 28))
		refused = err != nil
	}
	if !refused || len(held) < 120 {
		t.Errorf("connection %d refused %v: the bound is 128", len(held), refused)
	}
	for _, c := range held {
		c.Close()
	}
	r = nil
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if r, err = rpcExchange(t, g.addr, null); err == nil {
			break
		}
	}
	if len(r) != 1 {
		t.Errorf("no connection served after the 128 ended: %v", err)
	}
	if !strings.Contains(g.output(), "malformed call") || !strings.Contains(g.output(), "too many open") {
		t.Errorf("the malformed calls are not logged:\n%s", g.output())
	}
}

// nfsNotServed: LINK and MKNOD, which the gateway does not serve (go-nfs
// read a LINK's arguments as a SYMLINK's), are answered NFS3ERR_NOTSUPP
// in the reply's own shape, change nothing at the share, and the
// connection serves the next call.
func nfsNotServed(t *testing.T, g *nfsGateway, root string) {
	const nfsProg, mountProg = 100003, 100005
	before := treeState(t, root)
	mnt, err := rpcExchange(t, g.addr, rpcCall(1, mountProg, 3, 1, xdrOpaque([]byte("/d/data"))))
	if err != nil || len(mnt) != 1 || len(mnt[0]) < 32 {
		t.Fatalf("MNT: %v", err)
	}
	rootFH := mnt[0][32 : 32+binary.BigEndian.Uint32(mnt[0][28:])]
	look, err := rpcExchange(t, g.addr, rpcCall(2, nfsProg, 3, 3, append(xdrOpaque(rootFH), xdrOpaque([]byte("small.txt"))...)))
	if err != nil || len(look) != 1 || binary.BigEndian.Uint32(look[0][24:]) != 0 {
		t.Fatalf("LOOKUP small.txt: %v", err)
	}
	fileFH := look[0][32 : 32+binary.BigEndian.Uint32(look[0][28:])]
	link := append(append(xdrOpaque(fileFH), xdrOpaque(rootFH)...), xdrOpaque([]byte("hard.txt"))...)
	sattr := make([]byte, 24) // nothing set
	mknod := append(append(append(xdrOpaque(rootFH), xdrOpaque([]byte("fifo"))...), 0, 0, 0, 7), sattr...)
	r, err := rpcExchange(t, g.addr, rpcCall(3, nfsProg, 3, 15, link), rpcCall(4, nfsProg, 3, 11, mknod),
		rpcCall(5, nfsProg, 3, 3, append(xdrOpaque(rootFH), xdrOpaque([]byte("small.txt"))...)))
	if err != nil || len(r) != 3 {
		t.Fatalf("LINK, MKNOD, LOOKUP: %d replies, %v", len(r), err)
	}
	for i, c := range []struct {
		name string
		size int
	}{{"LINK", 24 + 16}, {"MKNOD", 24 + 12}} {
		if st := binary.BigEndian.Uint32(r[i][24:]); st != 10004 || len(r[i]) != c.size {
			t.Errorf("%s: status %d in a reply of %d bytes, want NFS3ERR_NOTSUPP (10004) in %d", c.name, st, len(r[i]), c.size)
		}
	}
	if st := binary.BigEndian.Uint32(r[2][24:]); st != 0 {
		t.Errorf("LOOKUP after LINK and MKNOD: status %d", st)
	}
	if after := treeState(t, root); after != before {
		t.Errorf("LINK or MKNOD changed the share:\n%s\n%s", before, after)
	}
}

// TestNFSHandlesSurviveRestart: file handles a client got before the
// gateway restarted still name their files after (one short enough to
// hold its path, one whose path is kept in the gateway's table).
func TestNFSHandlesSurviveRestart(t *testing.T) {
	d := newDomain(t, "d")
	root := d.addShare("data")
	d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	d.pando(d.admin, "user", "add", "nfsgw", "--gateway", "-o", web).ok()
	long := []string{"a-directory-name-long-enough-to-matter", "and-another-one-below-it-just-as-long", "file.txt"}
	os.MkdirAll(filepath.Join(root, long[0], long[1]), 0o755)
	os.WriteFile(filepath.Join(root, filepath.Join(long...)), []byte("long\n"), 0o644)
	os.WriteFile(filepath.Join(root, "short.txt"), []byte("short\n"), 0o644)

	g := serveNFS(t, d, web, "restart", "--export", "/d/data=alice", "--allow", "127.0.0.1")
	mnt, err := rpcExchange(t, g.addr, rpcCall(1, 100005, 3, 1, xdrOpaque([]byte("/d/data"))))
	if err != nil {
		t.Fatal(err)
	}
	fh := func(b []byte, at int) []byte { return b[at+4 : at+4+int(binary.BigEndian.Uint32(b[at:]))] }
	lookup := func(dir []byte, name string) []byte {
		r, err := rpcExchange(t, g.addr, rpcCall(2, 100003, 3, 3, append(xdrOpaque(dir), xdrOpaque([]byte(name))...)))
		if err != nil || binary.BigEndian.Uint32(r[0][24:]) != 0 {
			t.Fatalf("LOOKUP %s: %v", name, err)
		}
		return fh(r[0], 28)
	}
	short := lookup(fh(mnt[0], 28), "short.txt")
	h := fh(mnt[0], 28)
	for _, n := range long {
		h = lookup(h, n)
	}
	if len(short) >= len(h) {
		t.Errorf("handles of %d and %d bytes: the long path's should be the table's", len(short), len(h))
	}
	g.stop(t)
	args := g.cmd.Args[1:]
	for i, a := range args {
		if a == "127.0.0.1:0" {
			args[i] = g.addr
		}
	}
	g2, _ := start(t, `at nfs://`, nil, args...)
	defer g2.stop(t)
	for _, h := range [][]byte{short, h} {
		r, err := rpcExchange(t, g.addr, rpcCall(3, 100003, 3, 1, xdrOpaque(h)))
		if err != nil || binary.BigEndian.Uint32(r[0][24:]) != 0 {
			t.Errorf("GETATTR of a handle from before the restart: %v %x", err, r)
		}
	}
	// READ of the long path's handle gives its file.
	args3 := append(xdrOpaque(h), make([]byte, 8)...)
	args3 = binary.BigEndian.AppendUint32(args3, 100)
	r, err := rpcExchange(t, g.addr, rpcCall(4, 100003, 3, 6, args3))
	if err != nil || !bytes.Contains(r[0], []byte("long\n")) {
		t.Errorf("READ through a handle from before the restart: %v %q", err, r)
	}
}
