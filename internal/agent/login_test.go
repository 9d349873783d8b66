package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/config"
)

// TestCheckCredential: a login's credential is refused, with one sentence
// saying why, unless it is a user's of this domain, in date, with its key.
func TestCheckCredential(t *testing.T) {
	ca, err := auth.NewCA("uva")
	if err != nil {
		t.Fatal(err)
	}
	other, err := auth.NewCA("uva") // another CA that calls itself uva
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *auth.CA, id auth.Identity, ttl time.Duration) (string, string) {
		key, keyPEM, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		cert, _, err := ca.Issue(id, key.Public(), ttl, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(cert), string(keyPEM)
	}
	a := &Agent{cfg: Config{Client: &config.Config{Domain: "uva", CA: string(ca.CertPEM())}}}
	a.logins.pool = ca.Pool()

	alice, aliceKey := issue(ca, auth.Identity{Domain: "uva", Role: auth.RoleUser, Name: "alice"}, time.Hour)
	_, bobKey := issue(ca, auth.Identity{Domain: "uva", Role: auth.RoleUser, Name: "bob"}, time.Hour)
	old, oldKey := issue(ca, auth.Identity{Domain: "uva", Role: auth.RoleUser, Name: "alice"}, -time.Minute)
	forged, forgedKey := issue(other, auth.Identity{Domain: "uva", Role: auth.RoleUser, Name: "alice"}, time.Hour)
	gw, gwKey := issue(ca, auth.Identity{Domain: "uva", Role: auth.RoleGateway, Name: "web"}, time.Hour)

	if id, err := a.checkCredential(LoginRequest{Cert: alice, Key: aliceKey}); err != nil || id.String() != "alice@uva" {
		t.Fatalf("alice's own credential: %v, %v", id, err)
	}
	for _, c := range []struct {
		what, cert, key, want string
	}{
		{"alice's certificate with bob's key", alice, bobKey, "private key sent is not the certificate's"},
		{"an expired certificate", old, oldKey, "expired"},
		{"another CA's certificate", forged, forgedKey, "not one of domain uva"},
		{"a gateway's certificate", gw, gwKey, "not a user's"},
		{"no certificate", "", aliceKey, "no certificate"},
		{"a damaged certificate", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", aliceKey, "damaged"},
		{"a key for a certificate", alice, alice, "private key"},
	} {
		_, err := a.checkCredential(LoginRequest{Cert: c.cert, Key: c.key})
		if err == nil || !errors.Is(err, ErrLogin) || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%s: %v, want an error saying %q", c.what, err, c.want)
		}
	}
}
