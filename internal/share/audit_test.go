package share

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// testServer is a share of domain "fuzz" over cfg.Root, named "fz", and
// the key its tokens are signed with.
func testServer(tb testing.TB, cfg Config) (*Server, ed25519.PrivateKey) {
	tb.Helper()
	pub, priv, err := auth.NewTokenKey()
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Name, cfg.Domain, cfg.TokenKey = "fz", "fuzz", pub
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, priv
}

// loginAs opens a connection of t's principal ("name@domain") and
// installs t, signed with priv, in slot 1.
func loginAs(tb testing.TB, s *Server, priv ed25519.PrivateKey, t auth.Token) (*rpc.ServerConn, error) {
	tb.Helper()
	t.Share = s.cfg.Name
	if t.ID == "" {
		t.ID = "t"
	}
	if t.Issued.IsZero() {
		t.Issued, t.Expires = time.Now(), time.Now().Add(time.Hour)
	}
	signed, err := auth.SignToken(priv, &t)
	if err != nil {
		tb.Fatal(err)
	}
	name, domain, _ := strings.Cut(t.Principal, "@")
	sc := &rpc.ServerConn{State: &session{peer: auth.Identity{Domain: domain, Role: auth.RoleUser, Name: name}}}
	meta, _ := wire.Marshal(wire.AuthReq{Token: signed})
	_, err = s.Serve(context.Background(), &rpc.Request{Op: wire.OpAuth, Meta: meta, Conn: sc})
	return sc, err
}

// TestAuditRefusals: a share records each refusal of rights, of a token
// and of a connection, with who, what, where and the sentence the client
// got; what it refused changed nothing, and what it allowed is not
// recorded (the controller recorded the grant).
func TestAuditRefusals(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	log, err := audit.Open(filepath.Join(dir, audit.FileName), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s, priv := testServer(t, Config{Root: root, Audit: log})
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := loginAs(t, s, priv, auth.Token{Principal: "alice@fuzz", Grants: []auth.Grant{{Path: "", Rights: auth.Read | auth.List}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "f"}, nil); err != nil {
		t.Fatal(err)
	}
	err = serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite | wire.OpenTrunc}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeAccess {
		t.Fatalf("open for writing without the write right: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "kept" {
		t.Fatalf("a refused open changed the file to %q", b)
	}
	// An expired token, and one of another key.
	old := time.Now().Add(-2 * time.Hour)
	if _, err := loginAs(t, s, priv, auth.Token{Principal: "bob@fuzz", Issued: old, Expires: old.Add(time.Hour)}); err == nil {
		t.Fatal("an expired token was taken")
	}
	_, other, _ := auth.NewTokenKey()
	if _, err := loginAs(t, s, other, auth.Token{Principal: "carol@fuzz"}); err == nil {
		t.Fatal("a token of another key was taken")
	}
	// A data channel with a forged ticket.
	if err := s.Opened(&rpc.ServerConn{Channel: wire.ChannelDataClear, Ticket: make([]byte, rpc.TicketSize)}); err == nil {
		t.Fatal("a forged ticket opened a data channel")
	}
	log.Flush()
	recs, _, err := audit.Read([]string{dir}, audit.Filter{}, func(w audit.Warning) { t.Error(w) })
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Record{
		{Who: "alice@fuzz", Action: "open", Path: "f", Rights: "w"},
		{Who: "bob@fuzz", Action: audit.ActionToken},
		{Who: "carol@fuzz", Action: audit.ActionToken},
		{Action: audit.ActionConnect},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r.Who != w.Who || r.Action != w.Action || r.Path != w.Path || r.Rights != w.Rights || r.Result != audit.Refused ||
			r.Domain != "fuzz" || r.Server != "share:fz@fuzz" || r.Detail == "" {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
	}
	if !strings.Contains(recs[1].Detail, "expired") {
		t.Errorf("the expired token's record says %q", recs[1].Detail)
	}
}
