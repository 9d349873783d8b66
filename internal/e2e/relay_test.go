package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/holder"
)

// TestShareThroughRelay: a share process started with --relay and no
// --listen holds no listening socket, and is read and written through the
// mount and the CLI, by way of a relay process that counts the splices
// and their bytes; once it stops, a client asking for it is told in one
// sentence that the relay knows no such server.
func TestShareThroughRelay(t *testing.T) {
	d := newDomain(t, "uva")
	rp, relayAddr := startRelay(t, d, "--metrics", "127.0.0.1:0")
	metrics := regexp.MustCompile(`metrics at http://(\S+)/metrics`).FindStringSubmatch(rp.output())
	if metrics == nil {
		t.Fatalf("the relay printed no metrics address:\n%s", rp.output())
	}

	root := filepath.Join(d.dir, "export-data")
	os.MkdirAll(root, 0o755)
	sp, m := start(t, `share \S+ exporting \S+ on (\S+)`, nil, "share", "--config", d.admin, "--root", root, "--name", "data",
		"--relay", relayAddr, "--state", filepath.Join(d.dir, "share-state"))
	if want := "relay://" + relayAddr + "/share:data@uva"; m[1] != want {
		t.Fatalf("the share advertises %s, want %s", m[1], want)
	}
	if ports, sockets := holder.Listens(sp.cmd.Process.Pid); len(ports) != 0 || sockets == 0 {
		t.Fatalf("the share listens on ports %v (of %d sockets it holds); through a relay it should open none", ports, sockets)
	}
	d.pando(d.admin, "ns", "mount", "/uva/data", "data").ok()
	if out := d.pando(d.admin, "share", "ls").ok().stdout; !strings.Contains(out, "relay://"+relayAddr+"/share:data@uva") {
		t.Errorf("share ls does not show the relay address:\n%s", out)
	}

	// The CLI: put, then cat.
	local := filepath.Join(t.TempDir(), "hello.txt")
	os.WriteFile(local, []byte("through the relay\n"), 0o644)
	d.pando(d.admin, "put", local, "/uva/data/hello.txt").ok()
	if got, _ := os.ReadFile(filepath.Join(root, "hello.txt")); string(got) != "through the relay\n" {
		t.Fatalf("the share holds %q", got)
	}
	if out := d.pando(d.admin, "cat", "/uva/data/hello.txt").ok().stdout; out != "through the relay\n" {
		t.Fatalf("cat gave %q", out)
	}

	// The mount: a file the share holds read, one written and read back
	// at the share.
	big := randomBytes(7, 8<<20+123)
	os.WriteFile(filepath.Join(root, "big"), big, 0o644)
	a := mountAgent(t, d.admin)
	got, err := os.ReadFile(filepath.Join(a.dir, "uva", "data", "big"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read through the mount: %d bytes of %d, %v", len(got), len(big), err)
	}
	written := randomBytes(8, 3<<20+7)
	if err := os.WriteFile(filepath.Join(a.dir, "uva", "data", "written"), written, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "written")); !bytes.Equal(got, written) {
		t.Fatalf("the share holds %d bytes of the %d written through the mount", len(got), len(written))
	}

	// The relay counted them.
	conns := relayMetric(t, metrics[1], `pando_relay_connections_total{server="share:data@uva"}`)
	toClient := relayMetric(t, metrics[1], `pando_relay_bytes_total{direction="to_client",server="share:data@uva"}`)
	toServer := relayMetric(t, metrics[1], `pando_relay_bytes_total{direction="to_server",server="share:data@uva"}`)
	if conns < 2 || toClient < float64(len(big)) || toServer < float64(len(written)) {
		t.Errorf("the relay counted %v connections, %v bytes to clients and %v to the share", conns, toClient, toServer)
	}
	if !strings.Contains(rp.output(), `msg="relay: server registered" server=share:data@uva`) {
		t.Errorf("the relay's log has no registration:\n%s", rp.output())
	}

	// pando doctor reaches the share through the relay too.
	out, _, _ := runDoctor(t, d.admin)
	if l := doctorLines(t, out)["share data"]; l[0] != "ok" {
		t.Errorf("doctor's check of the share through the relay: %s %s", l[0], l[1])
	}

	// The share gone, the relay says so, in the client's one sentence.
	sp.stop(t)
	d.pando(d.admin, "cat", "/uva/data/hello.txt").fails(5, "cannot reach share data: the relay at "+relayAddr+" refused: no server named share:data@uva is registered at this relay")
	if n := relayMetric(t, metrics[1], `pando_relay_refusals_total{reason="unknown-server",server=""}`); n < 1 {
		t.Errorf("%v unknown-server refusals counted", n)
	}
}

