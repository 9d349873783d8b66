package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ServerConfig requires TLS 1.3 and a client certificate chaining to pool.
func ServerConfig(cert tls.Certificate, pool *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
}

// ServerConfigTrust is ServerConfig for a server that also accepts linked
// domains' principals: a client certificate is checked, at the handshake,
// against the CA of the domain it names (Trust.Verify), as trust has them
// at that moment.
func ServerConfigTrust(cert tls.Certificate, trust *Trust) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := trust.Verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
}

// ClientConfig verifies the server's chain against pool and then its
// identity with expect (if not nil). Host names are not checked: shares are
// dialled through NAT and proxies under addresses not in their certificate.
func ClientConfig(cert tls.Certificate, pool *x509.CertPool, expect func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}); err != nil {
				return err
			}
			id, err := IdentityFromCert(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			if expect != nil {
				return expect(id)
			}
			return nil
		},
	}
}

// PeerIdentity returns the identity of the verified peer.
func PeerIdentity(cs tls.ConnectionState) (Identity, *x509.Certificate, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, nil, errors.New("the peer presented no certificate")
	}
	c := cs.PeerCertificates[0]
	id, err := IdentityFromCert(c)
	return id, c, err
}

// ExplainHandshakeError turns a failed TLS handshake with addr into one
// sentence a user can act on; it returns err unchanged otherwise.
func ExplainHandshakeError(err error, addr string) error {
	if err == nil {
		return nil
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("the server at %s presents a certificate from another domain's CA; check the controller address and your credentials: %w", addr, err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("the certificate of the server at %s has expired (%s): %w", addr, time.Now().UTC().Format(time.RFC3339), err)
	case strings.Contains(msg, "unknown certificate authority"), strings.Contains(msg, "bad certificate"),
		strings.Contains(msg, "certificate required"), strings.Contains(msg, "unexpected EOF"), strings.Contains(msg, "connection reset"):
		return fmt.Errorf("the server at %s refused your certificate: it was issued by another domain's CA, or has expired or been revoked: %w", addr, err)
	case strings.Contains(msg, "expected") && strings.Contains(msg, "but the server is"):
		return fmt.Errorf("the server at %s is not who it should be: %w", addr, err)
	}
	return fmt.Errorf("secure connection to %s failed: %w", addr, err)
}
