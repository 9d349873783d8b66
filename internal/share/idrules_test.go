package share

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// TestIDRulesOwnFiles: what a principal of another domain creates
// (a file, a directory) is owned on the share's host by the account its
// first matching rule names (a principal, a group of its token, its
// domain, the default), and recorded as the principal's; what one of
// the share's own domain creates goes to the share's owner as before.
func TestIDRulesOwnFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to other accounts needs root") // CI runs as root
	}
	root := t.TempDir()
	rules := filepath.Join(t.TempDir(), "ids")
	if err := os.WriteFile(rules, []byte(`# uva's people
alice@uva           daemon
group:physics@uva   2001:2002   # the physicists' files go to their own account
*@uva               bin:users

*                   3001
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, priv := testServer(t, Config{Root: root, IDRules: rules, Owner: "4001:4002"})
	all := []auth.Grant{{Path: "", Rights: auth.All}}
	for _, c := range []struct {
		principal string
		groups    []string
		uid, gid  uint32
	}{
		{"alice@uva", []string{"physics@uva"}, 1, 1}, // the principal's own rule first
		{"bob@uva", []string{"staff@uva", "physics@uva"}, 2001, 2002},
		{"carol@uva", nil, 2, 100},
		{"dave@cern", []string{"physics@uva"}, 2001, 2002}, // a group rule names the group, whoever's domain
		{"erin@cern", nil, 3001, 3001},
		{"admin@fuzz", nil, 4001, 4002}, // the share's own domain: its owner
	} {
		sc, err := loginAs(t, s, priv, auth.Token{Principal: c.principal, Groups: c.groups, Grants: all})
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Split(c.principal, "@")[0]
		if err := serveAs(t, s, sc, wire.OpCreate, wire.OpenReq{Tok: 1, Path: name, Flags: wire.OpenWrite, Mode: 0o644}, nil); err != nil {
			t.Fatal(err)
		}
		var a wire.AttrResp
		if err := serveAs(t, s, sc, wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: name + ".d", Mode: 0o755}, &a); err != nil {
			t.Fatal(err)
		}
		if a.Attr.Owner != c.principal {
			t.Errorf("%s's directory is recorded as %q's", c.principal, a.Attr.Owner)
		}
		for _, p := range []string{name, name + ".d"} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(root, p), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != c.uid || st.Gid != c.gid {
				t.Errorf("%s, made by %s (groups %v), is owned by %d:%d on disk, want %d:%d", p, c.principal, c.groups, st.Uid, st.Gid, c.uid, c.gid)
			}
		}
	}

	// Without rules, a remote principal's files go to the share's owner.
	plain, priv2 := testServer(t, Config{Root: t.TempDir(), Owner: "4001:4002"})
	sc, err := loginAs(t, plain, priv2, auth.Token{Principal: "alice@uva", Grants: all})
	if err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, plain, sc, wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: "d", Mode: 0o755}, nil); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(plain.cfg.Root, "d"), &st); err != nil || st.Uid != 4001 || st.Gid != 4002 {
		t.Errorf("without rules, alice@uva's directory is %d:%d (%v), want the share's owner 4001:4002", st.Uid, st.Gid, err)
	}
}

// TestIDRulesRefused: a rules file the share cannot follow keeps it from
// starting, with one sentence naming the file and line.
func TestIDRulesRefused(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"alice@uva\n", "line 1: \"alice@uva\" is not a rule: write PRINCIPAL ACCOUNT[:GROUP]"},
		{"# c\nalice@uva daemon extra\n", "line 2: \"alice@uva daemon extra\" is not a rule"},
		{"alice@uva no-such-user-here\n", "line 1: owner \"no-such-user-here\": no such user on this machine"},
		{"alice@uva daemon:no-such-group-here\n", "line 1: owner \"daemon:no-such-group-here\": no such group on this machine"},
		{"alice@uva root\n", "line 1: root is root's: a principal of another domain never owns a file as root"},
		{"alice@uva daemon:0\n", "line 1: daemon:0 is root's"},
		{"alice@fuzz daemon\n", "line 1: \"alice@fuzz\" is of this share's own domain fuzz"},
		{"*@fuzz daemon\n", "is of this share's own domain fuzz"},
		{"* daemon\nalice@uva bin\n", "line 2: no principal reaches this rule: the rule * on line 1 matches every one first"},
		{"alice daemon\n", "line 1: \"alice\" is no principal: give name@domain, *@domain, group:name@domain or *"},
		{"Alice@uva daemon\n", "line 1: \"Alice@uva\": name \"Alice\" may hold only"},
		{"group:*@uva daemon\n", "line 1: \"group:*@uva\": name \"*\""},
		{"a@b@c daemon\n", "line 1: \"a@b@c\" is no principal"},
	} {
		f := filepath.Join(t.TempDir(), "ids")
		if err := os.WriteFile(f, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		rs, err := loadIDRules(f, "fuzz")
		if err == nil || !strings.Contains(err.Error(), "--id-rules "+f+" "+"") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rules %q: %v (%v), want an error with %q", c.text, err, rs, c.want)
		}
	}
	if _, err := New(Config{Name: "fz", Domain: "fuzz", Root: t.TempDir(), IDRules: filepath.Join(t.TempDir(), "missing")}); err == nil ||
		!strings.Contains(err.Error(), "--id-rules") {
		t.Errorf("a missing rules file: %v", err)
	}
}

// TestIDRulesReload: a reload takes a good file and keeps the rules in
// force when the new file is refused.
func TestIDRulesReload(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("identity rules need root") // CI runs as root
	}
	f := filepath.Join(t.TempDir(), "ids")
	write := func(s string) {
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("* daemon\n")
	s, _ := testServer(t, Config{Root: t.TempDir(), IDRules: f, Owner: "4001"})
	tok := &auth.Token{Principal: "alice@uva"}
	if o := s.accountFor(tok); o == nil || o.uid != 1 {
		t.Fatalf("account %+v, want daemon", o)
	}
	write("* bin\n")
	if err := s.ReloadIDRules(); err != nil {
		t.Fatal(err)
	}
	if o := s.accountFor(tok); o == nil || o.uid != 2 {
		t.Fatalf("after a reload: account %+v, want bin", o)
	}
	write("* root\n")
	if err := s.ReloadIDRules(); err == nil || !strings.Contains(err.Error(), "keeps its identity rules") {
		t.Fatalf("a refused file: %v", err)
	}
	if o := s.accountFor(tok); o == nil || o.uid != 2 {
		t.Fatalf("after a refused reload: account %+v, want bin still", o)
	}
}
