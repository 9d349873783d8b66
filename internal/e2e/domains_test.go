package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/testenv/snap"
	"pando.dev/pando/internal/wire"
)

// domainUser adds user name (in groups) to domain d and returns its
// configuration.
func domainUser(t *testing.T, d *testenv.Domain, name string, groups ...string) *config.Config {
	t.Helper()
	u, err := d.Client(d.Admin).Admin().UserAdd(context.Background(), name, groups)
	if err != nil {
		t.Fatal(err)
	}
	return &config.Config{Domain: d.Admin.Domain, Controller: d.Admin.Controller, User: name,
		CA: string(u.CA), Cert: string(u.Cert), Key: string(u.Key)}
}

func fingerprintOf(t *testing.T, d *testenv.Domain) string {
	t.Helper()
	fp, err := auth.FingerprintPEM([]byte(d.Admin.CA))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// link links domain `from` with `to` (from accepts to's users as admit says).
func link(t *testing.T, from, to *testenv.Domain, admit string, groups ...string) {
	t.Helper()
	l := wire.DomainLink{Name: to.Admin.Domain, Controllers: []string{to.Admin.Controller}, Admit: admit, Groups: groups}
	fp := strings.ToLower(strings.ReplaceAll(fingerprintOf(t, to), ":", "")) // any form
	if _, err := from.Client(from.Admin).Admin().DomainLink(context.Background(), l, fp, ""); err != nil {
		t.Fatalf("link %s -> %s: %v", from.Admin.Domain, to.Admin.Domain, err)
	}
}

// peerOf returns alice's client of the linked domain name.
func peerOf(t *testing.T, home *client.Client, name string) *client.Client {
	t.Helper()
	r, err := home.Links(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Links {
		if l.Name == name {
			p, err := home.Peer(l, client.Options{Streams: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return p
		}
	}
	t.Fatalf("%s is not among %s's links %+v", name, home.Domain(), r.Links)
	return nil
}

func wantRefusal(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no refusal", what)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: refusal %q does not say %q", what, err, p)
		}
	}
}

// TestDomainLinks links two domains (and a third by invitation) and holds
// what a link promises: a linked domain's user reads and writes where the
// owning domain's ACL lets it, a negative entry naming it wins over its
// group's grant, the link bounds whom it admits, an unlinked domain's
// certificate is refused by controller and share, an invitation serves
// once, and unlinking ends an open session at once. Each refusal leaves
// the share's tree unchanged.
func TestDomainLinks(t *testing.T) {
	ctx := context.Background()
	uva, tacc := testenv.New(t, "uva"), testenv.New(t, "tacc")
	root := tacc.AddShare("data")
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from tacc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	alice := domainUser(t, uva, "alice", "physics")
	home := uva.Client(alice)
	taccAdmin := tacc.Client(tacc.Admin).Admin()

	// Before any link: tacc's controller and share refuse alice's certificate.
	before := snap.Take(t, root)
	stranger := *alice
	stranger.Domain, stranger.Controller, stranger.CA = "tacc", tacc.Admin.Controller, tacc.Admin.CA
	sc, err := client.New(&stranger, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	_, err = sc.Stat(ctx, "/tacc/data/hello.txt")
	wantRefusal(t, "unlinked domain", err, "uva", "not linked")
	snap.Same(t, "the share after an unlinked domain's request", before, snap.Take(t, root))
	if _, err := home.Links(ctx); err != nil {
		t.Fatal(err)
	}

	link(t, tacc, uva, wire.AdmitAll)  // tacc accepts uva's users
	link(t, uva, tacc, wire.AdmitNone) // uva knows tacc, admits none of its users
	if err := taccAdmin.ACLSet(ctx, "/tacc/data", []wire.ACLEntry{{Who: "group:physics@uva", Rights: "rlidw"}}, false); err != nil {
		t.Fatal(err)
	}
	p := peerOf(t, home, "tacc")
	if p.Principal() != "alice@uva" {
		t.Fatalf("the peer client acts as %s", p.Principal())
	}
	data, _, _, err := p.GetFile(ctx, "/tacc/data/hello.txt", make([]byte, 4096))
	if err != nil || string(data) != "hello from tacc\n" {
		t.Fatalf("cross-domain read: %q %v", data, err)
	}
	if _, err := p.PutFile(ctx, "/tacc/data/from-uva.txt", []byte("hi from alice\n"), 0o644, 0, wire.CRC([]byte("hi from alice\n"))); err != nil {
		t.Fatalf("cross-domain write: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "from-uva.txt")); err != nil || string(b) != "hi from alice\n" {
		t.Fatalf("the write at the share: %q %v", b, err)
	}

	// Third-party copies between the two domains' shares, both ways: the
	// bytes go share to share, none through alice's clients.
	uvaRoot := uva.AddShare("home")
	if err := uva.Client(uva.Admin).Admin().ACLSet(ctx, "/uva/home", []wire.ACLEntry{{Who: "alice", Rights: "rlidw"}}, false); err != nil {
		t.Fatal(err)
	}
	d, err := home.ResolveFor(ctx, "/uva/home/copy.txt", "data@tacc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Push(ctx, "/tacc/data/hello.txt", wire.PushReq{Whole: true, Block: 1 << 20, Dest: d, DestPath: "/uva/home/copy.txt", Mode: 0o644, DestDomain: "uva"}); err != nil {
		t.Fatalf("third-party copy tacc -> uva: %v", err)
	}
	testenv.SameFile(t, filepath.Join(root, "hello.txt"), filepath.Join(uvaRoot, "copy.txt"))
	d, err = p.ResolveFor(ctx, "/tacc/data/back.txt", "home@uva")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := home.Push(ctx, "/uva/home/copy.txt", wire.PushReq{Whole: true, Block: 1 << 20, Dest: d, DestPath: "/tacc/data/back.txt", Mode: 0o644, DestDomain: "tacc"}); err != nil {
		t.Fatalf("third-party copy uva -> tacc: %v", err)
	}
	testenv.SameFile(t, filepath.Join(root, "hello.txt"), filepath.Join(root, "back.txt"))
	if n := p.DataBytes() + home.DataBytes(); n != int64(len("hello from tacc\n")+len("hi from alice\n")) {
		t.Errorf("alice's clients moved %d bytes of file data; the copies should have moved none through them", n)
	}
	// Naming a third domain's share, or another domain's share at the
	// linked one, is refused.
	_, err = home.ResolveFor(ctx, "/uva/home/x", "data@cern")
	wantRefusal(t, "proxy of an unlinked domain", err, "cern", "has not linked")
	_, err = p.ResolveFor(ctx, "/tacc/data/x", "data@cern")
	wantRefusal(t, "proxy of a third domain", err, "its own domain")

	// A negative entry for the remote principal wins over its group's grant.
	if err := taccAdmin.ACLSet(ctx, "/tacc/data", []wire.ACLEntry{{Who: "-alice@uva", Rights: "w"}}, false); err != nil {
		t.Fatal(err)
	}
	before = snap.Take(t, root)
	time.Sleep(50 * time.Millisecond)
	_, err = p.PutFile(ctx, "/tacc/data/from-uva.txt", []byte("overwritten"), 0o644, 0, wire.CRC([]byte("overwritten")))
	wantRefusal(t, "negative entry", err, "alice@uva", "write right (w)", "from-uva.txt", "domain tacc decided")
	snap.Same(t, "the share after a refused write", before, snap.Take(t, root))
	if _, _, _, err := p.GetFile(ctx, "/tacc/data/hello.txt", make([]byte, 4096)); err != nil {
		t.Fatalf("read after the negative entry: %v", err)
	}

	// uva admits none of tacc's users: bob@tacc is refused at uva.
	bob := domainUser(t, tacc, "bob")
	bp := peerOf(t, tacc.Client(bob), "uva")
	_, err = bp.Stat(ctx, "/uva/home")
	wantRefusal(t, "admit none", err, "admits no principal of tacc", "domain uva decided")

	// A link that admits only a group: alice (physics) in, carol (chem) out.
	link(t, tacc, uva, wire.AdmitGroups, "physics")
	carol := peerOf(t, uva.Client(domainUser(t, uva, "carol", "chem")), "tacc")
	_, err = carol.Stat(ctx, "/tacc/data/hello.txt")
	wantRefusal(t, "admitted groups", err, "only the groups physics", "carol@uva", "domain tacc decided")
	if _, err := p.Stat(ctx, "/tacc/data/hello.txt"); err != nil {
		t.Fatalf("alice (physics) after relinking: %v", err)
	}

	// A third domain by invitation; the code serves once.
	cern := testenv.New(t, "cern")
	inv, err := taccAdmin.DomainInvite(ctx, wire.DomainInviteReq{Name: "cern"})
	if err != nil {
		t.Fatal(err)
	}
	cernAdmin := cern.Client(cern.Admin).Admin()
	if _, err := cernAdmin.DomainLink(ctx, wire.DomainLink{}, "", inv.Code); err != nil {
		t.Fatalf("join: %v", err)
	}
	r, err := tacc.Client(tacc.Admin).Links(ctx)
	if err != nil || len(r.Links) != 2 {
		t.Fatalf("tacc's links after the invitation: %+v %v", r.Links, err)
	}
	_, err = cernAdmin.DomainLink(ctx, wire.DomainLink{}, "", inv.Code)
	wantRefusal(t, "replayed invitation", err, "was used")
	impostor := testenv.New(t, "cern") // the same name, another CA
	_, err = impostor.Client(impostor.Admin).Admin().DomainLink(ctx, wire.DomainLink{}, "", inv.Code)
	wantRefusal(t, "an impostor of a linked domain", err, "not issued by domain cern's CA")
	_, err = cernAdmin.DomainLink(ctx, wire.DomainLink{}, "", inv.Code[:len(inv.Code)-4]+"AAAA")
	wantRefusal(t, "forged invitation", err, "invitation")

	// Unlinking ends alice's session at tacc's share at once.
	f, err := p.Open(ctx, "/tacc/data/hello.txt", uint32(os.O_RDONLY))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	if err := taccAdmin.DomainUnlink(ctx, "uva"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 4)
		_, err := f.ReadAt(ctx, buf, 0)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an open cross-domain read still works 5 s after unlink")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = p.Stat(ctx, "/tacc/data/hello.txt")
	if err == nil {
		t.Fatal("alice still reaches tacc after unlink")
	}
	var we *wire.Error
	if !errors.As(err, &we) && !strings.Contains(err.Error(), "link") {
		t.Logf("after unlink: %v", err)
	}
}

// TestLinkedJobOutlivesTokens: a job reading and writing across a link for
// 60 s, with tokens and group assertions that last 5 s on both sides,
// never fails: the client renews both before they end.
func TestLinkedJobOutlivesTokens(t *testing.T) {
	ctx := context.Background()
	uva, tacc := testenv.New(t, "uva"), testenv.New(t, "tacc")
	uva.RestartController(5 * time.Second)
	tacc.RestartController(5 * time.Second)
	root := tacc.AddShare("data")
	alice := domainUser(t, uva, "alice")
	link(t, tacc, uva, wire.AdmitAll)
	link(t, uva, tacc, wire.AdmitNone)
	if err := tacc.Client(tacc.Admin).Admin().ACLSet(ctx, "/tacc/data", []wire.ACLEntry{{Who: "alice@uva", Rights: "rlidw"}}, false); err != nil {
		t.Fatal(err)
	}
	home, err := client.New(alice, client.Options{KeepFresh: true})
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	r, err := home.Links(ctx)
	if err != nil || len(r.Links) != 1 {
		t.Fatalf("links: %+v %v", r, err)
	}
	p, err := home.Peer(r.Links[0], client.Options{KeepFresh: true, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	end := time.Now().Add(60 * time.Second)
	buf := make([]byte, 4096)
	for i := 0; time.Now().Before(end); i++ {
		body := []byte(time.Now().String())
		if _, err := p.PutFile(ctx, "/tacc/data/job.txt", body, 0o644, 0, wire.CRC(body)); err != nil {
			t.Fatalf("write %d at %s: %v", i, time.Now().Format(time.TimeOnly), err)
		}
		data, _, _, err := p.GetFile(ctx, "/tacc/data/job.txt", buf)
		if err != nil || string(data) != string(body) {
			t.Fatalf("read %d at %s: %q %v", i, time.Now().Format(time.TimeOnly), data, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(root, "job.txt")); err != nil || len(b) == 0 {
		t.Fatalf("the share: %q %v", b, err)
	}
}
