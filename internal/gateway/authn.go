package gateway

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/web"
)

// How a person proves who they are at a gateway, tried in this order:
//
//   - a TLS client certificate the domain's CA issued to a user (the
//     certificate of the user's own credential bundle);
//   - a sign-in token (pando token create) as "Authorization: Bearer
//     TOKEN", which the controller checks (signin.go), only over TLS or
//     on loopback with --insecure;
//   - a JWT of the WLCG profile (pando token create --scope, or an issuer
//     the domain trusts) as "Authorization: Bearer JWT", on the same
//     terms: the request is served with the token's scopes (bearer.go);
//   - HTTP Basic authentication with a user name and a password of the
//     gateway's password file (only over TLS, or on loopback with
//     --insecure), kept as PBKDF2-SHA256 hashes.
//
// A request with neither is answered 401.

// Passwords is a gateway's password file: lines "user:hash", read again
// when it changes (secretFile).
type Passwords struct {
	file *secretFile[map[string]string]
	mu   sync.Mutex
	// ok remembers passwords checked lately (by a keyed hash of user and
	// password), so that a client's every request costs no slow hash.
	ok  map[[32]byte]time.Time
	key [32]byte
}

// OpenPasswords reads the password file at path.
func OpenPasswords(path string) (*Passwords, error) {
	p := &Passwords{ok: make(map[[32]byte]time.Time), file: newSecretFile("the password file", path, func(b []byte) (map[string]string, error) {
		return parsePasswords(path, b)
	})}
	_, _ = rand.Read(p.key[:])
	if _, err := p.file.load(); err != nil {
		return nil, err
	}
	return p, nil
}

func parsePasswords(path string, b []byte) (map[string]string, error) {
	m := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, h, ok := strings.Cut(line, ":")
		if !ok || auth.ValidName(user) != nil {
			return nil, fmt.Errorf("the password file %s, line %d: expected user:hash (pando serve passwd writes them)", path, n)
		}
		m[user] = h
	}
	return m, nil
}

// Check reports whether pw is user's password.
func (p *Passwords) Check(user, pw string) bool {
	m, err := p.file.load()
	if err != nil {
		return false
	}
	h, ok := m[user]
	mac := hmac.New(sha256.New, p.key[:])
	mac.Write([]byte(user + "\x00" + h + "\x00" + pw))
	var sum [32]byte
	copy(sum[:], mac.Sum(nil))
	p.mu.Lock()
	at, seen := p.ok[sum]
	p.mu.Unlock()
	if ok && seen && time.Since(at) < time.Minute {
		return true
	}
	if !ok {
		// As slow as a known user, so that timing tells no names.
		auth.CheckPasswordHash(auth.NoPasswordHash, pw)
		return false
	}
	good := auth.CheckPasswordHash(h, pw) // auth bounds the hashes under way
	if !good {
		return false
	}
	p.mu.Lock()
	if len(p.ok) > 10000 {
		clear(p.ok)
	}
	p.ok[sum] = time.Now()
	p.mu.Unlock()
	return true
}

// SetPassword writes user's password into the file at path (made 0600
// if missing), replacing an earlier one.
func SetPassword(path, user, pw string) error {
	if err := auth.ValidName(user); err != nil {
		return fmt.Errorf("user name: %w", err)
	}
	if len(pw) < 8 {
		return errors.New("the password is shorter than 8 characters; choose a longer one")
	}
	h, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	var out []string
	if b, err := os.ReadFile(path); err == nil {
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if u, _, _ := strings.Cut(line, ":"); u != user && line != "" {
				out = append(out, line)
			}
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	out = append(out, user+":"+h)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Authenticator decides who made a request.
type Authenticator struct {
	g         *Gateway
	passwords interface{ Check(user, pw string) bool }
	// PlainOK allows Basic authentication without TLS (--insecure on
	// loopback).
	PlainOK bool
}

// NewAuthenticator accepts the domain's user certificates, sign-in
// tokens, and the passwords of the file passwords or, if nil, those the
// controller keeps (pando user passwd).
func (g *Gateway) NewAuthenticator(passwords *Passwords) *Authenticator {
	if passwords == nil {
		g.ctlPw.g = g
		return &Authenticator{g: g, passwords: &g.ctlPw}
	}
	passwords.file.tell(g.cfg.Log)
	return &Authenticator{g: g, passwords: passwords}
}

// User returns the name of the user who made r.
func (a *Authenticator) User(r *http.Request) (string, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		id, err := auth.IdentityFromCert(r.TLS.VerifiedChains[0][0])
		if err != nil {
			return "", fmt.Errorf("your certificate: %w", err)
		}
		if id.Domain != a.g.Domain() || id.Role != auth.RoleUser {
			return "", fmt.Errorf("the certificate of %s is no user's of domain %s", id, a.g.Domain())
		}
		return id.Name, nil
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		if auth.LooksLikeJWT(h[7:]) {
			if r.TLS == nil && !a.PlainOK {
				return "", errors.New("bearer tokens are taken only over TLS")
			}
			return a.g.checkBearer(r.Context(), h[7:])
		}
		if r.TLS == nil && !a.PlainOK {
			return "", errors.New("sign-in tokens are taken only over TLS")
		}
		return a.g.checkSignIn(r.Context(), h[7:])
	}
	user, pw, ok := r.BasicAuth()
	if !ok {
		return "", web.ErrNoCredentials
	}
	if r.TLS == nil && !a.PlainOK {
		return "", errors.New("passwords are taken only over TLS")
	}
	if !a.passwords.Check(user, pw) {
		return "", errors.New("wrong user name or password")
	}
	return user, nil
}
