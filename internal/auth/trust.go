package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Fingerprint is the SHA-256 of a certificate's DER, as `openssl x509
// -fingerprint -sha256` prints it: upper-case hex pairs joined by colons.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	var b strings.Builder
	for i, x := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", x)
	}
	return b.String()
}

// FingerprintPEM is Fingerprint of the first certificate in a PEM block.
func FingerprintPEM(certPEM []byte) (string, error) {
	c, err := ParseCertPEM(certPEM)
	if err != nil {
		return "", err
	}
	return Fingerprint(c), nil
}

// ParseCertPEM parses the first certificate of PEM data.
func ParseCertPEM(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no certificate in the PEM data")
	}
	return x509.ParseCertificate(b.Bytes)
}

// NormFingerprint reads a SHA-256 fingerprint as people paste it: with or
// without colons, any case, with or without openssl's "sha256
// Fingerprint=" in front. It returns 64 lower-case hex digits.
func NormFingerprint(s string) (string, error) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '='); i >= 0 {
		s = s[i+1:]
	}
	s = strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(s))
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("%q is not a SHA-256 fingerprint (64 hex digits, colons allowed, as `pando domain fingerprint` or `openssl x509 -fingerprint -sha256` print it)", s)
	}
	return s, nil
}

// SameFingerprint reports whether the certificate in certPEM has the
// fingerprint fp (in any form NormFingerprint reads).
func SameFingerprint(certPEM []byte, fp string) (bool, error) {
	want, err := NormFingerprint(fp)
	if err != nil {
		return false, err
	}
	have, err := FingerprintPEM(certPEM)
	if err != nil {
		return false, err
	}
	h, _ := NormFingerprint(have)
	return h == want, nil
}

// Trust is the CAs a server accepts certificates from: its home domain's,
// and one for each linked domain. A certificate is accepted only if it
// chains to the CA of the domain its identity names, so that a linked
// domain's CA cannot speak for the home domain or a third one. It is safe
// for concurrent use; Set replaces the linked domains at once.
type Trust struct {
	home     string
	homePool *x509.CertPool
	mu       sync.RWMutex
	linked   map[string]*x509.CertPool
	pems     map[string][]byte
}

// NewTrust trusts the home domain's CA.
func NewTrust(home string, pool *x509.CertPool) *Trust {
	return &Trust{home: home, homePool: pool, linked: map[string]*x509.CertPool{}}
}

// Home is the home domain's name.
func (t *Trust) Home() string { return t.home }

// Set makes the linked domains exactly those given (name -> CA PEM).
// A PEM that holds no certificate is an error, and nothing changes.
func (t *Trust) Set(linked map[string][]byte) error {
	m := make(map[string]*x509.CertPool, len(linked))
	for name, caPEM := range linked {
		if name == t.home {
			return fmt.Errorf("a domain cannot be linked with itself (%s)", name)
		}
		p, err := PoolFromPEM(caPEM)
		if err != nil {
			return fmt.Errorf("linked domain %s: %w", name, err)
		}
		m[name] = p
	}
	t.mu.Lock()
	t.linked, t.pems = m, linked
	t.mu.Unlock()
	return nil
}

// CAPEM returns the CA certificate (PEM) of the linked domain, nil if it
// is not linked.
func (t *Trust) CAPEM(domain string) []byte {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.pems[domain]
}

// Linked reports whether domain is linked now.
func (t *Trust) Linked(domain string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.linked[domain]
	return ok
}

// ErrNotLinked is returned (wrapped) by Verify for a certificate of a
// domain that is neither home nor linked.
var ErrNotLinked = errors.New("domain not linked")

// Verify checks a peer's certificate chain (leaf first) for the usage
// given, against the CA of the domain the leaf's identity names, and
// returns the identity.
func (t *Trust) Verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, errors.New("no certificate was presented")
	}
	id, err := IdentityFromCert(chain[0])
	if err != nil {
		return Identity{}, err
	}
	pool := t.homePool
	if id.Domain != t.home {
		t.mu.RLock()
		pool = t.linked[id.Domain]
		t.mu.RUnlock()
		if pool == nil {
			return id, fmt.Errorf("%w: %s is of domain %s, which domain %s has not linked (pando domain link)", ErrNotLinked, id, id.Domain, t.home)
		}
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			return id, fmt.Errorf("the certificate of %s expired at %s (or is not valid yet); long-running clients renew theirs, others get new credentials from an administrator: %w",
				id, chain[0].NotAfter.UTC().Format(time.RFC3339), err)
		}
		return id, fmt.Errorf("the certificate of %s was not issued by domain %s's CA: %w", id, id.Domain, err)
	}
	return id, nil
}
