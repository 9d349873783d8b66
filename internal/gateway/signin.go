package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// Sign-in tokens (pando token create) at a gateway: the controller says
// whose a token is, and the gateway remembers the answer for a minute at
// most (and never past the token's end), so that a client's every request
// costs no round trip. A user revoked meanwhile gets no share tokens from
// the controller any more, through the gateway either.

// signInCheck is how long a checked sign-in token is trusted without
// asking the controller again.
const signInCheck = time.Minute

type signIns struct {
	mu  sync.Mutex
	ok  map[[32]byte]signIn
	bad map[[32]byte]time.Time // refused lately: not asked again at once
}

type signIn struct {
	user  string
	until time.Time
}

// checkSignIn returns the user whose sign-in token (text form) tok is.
func (g *Gateway) checkSignIn(ctx context.Context, tok string) (string, error) {
	raw, err := auth.DecodeSignIn(tok)
	if err != nil {
		return "", err
	}
	return g.signIns.check(raw, signInCheck, "the sign-in token was refused; make a new one with pando token create", func() (string, time.Time, error) {
		cl, err := g.control()
		if err != nil {
			return "", time.Time{}, err
		}
		r, err := cl.Admin().TokenCheck(ctx, raw)
		if err != nil {
			return "", time.Time{}, fmt.Errorf("checking the sign-in token with the controller: %w", err)
		}
		return r.User, time.Unix(0, r.Expires), nil
	})
}

// check returns whom the credential raw names: as remembered, or as ask
// (the controller) says, remembered then for keep at most and never past
// the end ask gives. A refusal is remembered for 5 s, said again
// as refused.
func (s *signIns) check(raw []byte, keep time.Duration, refused string, ask func() (string, time.Time, error)) (string, error) {
	sum := sha256.Sum256(raw)
	now := time.Now()
	s.mu.Lock()
	if e, ok := s.ok[sum]; ok && now.Before(e.until) {
		s.mu.Unlock()
		return e.user, nil
	}
	if at, ok := s.bad[sum]; ok && now.Sub(at) < 5*time.Second {
		s.mu.Unlock()
		return "", errors.New(refused)
	}
	s.mu.Unlock()
	who, end, err := ask()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ok) > 10000 || len(s.bad) > 10000 {
		clear(s.ok)
		clear(s.bad)
	}
	if s.ok == nil {
		s.ok, s.bad = make(map[[32]byte]signIn), make(map[[32]byte]time.Time)
	}
	if err != nil {
		switch wire.CodeOf(err) {
		case wire.CodeTokenInvalid, wire.CodeTokenExpired, wire.CodeTokenRevoked, wire.CodeNotRegistered:
			s.bad[sum] = now
			var we *wire.Error
			if errors.As(err, &we) {
				return "", errors.New(we.Message)
			}
		}
		return "", err
	}
	until := now.Add(keep)
	if end.Before(until) {
		until = end
	}
	s.ok[sum] = signIn{user: who, until: until}
	return who, nil
}

// control is the gateway's own client, to ask the controller about
// credentials (made at first use).
func (g *Gateway) control() (*client.Client, error) {
	g.ctlMu.Lock()
	defer g.ctlMu.Unlock()
	if g.ctl == nil {
		cl, err := client.New(g.cfg.Client, client.Options{Log: g.cfg.Log, RenewCert: true})
		if err != nil {
			return nil, fmt.Errorf("the gateway cannot reach its controller: %w", err)
		}
		g.ctl = cl
	}
	return g.ctl, nil
}

// closeControl ends the gateway's own client.
func (g *Gateway) closeControl() {
	g.ctlMu.Lock()
	cl := g.ctl
	g.ctl = nil
	g.ctlMu.Unlock()
	if cl != nil {
		cl.Close()
	}
}
