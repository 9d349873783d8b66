package auth

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"
)

func issued(t *testing.T, ca *CA, id Identity) *x509.Certificate {
	t.Helper()
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := ca.Issue(id, key.Public(), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCertPEM(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTrustChecksTheDomainsOwnCA(t *testing.T) {
	uva, _ := NewCA("uva")
	tacc, _ := NewCA("tacc")
	evil, _ := NewCA("evil")
	tr := NewTrust("tacc", tacc.Pool())
	alice := issued(t, uva, Identity{Domain: "uva", Role: RoleUser, Name: "alice"})
	bob := issued(t, tacc, Identity{Domain: "tacc", Role: RoleUser, Name: "bob"})
	// uva's CA speaking for tacc's users, and evil's for uva's.
	forge := func(ca *CA, domain string) *CA { f := *ca; f.domain = domain; return &f }
	forgedHome := issued(t, forge(uva, "tacc"), Identity{Domain: "tacc", Role: RoleUser, Name: "bob"})
	forgedUva := issued(t, forge(evil, "uva"), Identity{Domain: "uva", Role: RoleUser, Name: "alice"})
	use := x509.ExtKeyUsageClientAuth

	if id, err := tr.Verify([]*x509.Certificate{bob}, use); err != nil || id.String() != "bob@tacc" {
		t.Fatalf("home user: %v %v", id, err)
	}
	if _, err := tr.Verify([]*x509.Certificate{alice}, use); !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "has not linked") {
		t.Fatalf("unlinked domain: %v", err)
	}
	if err := tr.Set(map[string][]byte{"uva": uva.CertPEM()}); err != nil {
		t.Fatal(err)
	}
	if id, err := tr.Verify([]*x509.Certificate{alice}, use); err != nil || id.String() != "alice@uva" {
		t.Fatalf("linked user: %v %v", id, err)
	}
	if _, err := tr.Verify([]*x509.Certificate{forgedHome}, use); err == nil {
		t.Fatal("a linked CA spoke for the home domain")
	}
	if _, err := tr.Verify([]*x509.Certificate{forgedUva}, use); err == nil {
		t.Fatal("another CA spoke for a linked domain")
	}
	if err := tr.Set(map[string][]byte{"tacc": uva.CertPEM()}); err == nil {
		t.Fatal("linked the home domain with itself")
	}
	if err := tr.Set(map[string][]byte{"x": []byte("junk")}); err == nil || !tr.Linked("uva") {
		t.Fatalf("a bad PEM was taken, or changed the set: %v", err)
	}
	if err := tr.Set(nil); err != nil || tr.Linked("uva") {
		t.Fatal("unlink kept the domain")
	}
	if _, err := tr.Verify([]*x509.Certificate{alice}, use); err == nil {
		t.Fatal("an unlinked domain's user was accepted")
	}
}

func TestFingerprintForms(t *testing.T) {
	ca, _ := NewCA("uva")
	fp, err := FingerprintPEM(ca.CertPEM())
	if err != nil || len(fp) != 95 || fp != strings.ToUpper(fp) {
		t.Fatalf("fingerprint %q %v", fp, err)
	}
	for _, s := range []string{fp, strings.ToLower(fp), strings.ReplaceAll(fp, ":", ""), "sha256 Fingerprint=" + fp, " " + fp + "\n"} {
		if ok, err := SameFingerprint(ca.CertPEM(), s); !ok || err != nil {
			t.Errorf("%q: %v %v", s, ok, err)
		}
	}
	other, _ := NewCA("uva")
	if ok, _ := SameFingerprint(other.CertPEM(), fp); ok {
		t.Error("another CA has the same fingerprint")
	}
	for _, s := range []string{"", "abc", strings.Repeat("g", 64), fp[:90]} {
		if _, err := NormFingerprint(s); err == nil {
			t.Errorf("%q read as a fingerprint", s)
		}
	}
}

func TestACLRemotePrincipals(t *testing.T) {
	mk := func(who, r string) Entry {
		e, err := ParseEntry(who, r)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	acls := map[string]ACL{
		"/uva":      {mk("anyone", "rl")},
		"/uva/data": {mk("group:physics@tacc", "rlw"), mk("-bob@tacc", "w"), mk("carol@tacc", "rli")},
		"/uva/open": {mk("anyone@tacc", "rl")},
	}
	bob := Subject{User: "bob", Groups: []string{"physics"}, Domain: "tacc"}
	dan := Subject{User: "dan", Groups: []string{"physics"}, Domain: "tacc"}
	carol := Subject{User: "carol", Domain: "tacc"}
	mallory := Subject{User: "bob", Groups: []string{"physics"}, Domain: "evil"}
	home := Subject{User: "bob", Groups: []string{"physics"}}
	cases := []struct {
		s    Subject
		p    string
		want string
	}{
		{bob, "/uva", "none"},          // plain anyone is the home domain's only
		{bob, "/uva/data", "rl"},       // the negative entry wins over the group grant
		{dan, "/uva/data/x", "rlw"},    // the group grant
		{carol, "/uva/data", "rli"},    // named
		{mallory, "/uva/data", "none"}, // the same names in another domain
		{mallory, "/uva/open", "none"}, // anyone@tacc is tacc's only
		{carol, "/uva/open/f", "rl"},   // anyone@tacc
		{home, "/uva/data", "rl"},      // bob@tacc's entries do not name the home bob
	}
	for _, c := range cases {
		if got := Effective(acls, c.s, c.p).String(); got != c.want {
			t.Errorf("%+v at %s: %s, want %s", c.s, c.p, got, c.want)
		}
	}
	for _, bad := range []string{"bob@", "bob@Tacc", "@tacc", "group:anyone@tacc", "bob@tacc@x"} {
		if _, err := ParseEntry(bad, "r"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
