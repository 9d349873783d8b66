package client

import (
	"context"
	"crypto/tls"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// renewCert renews the client's certificate at its controller once two
// thirds of its life are over, and again each time, so that an agent, a
// gateway or a long transfer never presents an expired one. A failed
// renewal is tried again every minute (more often near the end) until the
// certificate expires; the one held serves meanwhile. A linked domain's
// client presents its home client's and renews nothing.
//
// Only a client that presents a certificate of its own renews it: not a
// linked domain's client, nor a gateway's clients for its users (the
// gateway's own renews it, and they present it: Options.CertOf).
func (c *Client) renewCert() {
	for {
		leaf := c.cert.Load().Leaf
		if leaf == nil {
			return
		}
		life := leaf.NotAfter.Sub(leaf.NotBefore.Add(auth.Backdate)) // from its issue
		wait := time.Until(leaf.NotAfter.Add(-life / 3))
		select {
		case <-c.done:
			return
		case <-time.After(max(wait, 0)):
		}
		for {
			err := c.renewOnce()
			if err == nil {
				break
			}
			left := time.Until(leaf.NotAfter)
			if c.opts.Log != nil {
				c.opts.Log.Warn("cannot renew the certificate yet; the one held serves until it expires", "expires", leaf.NotAfter, "err", err)
			}
			select {
			case <-c.done:
				return
			case <-time.After(min(time.Minute, max(left/10, time.Second))):
			}
		}
	}
}

// renewOnce asks the controller for a certificate of a new key and
// presents it from the next handshake on.
func (c *Client) renewOnce() error {
	key, keyPEM, err := auth.NewKey()
	if err != nil {
		return err
	}
	csr, err := auth.NewCSR(key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var r wire.CertRenewResp
	if err := c.ControllerCall(ctx, wire.OpCertRenew, wire.CertRenewReq{CSR: csr}, &r); err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(r.Cert, keyPEM)
	if err != nil {
		return err
	}
	c.cert.Store(&cert)
	if c.opts.CertRenewed != nil {
		c.opts.CertRenewed(r.Cert, keyPEM)
	}
	return nil
}

// CertExpires is when the certificate the client presents expires.
func (c *Client) CertExpires() time.Time {
	if leaf := c.presented().Leaf; leaf != nil {
		return leaf.NotAfter
	}
	return time.Time{}
}
