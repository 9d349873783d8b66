package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Foreign trusts the CAs of several domains, each for its own domain only,
// and has no home domain: what a relay trusts. A certificate is accepted
// only if it chains to the CA of the domain its identity names, so that
// one domain's CA cannot pass its holders off as another's.
type Foreign struct {
	t       *Trust
	domains []string
}

// NewForeign trusts each CA certificate given (PEM) for the domain it was
// made for: a pando CA names its domain as its subject's organization.
func NewForeign(caPEMs [][]byte) (*Foreign, error) {
	cas := map[string][]byte{}
	for _, pem := range caPEMs {
		c, err := ParseCertPEM(pem)
		if err != nil {
			return nil, err
		}
		if !c.IsCA || len(c.Subject.Organization) != 1 || ValidName(c.Subject.Organization[0]) != nil {
			return nil, fmt.Errorf("%q is not a pando domain's CA certificate (it names no domain)", c.Subject.CommonName)
		}
		d := c.Subject.Organization[0]
		if _, dup := cas[d]; dup {
			return nil, fmt.Errorf("two CA certificates for domain %s: give one", d)
		}
		cas[d] = pem
	}
	t := NewTrust("", nil)
	if err := t.Set(cas); err != nil {
		return nil, err
	}
	f := &Foreign{t: t}
	for d := range cas {
		f.domains = append(f.domains, d)
	}
	slices.Sort(f.domains)
	return f, nil
}

// Domains lists the domains trusted, in order.
func (f *Foreign) Domains() []string { return f.domains }

// Verify checks a client certificate chain (leaf first) against the CA of
// the domain its leaf names and returns its identity.
func (f *Foreign) Verify(chain []*x509.Certificate) (Identity, error) {
	id, err := f.t.Verify(chain, x509.ExtKeyUsageClientAuth)
	if errors.Is(err, ErrNotLinked) {
		return id, fmt.Errorf("%s is of domain %s, which is not among the domains trusted here (%s)", id, id.Domain, strings.Join(f.domains, ", "))
	}
	return id, err
}