// startRelay starts a relay process that trusts d's CA, with extra
// flags, and returns it and its address.
func startRelay(t *testing.T, d *domain, extra ...string) (*proc, string) {
	t.Helper()
	admin, err := config.Load(d.admin)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(d.dir, d.name+"-ca.pem")
	if err := os.WriteFile(caFile, []byte(admin.CA), 0o644); err != nil {
		t.Fatal(err)
	}
	p, m := start(t, `relay for domains \S+ listening on (\S+)`, nil, append([]string{"relay", "--listen", "127.0.0.1:0", "--ca", caFile}, extra...)...)
	return p, m[1]
}

// relayMetric reads one sample from a metrics page.
func relayMetric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in the metrics:\n%s", name, body)
	return 0
}

// TestRelayRefusesWrongCA: a share whose domain's CA the relay was not
// given cannot register, and says so in one sentence; the relay goes on
// serving the domain it trusts.
func TestRelayRefusesWrongCA(t *testing.T) {
	uva, evil := newDomain(t, "uva"), newDomain(t, "evil")
	_, relayAddr := startRelay(t, uva)
	root := filepath.Join(evil.dir, "export-data")
	os.MkdirAll(root, 0o755)
	r := runPandoFor(t, 30*time.Second, "", evil.admin, "share", "--root", root, "--name", "data", "--relay", relayAddr,
		"--state", filepath.Join(evil.dir, "share-state"))
	r.fails(1, "share data cannot be served through the relay", "this relay does not accept your certificate: share:data@evil is of domain evil, which is not among the domains trusted here (uva)")
}

// TestDomainThroughRelay: a whole domain behind a firewall, its controller
// and its share each started with --relay and no --listen (neither holds
// a listening socket), is used from outside through the relay alone: the
// share registers with its controller through it, the CLI reaches both
// through it, and another domain links it at its relay address and reads
// its share.
func TestDomainThroughRelay(t *testing.T) {
	d := newDomain(t, "nat") // first start, to make the domain and its CA
	_, relayAddr := startRelay(t, d)
	d.ctrl.stop(t)
	cp, m := start(t, `listening on (\S+)`, nil, "controller", "--state", filepath.Join(d.dir, "controller"), "--relay", relayAddr)
	if want := "relay://" + relayAddr + "/controller@nat"; m[1] != want {
		t.Fatalf("the controller advertises %s, want %s", m[1], want)
	}
	root := filepath.Join(d.dir, "export-data")
	os.MkdirAll(root, 0o755)
	sp, _ := start(t, `share \S+ exporting`, nil, "share", "--config", d.admin, "--root", root, "--name", "data",
		"--relay", relayAddr, "--state", filepath.Join(d.dir, "share-state"))
	for _, p := range []*proc{cp, sp} {
		if ports, sockets := holder.Listens(p.cmd.Process.Pid); len(ports) != 0 || sockets == 0 {
			t.Fatalf("pando %s listens on ports %v (of %d sockets); through a relay it should open none", p.cmd.Args[1], ports, sockets)
		}
	}
	d.pando(d.admin, "ns", "mount", "/nat/data", "data").ok()
	local := filepath.Join(t.TempDir(), "f")
	os.WriteFile(local, []byte("behind the firewall\n"), 0o644)
	d.pando(d.admin, "put", local, "/nat/data/f").ok()
	if out := d.pando(d.admin, "cat", "/nat/data/f").ok().stdout; out != "behind the firewall\n" {
		t.Fatalf("cat gave %q", out)
	}
	if out := d.pando(d.admin, "share", "ls").ok().stdout; !strings.Contains(out, "online") {
		t.Errorf("the share is not online:\n%s", out)
	}

	// Another domain links it at its relay address and reads it, the
	// controller and the share both reached through the relay.
	uva := newDomain(t, "uva")
	alice := uva.addUser("alice", "physics")
	fpNat := strings.TrimSpace(d.pando(d.admin, "domain", "fingerprint").ok().stdout)
	fpUva := strings.TrimSpace(uva.pando(uva.admin, "domain", "fingerprint").ok().stdout)
	d.pando(d.admin, "domain", "link", "uva", "--controller", uva.addr, "--fingerprint", fpUva).ok()
	uva.pando(uva.admin, "domain", "link", "nat", "--controller", m[1], "--fingerprint", fpNat, "--admit", "none").ok()
	d.pando(d.admin, "acl", "set", "/nat/data", "group:physics@uva", "rl").ok()
	if out := uva.pando(uva.admin, "domain", "ls").ok().stdout; !strings.Contains(out, "reachable") {
		t.Errorf("pando domain ls at uva:\n%s", out)
	}
	p := peerOf(t, uva.client(alice), "nat")
	data, _, _, err := p.GetFile(context.Background(), "/nat/data/f", make([]byte, 4096))
	if err != nil || string(data) != "behind the firewall\n" {
		t.Fatalf("alice@uva's read through the relay: %q, %v", data, err)
	}
}
