package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/holder"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/testenv/snap"
)

// site is a network namespace the test made: a host of its own, with one
// address on a bridge the test's other sites share (the test process, in
// the root namespace, reaches them too, as an administrator's laptop
// would; the sites reach nothing else, not even each other's loopback).
type site struct {
	name, ns, addr string
}

// nsenter is the prefix that runs a command in the site's network
// namespace (and nothing else: the mount namespace stays the test's, so a
// mount an agent makes there is seen here).
func (s *site) nsenter() []string { return []string{"nsenter", "--net=/run/netns/" + s.ns} }

// newSites makes one network namespace per name on a bridge of its own,
// removed when the test ends. It needs root and iproute2 (in CI it fails
// rather than skips without them).
func newSites(t *testing.T, names ...string) map[string]*site {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("network namespaces need root, which CI has")
		}
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip (iproute2) is not installed")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	br := "pbr" + tag
	// A /24 of 10.x.y.0 chosen from the tag, so that parallel runs do not meet.
	net := fmt.Sprintf("10.%d.%d", 100+int(b[0])%100, b[1])
	run("link", "add", br, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", br).Run() })
	run("addr", "add", net+".1/24", "dev", br)
	run("link", "set", br, "up")
	out := map[string]*site{}
	for i, name := range names {
		s := &site{name: name, ns: fmt.Sprintf("p%s%d", tag, i), addr: fmt.Sprintf("%s.%d", net, i+2)}
		veth := fmt.Sprintf("pv%s%d", tag, i)
		run("netns", "add", s.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", s.ns).Run() })
		run("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", s.ns)
		run("link", "set", veth, "master", br, "up")
		run("-n", s.ns, "addr", "add", s.addr+"/24", "dev", "eth0")
		run("-n", s.ns, "link", "set", "eth0", "up")
		run("-n", s.ns, "link", "set", "lo", "up")
		out[name] = s
	}
	return out
}

// newDomainAt starts a controller for a new domain in site s.
func newDomainAt(t *testing.T, s *site, name string) *domain {
	t.Helper()
	dir := t.TempDir()
	d := &domain{t: t, name: name, dir: dir, roots: map[string]string{}, shares: map[string]*proc{}, site: s}
	var m []string
	d.ctrl, m = startIn(t, s.nsenter(), `listening on (\S+)`, nil, "controller", "--state", filepath.Join(dir, "controller"),
		"--domain", name, "--listen", s.addr+":0")
	d.addr = m[1]
	d.admin = filepath.Join(dir, "controller", "admin.json")
	return d
}

// inSite runs the CLI with cfg in the domain's site.
func (d *domain) inSite(cfg string, args ...string) result {
	d.t.Helper()
	return runPandoIn(d.t, d.site.nsenter(), 2*time.Minute, "", cfg, args...)
}

// TestDomainsAcrossNetworks: two domains, each with its own controller,
// CA, share and mount in a network namespace of its own, linked with the
// commands a person runs. alice of uva reads and writes tacc's share
// through her mount, the CLI, a gateway of uva and pando cp, where tacc's
// ACL lets her; bob of tacc is refused at uva, which admits none of tacc's
// users, and tacc's share is unchanged by what was refused.
func TestDomainsAcrossNetworks(t *testing.T) {
	sites := newSites(t, "uva", "tacc")
	uva, tacc := newDomainAt(t, sites["uva"], "uva"), newDomainAt(t, sites["tacc"], "tacc")
	uvaRoot, taccRoot := uva.addShare("home"), tacc.addShare("data")
	if err := os.WriteFile(filepath.Join(taccRoot, "hello.txt"), []byte("hello from tacc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(taccRoot, "big.bin")
	testenv.MakeFile(t, big, 9<<20)
	alice := uva.addUser("alice", "physics")
	bob := tacc.addUser("bob")

	// Before the link, uva's users are strangers at tacc.
	uva.inSite(alice, "ls", "/tacc/data").fails(3, "tacc")

	fpUva := strings.TrimSpace(uva.inSite(uva.admin, "domain", "fingerprint").ok().stdout)
	fpTacc := strings.TrimSpace(tacc.inSite(tacc.admin, "domain", "fingerprint").ok().stdout)
	tacc.inSite(tacc.admin, "domain", "link", "uva", "--controller", uva.addr, "--fingerprint", strings.ToLower(fpUva)).ok()
	uva.inSite(uva.admin, "domain", "link", "tacc", "--controller", tacc.addr, "--fingerprint", strings.ReplaceAll(fpTacc, ":", ""), "--admit", "none").ok()
	ls := uva.inSite(uva.admin, "domain", "ls").ok().stdout
	if !strings.Contains(ls, "tacc") || !strings.Contains(ls, "reachable") || !strings.Contains(ls, fpTacc) {
		t.Errorf("pando domain ls at uva:\n%s", ls)
	}
	tacc.inSite(tacc.admin, "acl", "set", "/tacc/data", "group:physics@uva", "rlidw").ok()
	uva.inSite(uva.admin, "acl", "set", "/uva/home", "alice", "rlidw").ok()

	// The CLI.
	if out := uva.inSite(alice, "cat", "/tacc/data/hello.txt").ok().stdout; out != "hello from tacc\n" {
		t.Fatalf("pando cat across domains: %q", out)
	}
	if out := uva.inSite(alice, "ls", "/").ok().stdout; !strings.Contains(out, "uva") || !strings.Contains(out, "tacc") {
		t.Errorf("pando ls / at uva shows %q", out)
	}
	// pando cp, both ways.
	uva.inSite(alice, "cp", "pando://tacc/data/big.bin", "pando://uva/home/big.bin").ok()
	testenv.SameFile(t, big, filepath.Join(uvaRoot, "big.bin"))
	uva.inSite(alice, "cp", "pando://uva/home/big.bin", "pando://tacc/data/back.bin").ok()
	testenv.SameFile(t, big, filepath.Join(taccRoot, "back.bin"))

	// A gateway of uva, in uva's site: alice reads and writes tacc's share over HTTPS.
	web := filepath.Join(uva.dir, "web.json")
	uva.inSite(uva.admin, "user", "add", "web", "--gateway", "-o", web).ok()
	pw := filepath.Join(uva.dir, "passwd")
	runPandoIn(t, sites["uva"].nsenter(), time.Minute, "alice-password\n", web, "serve", "passwd", "--passwords", pw, "alice").ok()
	_, m := startIn(t, sites["uva"].nsenter(), `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(uva.dir, "gwcache"), "--passwords", pw)
	curl := func(args ...string) string {
		argv := append(sites["uva"].nsenter(), append([]string{"curl", "-sS", "--cacert", m[2], "-u", "alice:alice-password", "-w", "%{http_code}"}, args...)...)
		out, _ := exec.Command(argv[0], argv[1:]...).Output()
		return string(out)
	}
	if out := curl(m[1] + "/tacc/data/hello.txt"); out != "hello from tacc\n200" {
		t.Errorf("GET of tacc's file through uva's gateway: %q", out)
	}
	src := filepath.Join(uva.dir, "gw.txt")
	if err := os.WriteFile(src, []byte("through uva's gateway\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := curl("-o", "/dev/null", "-T", src, m[1]+"/tacc/data/gw.txt"); out != "201" {
		t.Errorf("PUT to tacc through uva's gateway: %s", out)
	}
	if b, err := os.ReadFile(filepath.Join(taccRoot, "gw.txt")); err != nil || string(b) != "through uva's gateway\n" {
		t.Errorf("tacc's share after the gateway's PUT: %q %v", b, err)
	}

	// The mount, in uva's site.
	mnt, cache := filepath.Join(uva.dir, "mnt"), filepath.Join(uva.dir, "cache")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	startIn(t, sites["uva"].nsenter(), `pando mounted at`, nil, "--config", alice, "mount", "--cache-dir", cache, mnt)
	if b, err := os.ReadFile(filepath.Join(mnt, "tacc", "data", "hello.txt")); err != nil || string(b) != "hello from tacc\n" {
		t.Fatalf("reading tacc through uva's mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "tacc", "data", "from-mount.txt"), []byte("written at uva\n"), 0o644); err != nil {
		t.Fatalf("writing tacc through uva's mount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(taccRoot, "from-mount.txt")); err != nil || string(b) != "written at uva\n" {
		t.Fatalf("tacc's share holds %q %v", b, err)
	}
	ents, err := os.ReadDir(mnt)
	if err != nil || len(ents) != 2 {
		t.Errorf("the mount's root: %v %v", ents, err)
	}

	// tacc stops answering (its controller and share frozen, as a host
	// that hangs): uva's part of the mount serves on, tacc's fails in
	// seconds, and what the mount holds of tacc stays readable.
	if err := os.WriteFile(filepath.Join(uvaRoot, "local.txt"), []byte("at home\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	frozen := []*proc{tacc.ctrl, tacc.shares["data"]}
	for _, p := range frozen {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	thaw := func() {
		for _, p := range frozen {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer thaw()
	if b, err := os.ReadFile(filepath.Join(mnt, "uva", "home", "local.txt")); err != nil || string(b) != "at home\n" {
		thaw()
		t.Fatalf("uva's own files with tacc frozen: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "tacc", "data", "hello.txt")); err != nil || string(b) != "hello from tacc\n" {
		thaw()
		t.Fatalf("tacc's file the mount holds, with tacc frozen: %q %v", b, err)
	}
	failed := make(chan error, 1)
	go func() { _, err := os.ReadFile(filepath.Join(mnt, "tacc", "data", "never-read.txt")); failed <- err }()
	select {
	case err := <-failed:
		if err == nil {
			t.Error("a file tacc never had was read with tacc frozen")
		}
	case <-time.After(60 * time.Second):
		thaw()
		t.Fatal("a read of tacc's namespace with tacc frozen did not fail within 60 s")
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "uva", "home", "local.txt")); err != nil || string(b) != "at home\n" {
		thaw()
		t.Fatalf("uva's own files after tacc's part failed: %q %v", b, err)
	}
	thaw()

	// A negative entry for alice wins over her group's grant; tacc decides.
	tacc.inSite(tacc.admin, "acl", "set", "/tacc/data", "-alice@uva", "w").ok()
	before := snap.Take(t, taccRoot)
	over := filepath.Join(uva.dir, "over.txt")
	if err := os.WriteFile(over, []byte("overwritten"), 0o644); err != nil {
		t.Fatal(err)
	}
	uva.inSite(alice, "put", over, "/tacc/data/hello.txt").fails(4, "alice@uva", "write right (w)", "domain tacc decided")
	snap.Same(t, "tacc's share after a refused write", before, snap.Take(t, taccRoot))

	// uva admits none of tacc's users.
	tacc.inSite(bob, "ls", "/uva/home").fails(4, "admits no principal of tacc", "domain uva decided")
}

// TestDomainBehindRelayAcrossNetworks: a third domain, nat, whose
// controller and share open no port and dial out to a relay at a site of
// its own; uva, at another site, links nat at the relay's address, and
// alice of uva reads nat's share through the relay, with the CLI and her
// mount.
func TestDomainBehindRelayAcrossNetworks(t *testing.T) {
	sites := newSites(t, "uva", "relay", "nat")
	uva := newDomainAt(t, sites["uva"], "uva")
	uva.addShare("home")
	alice := uva.addUser("alice", "physics")
	nat := newDomainAt(t, sites["nat"], "nat") // a first start makes the domain and its CA
	admin, err := config.Load(nat.admin)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(nat.dir, "nat-ca.pem")
	if err := os.WriteFile(caFile, []byte(admin.CA), 0o644); err != nil {
		t.Fatal(err)
	}
	_, m := startIn(t, sites["relay"].nsenter(), `relay for domains \S+ listening on (\S+)`, nil, "relay", "--listen", sites["relay"].addr+":0", "--ca", caFile)
	relayAddr := m[1]
	nat.ctrl.stop(t)
	cp, m := startIn(t, sites["nat"].nsenter(), `listening on (\S+)`, nil, "controller", "--state", filepath.Join(nat.dir, "controller"), "--relay", relayAddr)
	natCtrl := m[1]
	root := filepath.Join(nat.dir, "export-data")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	sp, _ := startIn(t, sites["nat"].nsenter(), `share \S+ exporting`, nil, "share", "--config", nat.admin, "--root", root, "--name", "data",
		"--relay", relayAddr, "--state", filepath.Join(nat.dir, "share-state"))
	for _, p := range []*proc{cp, sp} {
		if ports, sockets := holder.Listens(p.cmd.Process.Pid); len(ports) != 0 || sockets == 0 {
			t.Fatalf("pando %s listens on ports %v (of %d sockets); through a relay it should open none", p.cmd.Args[1], ports, sockets)
		}
	}
	nat.inSite(nat.admin, "ns", "mount", "/nat/data", "data").ok()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("behind the firewall\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fpNat := strings.TrimSpace(nat.inSite(nat.admin, "domain", "fingerprint").ok().stdout)
	fpUva := strings.TrimSpace(uva.inSite(uva.admin, "domain", "fingerprint").ok().stdout)
	nat.inSite(nat.admin, "domain", "link", "uva", "--controller", uva.addr, "--fingerprint", fpUva).ok()
	uva.inSite(uva.admin, "domain", "link", "nat", "--controller", natCtrl, "--fingerprint", fpNat, "--admit", "none").ok()
	nat.inSite(nat.admin, "acl", "set", "/nat/data", "group:physics@uva", "rl").ok()
	if out := uva.inSite(alice, "cat", "/nat/data/f").ok().stdout; out != "behind the firewall\n" {
		t.Fatalf("alice@uva's read through the relay: %q", out)
	}
	mnt := filepath.Join(uva.dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	startIn(t, sites["uva"].nsenter(), `pando mounted at`, nil, "--config", alice, "mount", "--cache-dir", filepath.Join(uva.dir, "cache"), mnt)
	if b, err := os.ReadFile(filepath.Join(mnt, "nat", "data", "f")); err != nil || string(b) != "behind the firewall\n" {
		t.Fatalf("alice's mount reading nat through the relay: %q %v", b, err)
	}
}
