package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/audit"
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

func find(recs []audit.Record, who, action, result string) *audit.Record {
	for i, r := range recs {
		if r.Who == who && r.Action == action && r.Result == result {
			return &recs[i]
		}
	}
	return nil
}
