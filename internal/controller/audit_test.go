package controller

import (
	"context"
	"path/filepath"
	"testing"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

func serveAs(t *testing.T, c *Controller, sc *rpc.ServerConn, op wire.Op, msg any) error {
	t.Helper()
	meta, err := wire.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Serve(context.Background(), &rpc.Request{Op: op, Meta: meta, Conn: sc})
	return err
}

// auditRecords reads the controller's audit log, all of it read cleanly.
func auditRecords(t *testing.T, c *Controller, f audit.Filter) []audit.Record {
	t.Helper()
	c.audit.Flush()
	recs, found, err := audit.Read([]string{filepath.Dir(c.audit.Path())}, f, func(w audit.Warning) { t.Errorf("audit log: %v", w) })
	if err != nil || found == 0 {
		t.Fatalf("audit log not read (%d files): %v", found, err)
	}
	return recs
}

// TestAuditRecords: a token signed is a grant with the rights at its
// root; a refused resolve and a refused ACL change are refusals that name
// who, what and where, and change nothing; an ACL change by the
// administrator is recorded with its entries; a request that fails for
// another reason (a path of no mount) is not a refusal and is not
// recorded.
func TestAuditRecords(t *testing.T) {
	c := fuzzController(t)
	alice, admin := userConn("alice"), userConn("admin")
	if err := serveAs(t, c, alice, wire.OpResolve, wire.ResolveReq{Path: "/fz/data/a"}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, c)
	if err := serveAs(t, c, alice, wire.OpACLSet, wire.ACLSetReq{Path: "/fz/data", Entries: []wire.ACLEntry{{Who: "alice", Rights: "all"}}}); err == nil {
		t.Fatal("alice set an ACL without the administer right")
	}
	if err := serveAs(t, c, userConn("mallory"), wire.OpResolve, wire.ResolveReq{Path: "/fz/data/a"}); err == nil {
		t.Fatal("an unknown user was given a token")
	}
	if err := serveAs(t, c, alice, wire.OpResolve, wire.ResolveReq{Path: "/fz/nowhere"}); err == nil {
		t.Fatal("a path of no mount resolved")
	}
	if after := snapshot(t, c); after != before {
		t.Fatal("a refused request changed the controller's state")
	}
	if err := serveAs(t, c, admin, wire.OpACLSet, wire.ACLSetReq{Path: "/fz/data/x", Entries: []wire.ACLEntry{{Who: "bob", Rights: "r", Negative: true}}}); err != nil {
		t.Fatal(err)
	}
	recs := auditRecords(t, c, audit.Filter{})
	want := []audit.Record{
		{Who: "alice@fz", Action: "resolve", Path: "/fz/data", Rights: "rl", Result: audit.Granted},
		{Who: "alice@fz", Action: "acl-set", Path: "/fz/data", Rights: "a", Result: audit.Refused},
		{Who: "mallory@fz", Action: "resolve", Path: "/fz/data/a", Result: audit.Refused},
		{Who: "admin@fz", Action: "acl-set", Path: "/fz/data/x", Result: audit.Granted, Detail: "entries set: -bob:r"},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r.Who != w.Who || r.Action != w.Action || r.Path != w.Path || r.Rights != w.Rights || r.Result != w.Result ||
			w.Detail != "" && r.Detail != w.Detail || r.Domain != "fz" || r.Server != "controller@fz" || r.Time.IsZero() {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
		if r.Result == audit.Refused && r.Detail == "" {
			t.Errorf("record %d: a refusal without its sentence", i)
		}
	}
	if got := auditRecords(t, c, audit.Filter{Who: "alice", Path: "/fz/data", Action: "resolve"}); len(got) != 1 {
		t.Fatalf("filter kept %d records, want alice's grant", len(got))
	}
}
