package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// CA is a domain's certificate authority.
type CA struct {
	domain string
	cert   *x509.Certificate
	der    []byte
	key    *ecdsa.PrivateKey
	pool   *x509.CertPool
}

// NewCA makes a new self-signed CA (ECDSA P-256, ten years) for domain.
func NewCA(domain string) (*CA, error) {
	if err := ValidName(domain); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "pando domain " + domain + " CA", Organization: []string{domain}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return newCA(domain, der, key)
}

func newCA(domain string, der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{domain: domain, cert: cert, der: der, key: key, pool: pool}, nil
}

// LoadCA loads a CA from PEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("the domain CA's certificate or key is not PEM")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the domain CA's key is damaged: %w", err)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the domain CA's certificate is damaged: %w", err)
	}
	if len(cert.Subject.Organization) != 1 {
		return nil, errors.New("the domain CA's certificate names no domain")
	}
	return newCA(cert.Subject.Organization[0], cb.Bytes, key)
}

// Domain is the CA's domain.
func (ca *CA) Domain() string { return ca.domain }

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// CertPEM is the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// KeyPEM is the CA key in PEM.
func (ca *CA) KeyPEM() ([]byte, error) {
	b, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b}), nil
}

// Backdate is how long before its issue a certificate is valid from, for
// clocks that run behind.
const Backdate = time.Hour

// Issue signs a certificate for id and pub; hosts (DNS names or IPs) become
// SANs for servers. It returns the PEM and the serial in hex.
func (ca *CA) Issue(id Identity, pub crypto.PublicKey, ttl time.Duration, hosts []string) ([]byte, string, error) {
	if id.Domain != ca.domain {
		return nil, "", fmt.Errorf("CA of %s cannot issue for domain %s", ca.domain, id.Domain)
	}
	u, err := url.Parse(id.URI())
	if err != nil {
		return nil, "", err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: id.String(), Organization: []string{id.Domain}},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:         []*url.URL{u},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, "", err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial.Text(16), nil
}

// IssueCSR checks a certificate request's signature and issues for its key.
func (ca *CA) IssueCSR(id Identity, csrPEM []byte, ttl time.Duration, hosts []string) ([]byte, string, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, "", errors.New("the certificate request is not PEM")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, "", fmt.Errorf("the certificate request is damaged: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, "", fmt.Errorf("the certificate request's signature is wrong: %w", err)
	}
	return ca.Issue(id, csr.PublicKey, ttl, hosts)
}

// NewKey makes an ECDSA P-256 key and its PEM.
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	b, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b}), nil
}

// NewCSR makes a certificate request for key.
func NewCSR(key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// PoolFromPEM makes a pool from PEM certificates.
func PoolFromPEM(caPEM []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in the PEM data")
	}
	return pool, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
