package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/testenv/snap"
	"pando.dev/pando/internal/wire"
)

// TestAudit: a controller and a share, each a process of its own, write
// what they grant, refuse and change to their audit logs, and pando audit
// reads both: alice's token (a grant with her rights), her write refused
// at the share with the share's directory unchanged, her ACL change
// refused at the controller, the administrator's ACL change, and the
// connection of a revoked user; each with the address it came from.
func TestAudit(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("data")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	alice, bob := d.addUser("alice"), d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/uva/data", "alice", "read").ok()
	d.pando(alice, "cat", "/uva/data/f").ok()
	src := filepath.Join(t.TempDir(), "g")
	if err := os.WriteFile(src, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := shareFile(t, filepath.Join(root, "f"))
	d.pando(alice, "put", src, "/uva/data/f").fails(4, "alice@uva lacks the write right")
	if after := shareFile(t, filepath.Join(root, "f")); after != before {
		t.Fatalf("a refused write changed the share's file: %s, was %s", after, before)
	}
	d.pando(alice, "acl", "set", "/uva/data", "alice", "all").fails(4, "lacks the administer right")
	d.pando(d.admin, "user", "revoke", "bob").ok()
	d.pando(bob, "ls", "/uva/data")

	states := []string{"--state", filepath.Join(d.dir, "controller"), "--state", filepath.Join(d.dir, "share-state")}
	var recs []audit.Record
	deadline := 50
	for ; deadline > 0; deadline-- { // the logs are written a moment after the replies
		recs = nil
		out := d.pando(d.admin, append([]string{"audit", "--json"}, states...)...).ok().stdout
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r audit.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("pando audit --json printed %q: %v", line, err)
			}
			recs = append(recs, r)
		}
		if find(recs, "bob@uva", "connect", audit.Refused) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range []struct {
		who, action, result, path, rights, server string
	}{
		{"alice@uva", "resolve", audit.Granted, "/uva/data", "rl", "controller@uva"},
		{"alice@uva", "open", audit.Refused, "f", "w", "share:data@uva"},
		{"alice@uva", "acl-set", audit.Refused, "/uva/data", "a", "controller@uva"},
		{"admin@uva", "acl-set", audit.Granted, "/uva/data", "", "controller@uva"},
		{"admin@uva", "user-revoke", audit.Granted, "", "", "controller@uva"},
		{"bob@uva", "connect", audit.Refused, "", "", "controller@uva"},
	} {
		r := find(recs, w.who, w.action, w.result)
		if r == nil {
			t.Errorf("no record %s %s %s in\n%+v", w.who, w.action, w.result, recs)
			continue
		}
		if r.Path != w.path || r.Rights != w.rights || r.Server != w.server || r.Domain != "uva" || !strings.HasPrefix(r.From, "127.0.0.1:") {
			t.Errorf("record %+v, want %+v from 127.0.0.1", *r, w)
		}
	}
	out := d.pando(d.admin, append([]string{"audit", "--who", "alice", "--action", "open"}, states...)...).ok().stdout
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "lacks the write right") {
		t.Fatalf("pando audit --who alice --action open:\n%s", out)
	}
}

// find is the first record of who, action ("": any) and result.
func find(recs []audit.Record, who, action, result string) *audit.Record {
	for i, r := range recs {
		if r.Who == who && (action == "" || r.Action == action) && r.Result == result {
			return &recs[i]
		}
	}
	return nil
}

