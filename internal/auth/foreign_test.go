package auth

import (
	"crypto/x509"
	"testing"
)

// TestForeign: each CA is trusted for its own domain only; a CA of one
// domain cannot vouch for a holder that names another.
func TestForeign(t *testing.T) {
	uva, _ := NewCA("uva")
	tacc, _ := NewCA("tacc")
	rogue, _ := NewCA("evil")
	chain := func(c *CA, id Identity) []*x509.Certificate { return []*x509.Certificate{issued(t, c, id)} }
	f, err := NewForeign([][]byte{uva.CertPEM(), tacc.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Domains(); len(d) != 2 || d[0] != "tacc" || d[1] != "uva" {
		t.Errorf("domains %v", d)
	}
	data := Identity{Domain: "uva", Role: RoleShare, Name: "data"}
	if id, err := f.Verify(chain(uva, data)); err != nil || id != data {
		t.Errorf("uva's share: %v, %v", id, err)
	}
	// tacc's CA vouching for a share of uva: refused.
	tmpl := *tacc
	tmpl.domain = "uva" // what a hostile tacc could sign: a certificate naming uva
	if _, err := f.Verify(chain(&tmpl, data)); err == nil {
		t.Error("tacc's CA passed a share of uva")
	}
	if _, err := f.Verify(chain(rogue, Identity{Domain: "evil", Role: RoleShare, Name: "x"})); err == nil || err.Error() != "share:x@evil is of domain evil, which is not among the domains trusted here (tacc, uva)" {
		t.Errorf("a domain not trusted: %v", err)
	}
	if _, err := NewForeign([][]byte{uva.CertPEM(), uva.CertPEM()}); err == nil {
		t.Error("two CAs of one domain accepted")
	}
}
