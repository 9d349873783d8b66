package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"

	"pando.dev/pando/internal/wire"
)

// Credentials the controller keeps (pando user passwd, pando user
// s3-key), asked for by a gateway given no password or key file. Answers
// are remembered for a minute at most (refusals for 5 s), so that a
// client's every request costs no round trip; a user revoked meanwhile
// gets no share tokens from the controller any more, through the gateway
// either.

const (
	credsTrusted = time.Minute
	credsRefused = 5 * time.Second
)

// ctlPasswords checks passwords with the controller.
type ctlPasswords struct {
	g    *Gateway
	once sync.Once
	key  [32]byte
	mu   sync.Mutex
	seen map[[32]byte]credAnswer
}

type credAnswer struct {
	ok           bool
	at           time.Time
	user, secret string
}

// fresh reports whether a remembered answer may still be given.
func (a credAnswer) fresh(now time.Time) bool {
	if a.ok {
		return now.Sub(a.at) < credsTrusted
	}
	return now.Sub(a.at) < credsRefused
}

func (p *ctlPasswords) Check(user, pw string) bool {
	p.once.Do(func() { _, _ = rand.Read(p.key[:]) })
	mac := hmac.New(sha256.New, p.key[:])
	mac.Write([]byte(user + "\x00" + pw))
	var sum [32]byte
	copy(sum[:], mac.Sum(nil))
	now := time.Now()
	p.mu.Lock()
	if a, ok := p.seen[sum]; ok && a.fresh(now) {
		p.mu.Unlock()
		return a.ok
	}
	p.mu.Unlock()
	cl, err := p.g.control()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = cl.Admin().PasswordCheck(ctx, user, pw)
	if err != nil && wire.CodeOf(err) != wire.CodeAccess {
		return false // the controller could not say: nothing remembered
	}
	p.mu.Lock()
	if p.seen == nil || len(p.seen) > 10000 {
		p.seen = make(map[[32]byte]credAnswer)
	}
	p.seen[sum] = credAnswer{ok: err == nil, at: now}
	p.mu.Unlock()
	return err == nil
}

// ctlS3Keys reads S3 keys from the controller (web.S3Keys).
type ctlS3Keys struct {
	g    *Gateway
	mu   sync.Mutex
	seen map[string]credAnswer
}

func (k *ctlS3Keys) Secret(access string) (string, string, bool) {
	now := time.Now()
	k.mu.Lock()
	if a, ok := k.seen[access]; ok && a.fresh(now) {
		k.mu.Unlock()
		return a.user, a.secret, a.ok
	}
	k.mu.Unlock()
	cl, err := k.g.control()
	if err != nil {
		return "", "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cl.Admin().S3KeyGet(ctx, access)
	switch wire.CodeOf(err) {
	case 0, wire.CodeNotExist, wire.CodeTokenRevoked, wire.CodeNotRegistered:
	default:
		return "", "", false // the controller could not say: nothing remembered
	}
	k.mu.Lock()
	if k.seen == nil || len(k.seen) > 10000 {
		k.seen = make(map[string]credAnswer)
	}
	k.seen[access] = credAnswer{ok: err == nil, at: now, user: r.User, secret: r.Secret}
	k.mu.Unlock()
	return r.User, r.Secret, err == nil
}