// TestRemoteOwnersAndAudit: at a share of tacc run with identity rules,
// what users of the linked domain uva create is owned on disk by the
// account of their first matching rule (the principal's, a group's, the
// default) and recorded as theirs; what tacc's own user creates goes to
// the share's owner account. tacc's controller records the link it made
// and the tokens it signed for uva's users, and its share the write it
// refused to one of them and the handshake it refused to a stranger
// domain's certificate, each decided by tacc; uva's controller records
// the group assertions it signed for its users to present to tacc.
func TestRemoteOwnersAndAudit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to other accounts needs root") // CI runs as root
	}
	ctx := context.Background()
	uva, tacc := testenv.New(t, "uva"), testenv.New(t, "tacc")
	tacc.IDRules = filepath.Join(t.TempDir(), "ids")
	if err := os.WriteFile(tacc.IDRules, []byte("alice@uva daemon\ngroup:physics@uva 2001:2002\n* 3001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := tacc.AddShare("data")
	link(t, tacc, uva, wire.AdmitAll)
	link(t, uva, tacc, wire.AdmitNone)
	taccAdmin := tacc.Client(tacc.Admin).Admin()
	if err := taccAdmin.ACLSet(ctx, "/tacc/data", []wire.ACLEntry{{Who: "anyone@uva", Rights: "rlidw"}, {Who: "dave", Rights: "rlidw"}, {Who: "carol@uva", Rights: "w", Negative: true}}, false); err != nil {
		t.Fatal(err)
	}
	put := func(c *client.Client, name string) error {
		b := []byte("from " + c.Principal() + "\n")
		_, err := c.PutFile(ctx, "/tacc/data/"+name, b, 0o644, 0, wire.CRC(b))
		return err
	}
	nobody := func() (uint32, uint32) { // the share's owner: its root is root's
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Dir(root), &st); err != nil || st.Uid != 0 {
			t.Fatalf("the export's parent is not root's (%v): the test expects nobody as the owner", err)
		}
		return 65534, 65534
	}
	nu, ng := nobody()
	for _, c := range []struct {
		client   *client.Client
		uid, gid uint32
	}{
		{peerOf(t, uva.Client(domainUser(t, uva, "alice", "physics")), "tacc"), 1, 1},
		{peerOf(t, uva.Client(domainUser(t, uva, "bob", "physics")), "tacc"), 2001, 2002},
		{peerOf(t, uva.Client(domainUser(t, uva, "erin", "chem")), "tacc"), 3001, 3001},
		{tacc.Client(domainUser(t, tacc, "dave")), nu, ng},
	} {
		name := strings.Split(c.client.Principal(), "@")[0]
		if err := put(c.client, name); err != nil {
			t.Fatalf("%s writes at tacc: %v", c.client.Principal(), err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(root, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != c.uid || st.Gid != c.gid {
			t.Errorf("%s's file is %d:%d on tacc's disk, want %d:%d", c.client.Principal(), st.Uid, st.Gid, c.uid, c.gid)
		}
		a, err := c.client.Stat(ctx, "/tacc/data/"+name)
		if err != nil || a.Owner != c.client.Principal() {
			t.Errorf("%s's file is recorded as %q's (%v)", c.client.Principal(), a.Owner, err)
		}
	}
	carol := peerOf(t, uva.Client(domainUser(t, uva, "carol")), "tacc")
	before := snap.Take(t, root)
	if err := put(carol, "alice"); err == nil {
		t.Fatal("carol@uva overwrote alice's file against a negative entry")
	}
	snap.Same(t, "tacc's share after carol's refused write", before, snap.Take(t, root))

	// A stranger domain's user dialling tacc's share itself: refused in
	// the handshake, and recorded.
	evil := testenv.New(t, "evil")
	cert, err := evil.Admin.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := auth.PoolFromPEM([]byte(tacc.Admin.CA))
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := rpc.Dial(ctx, tacc.Shares["data"].Addr, auth.ClientConfig(cert, pool, nil), wire.ChannelControl); err == nil {
		if _, err := conn.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err == nil {
			t.Fatal("a stranger domain's certificate was served by tacc's share")
		}
		conn.Close()
	}

	tacc.Ctrl.Audit().Flush()
	tacc.Shares["data"].Audit().Flush()
	dirs := []string{filepath.Dir(tacc.Ctrl.Audit().Path()), filepath.Join(filepath.Dir(root), "shares")}
	recs, _, err := audit.Read(dirs, audit.Filter{Domain: "tacc"}, func(w audit.Warning) { t.Error(w) })
	if err != nil {
		t.Fatal(err)
	}
	uva.Ctrl.Audit().Flush()
	home, _, err := audit.Read([]string{filepath.Dir(uva.Ctrl.Audit().Path())}, audit.Filter{Who: "alice@uva", Action: "domain-assert"}, func(w audit.Warning) { t.Error(w) })
	if err != nil || len(home) == 0 || home[0].Detail != "group assertion signed for domain tacc" {
		t.Errorf("uva's log of the assertions it signed for alice: %+v %v", home, err)
	}
	for _, w := range []struct{ who, action, result string }{
		{"admin@tacc", "domain-link", audit.Granted},
		{"alice@uva", "resolve", audit.Granted},
		{"carol@uva", "", audit.Refused},
		{"admin@evil", "connect", audit.Refused},
	} {
		if find(recs, w.who, w.action, w.result) == nil {
			t.Errorf("tacc's logs hold no %s %s %s: %+v", w.who, w.action, w.result, recs)
		}
	}
}

// TestIDRulesFlag: pando share (and pando up) refuses a rules file it
// cannot follow with one sentence naming the line, and, started with a
// good one, reads
// it again on SIGHUP, keeping the rules in force when the new file is
// refused, and serving on.
func TestIDRulesFlag(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("identity rules need root") // CI runs as root
	}
	d := newDomain(t, "tacc")
	root := filepath.Join(d.dir, "export")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "ids")
	if err := os.WriteFile(rules, []byte("alice@uva daemon\n*@cern no-such-account-here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"share", "--root", root, "--name", "data", "--listen", "127.0.0.1:0", "--state", filepath.Join(d.dir, "share-state"), "--id-rules", rules}
	d.pando(d.admin, args...).fails(1, "--id-rules "+rules+" line 2", "no-such-account-here", "no such user")
	up := []string{"up", "--state", filepath.Join(t.TempDir(), "up"), "--listen", "127.0.0.1:0", "--no-config", "--id-rules", rules}
	d.pando(d.admin, up...).fails(1, "--id-rules "+rules+" line 2", "no-such-account-here")

	if err := os.WriteFile(rules, []byte("alice@uva daemon\n* nobody\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := start(t, `share \S+ exporting`, nil, append([]string{"--config", d.admin}, args...)...)
	if err := os.WriteFile(rules, []byte("alice@uva root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.output(), "share data keeps its identity rules") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the refused rules after SIGHUP:\n%s", p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-p.done:
		t.Fatalf("the share exited on SIGHUP:\n%s", p.output())
	default:
	}
	d.pando(d.admin, "ns", "mount", "/tacc/data", "data").ok()
	d.pando(d.admin, "ls", "/tacc/data").ok()
}
