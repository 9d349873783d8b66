package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// TestCertRenewed: with certificates that last 9 s, a long-running client
// (an agent's) renews its own before it expires, again and again, and
// keeps reading and writing past the first certificate's end; the
// certificate it last renewed works for a new client, the expired first
// one does not, and a revoked user renews nothing.
func TestCertRenewed(t *testing.T) {
	ctx := context.Background()
	d := testenv.NewWith(t, "uva", func(c *controller.Config) { c.CertTTL = 9 * time.Second })
	d.AddShare("data")
	alice := domainUser(t, d, "alice")
	admin := d.Client(d.Admin).Admin()
	if err := admin.ACLSet(ctx, "/uva/data", []wire.ACLEntry{{Who: "alice", Rights: "rlidw"}}, false); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var renewed []*config.Config
	c, err := client.New(alice, client.Options{KeepFresh: true, CertRenewed: func(cert, key []byte) {
		next := *alice
		next.Cert, next.Key = string(cert), string(key)
		mu.Lock()
		renewed = append(renewed, &next)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := c.CertExpires()
	buf := make([]byte, 4096)
	for end := time.Now().Add(22 * time.Second); time.Now().Before(end); {
		body := []byte(time.Now().String())
		if _, err := c.PutFile(ctx, "/uva/data/job.txt", body, 0o644, 0, wire.CRC(body)); err != nil {
			t.Fatalf("write at %s (first certificate until %s): %v", time.Now().Format(time.TimeOnly), first.Format(time.TimeOnly), err)
		}
		if data, _, _, err := c.GetFile(ctx, "/uva/data/job.txt", buf); err != nil || string(data) != string(body) {
			t.Fatalf("read at %s: %q %v", time.Now().Format(time.TimeOnly), data, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	mu.Lock()
	n := len(renewed)
	last := renewed[max(n-1, 0):]
	mu.Unlock()
	if n < 2 || !c.CertExpires().After(first.Add(9*time.Second)) {
		t.Fatalf("%d renewals in 22 s of 9 s certificates; the one presented expires %s, the first %s", n, c.CertExpires(), first)
	}
	// The last renewed certificate serves a client of its own; the first,
	// expired, does not.
	fresh := d.Client(last[0])
	if _, err := fresh.Stat(ctx, "/uva/data/job.txt"); err != nil {
		t.Fatalf("a client with the renewed certificate: %v", err)
	}
	old, err := client.New(alice, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Stat(ctx, "/uva/data/job.txt"); err == nil {
		t.Fatal("the first certificate, expired, still opens connections")
	}
	// A revoked user's client renews nothing more.
	if err := admin.UserRevoke(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(7 * time.Second)
	mu.Lock()
	after := len(renewed)
	mu.Unlock()
	time.Sleep(7 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(renewed) != after {
		t.Errorf("a revoked user's certificate was renewed (%d renewals, %d before)", len(renewed), after)
	}
}

// TestGatewayCertRenewed: a gateway whose certificate lasts 9 s renews it
// and serves, well after the first one expired, a user it never served
// before (whose client dials the controller and the share anew).
func TestGatewayCertRenewed(t *testing.T) {
	d := newDomain(t, "uva", "--cert-ttl", "9s")
	root := d.addShare("data")
	if err := os.WriteFile(filepath.Join(root, "f.txt"), []byte("still served\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.addUser("alice")
	d.addUser("late")
	d.pando(d.admin, "acl", "set", "/uva/data", "alice", "rl", "late", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	d.pando(d.admin, "user", "add", "web", "--gateway", "-o", web).ok()
	pw := filepath.Join(d.dir, "passwd")
	runPando(t, "alice-password\n", web, "serve", "passwd", "--passwords", pw, "alice").ok()
	runPando(t, "late-password\n", web, "serve", "passwd", "--passwords", pw, "late").ok()
	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache"), "--passwords", pw)
	get := func(user string) string {
		out, _ := exec.Command("curl", "-sS", "--cacert", m[2], "-u", user, "-w", "%{http_code}", m[1]+"/uva/data/f.txt").Output()
		return string(out)
	}
	if out := get("alice:alice-password"); out != "still served\n200" {
		t.Fatalf("GET as alice: %q", out)
	}
	time.Sleep(15 * time.Second) // the gateway's first certificate has expired
	if out := get("late:late-password"); out != "still served\n200" {
		t.Fatalf("GET as a user first served after the gateway's first certificate expired: %q", out)
	}
}
