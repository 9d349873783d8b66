package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Store keys.
const (
	keyDomain   = "domain"
	keyCACert   = "ca/cert"
	keyCAKey    = "ca/key"
	keyTokenKey = "token/key"
	keyJWTKey   = "jwt/key"
	pfxIssuer   = "issuer/"
	pfxUser     = "user/"
	pfxShare    = "share/"
	pfxMount    = "mount/"
	pfxACL      = "acl/"
	pfxRevoked  = "revoked/"
	keyRevAll   = "revoked-all"
)

// AdminGroup is the group whose members administer the whole domain.
const AdminGroup = "admins"

type userRec struct {
	Name    string   `cbor:"1,keyasint"`
	Groups  []string `cbor:"2,keyasint,omitempty"`
	Created int64    `cbor:"3,keyasint"`
	Revoked int64    `cbor:"4,keyasint,omitempty"`
	Serials []string `cbor:"5,keyasint,omitempty"`
	// Gateway: the name is a gateway's, whose certificates carry the
	// gateway role; it has no rights of its own.
	Gateway bool `cbor:"6,keyasint,omitempty"`
	// Password is the user's gateway password, as auth.HashPassword
	// stores it ("": none).
	Password string `cbor:"7,keyasint,omitempty"`
	// Since is when the user was last added again after a revocation
	// (unix ns; 0: never): credentials the controller keeps or signed
	// for the user before then (sign-in tokens, S3 keys) are void.
	Since int64 `cbor:"8,keyasint,omitempty"`
}

// validFrom is when the user's present life began: credentials made
// before it are void.
func (u *userRec) validFrom() int64 { return max(u.Created, u.Since) }

type shareRec struct {
	Name       string   `cbor:"1,keyasint"`
	Addrs      []string `cbor:"2,keyasint"`
	Registered int64    `cbor:"3,keyasint"`
	LastSeen   int64    `cbor:"4,keyasint"`
	Serials    []string `cbor:"5,keyasint,omitempty"`
}

func get[T any](ctx context.Context, st store.Store, key string) (*T, error) {
	b, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	var v T
	if err := wire.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("state record %s is damaged: %w", key, err)
	}
	return &v, nil
}

func put(ctx context.Context, st store.Store, key string, v any) error {
	b, err := wire.Marshal(v)
	if err != nil {
		return err
	}
	return st.Put(ctx, key, b)
}

// keys holds the domain's secrets, loaded at start.
type keys struct {
	domain   string
	ca       *auth.CA
	tokenPub ed25519.PublicKey
	tokenKey ed25519.PrivateKey
	// jwtKey signs the domain's own bearer tokens (JWTs, ES256).
	jwtKey *ecdsa.PrivateKey
}

// initDomain creates the domain on first start, or loads it. It returns
// whether the domain was created now.
func initDomain(ctx context.Context, st store.Store, domain string) (*keys, bool, error) {
	b, err := st.Get(ctx, keyDomain)
	if err == nil {
		have := string(b)
		if domain != "" && domain != have {
			return nil, false, fmt.Errorf("this state directory holds domain %q, not %q; use another --state directory or drop --domain", have, domain)
		}
		k, err := loadKeys(ctx, st, have)
		return k, false, err
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, false, err
	}
	if domain == "" {
		return nil, false, errors.New("a new domain needs a name: pass --domain NAME")
	}
	if err := auth.ValidName(domain); err != nil {
		return nil, false, fmt.Errorf("domain name: %w", err)
	}
	// Controllers started at once on one empty store: one creates the
	// domain (its CA and keys), the others wait for it and load it.
	if won, err := claimCreation(ctx, st); err != nil {
		return nil, false, err
	} else if !won {
		return awaitDomain(ctx, st, domain)
	}
	ca, err := auth.NewCA(domain)
	if err != nil {
		return nil, false, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, false, err
	}
	pub, priv, err := auth.NewTokenKey()
	if err != nil {
		return nil, false, err
	}
	jk, err := auth.NewJWTKey()
	if err != nil {
		return nil, false, err
	}
	jkDER, err := x509.MarshalPKCS8PrivateKey(jk)
	if err != nil {
		return nil, false, err
	}
	now := time.Now().UnixNano()
	steps := []struct {
		key string
		val any
	}{
		{keyCACert, ca.CertPEM()},
		{keyCAKey, caKey},
		{keyTokenKey, []byte(priv)},
		{keyJWTKey, jkDER},
		{pfxUser + "admin", userRec{Name: "admin", Groups: []string{AdminGroup}, Created: now}},
		{pfxACL + "/", []wire.ACLEntry{{Who: "group:" + AdminGroup, Rights: auth.All.String()}}},
		{pfxACL + "/" + domain, []wire.ACLEntry{{Who: "anyone", Rights: auth.List.String()}}},
	}
	for _, s := range steps {
		var err error
		if raw, ok := s.val.([]byte); ok {
			err = st.Put(ctx, s.key, raw)
		} else {
			err = put(ctx, st, s.key, s.val)
		}
		if err != nil {
			return nil, false, err
		}
	}
	// The domain name goes last: a start interrupted above starts over.
	if err := st.Put(ctx, keyDomain, []byte(domain)); err != nil {
		return nil, false, err
	}
	_ = st.Delete(ctx, keyCreating)
	return &keys{domain: domain, ca: ca, tokenPub: pub, tokenKey: priv, jwtKey: jk}, true, nil
}

// keyCreating marks a domain being created (the creator's start time).
const keyCreating = "domain-creating"

// claimCreation takes the right to create the domain; a claim older than
// a minute (its creator died) is taken over.
func claimCreation(ctx context.Context, st store.Store) (bool, error) {
	now := []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
	err := st.CompareAndSwap(ctx, keyCreating, nil, now)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, store.ErrConflict) {
		return false, err
	}
	old, err := st.Get(ctx, keyCreating)
	if err != nil {
		return false, nil
	}
	if t, perr := strconv.ParseInt(string(old), 10, 64); perr == nil && time.Since(time.Unix(0, t)) > time.Minute {
		return st.CompareAndSwap(ctx, keyCreating, old, now) == nil, nil
	}
	return false, nil
}

// awaitDomain waits (up to a minute) for another controller to finish
// creating the domain, and loads it.
func awaitDomain(ctx context.Context, st store.Store, domain string) (*keys, bool, error) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		b, err := st.Get(ctx, keyDomain)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if string(b) != domain {
			return nil, false, fmt.Errorf("the store holds domain %q, not %q; drop --domain or use another store", b, domain)
		}
		k, err := loadKeys(ctx, st, domain)
		return k, false, err
	}
	return nil, false, errors.New("another controller began creating the domain in this store a minute ago and has not finished; start again")
}

func loadKeys(ctx context.Context, st store.Store, domain string) (*keys, error) {
	cert, err := st.Get(ctx, keyCACert)
	if err != nil {
		return nil, fmt.Errorf("loading the domain CA: %w", err)
	}
	key, err := st.Get(ctx, keyCAKey)
	if err != nil {
		return nil, fmt.Errorf("loading the domain CA: %w", err)
	}
	ca, err := auth.LoadCA(cert, key)
	if err != nil {
		return nil, err
	}
	tk, err := st.Get(ctx, keyTokenKey)
	if err != nil {
		return nil, fmt.Errorf("loading the token key: %w", err)
	}
	if len(tk) != ed25519.PrivateKeySize {
		return nil, errors.New("the token key in the state directory is damaged")
	}
	priv := ed25519.PrivateKey(tk)
	jk, err := loadJWTKey(ctx, st)
	if err != nil {
		return nil, err
	}
	return &keys{domain: domain, ca: ca, tokenKey: priv, tokenPub: priv.Public().(ed25519.PublicKey), jwtKey: jk}, nil
}

// makeJWTKey stores a new JWT key unless another controller stored one.
func makeJWTKey(ctx context.Context, st store.Store) error {
	k, err := auth.NewJWTKey()
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	if err := st.CompareAndSwap(ctx, keyJWTKey, nil, der); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("storing the JWT key: %w", err)
	}
	return nil
}

// loadJWTKey loads the domain's JWT signing key, made now for a domain
// created before there was one (the first controller to start makes it;
// the others load that one).
func loadJWTKey(ctx context.Context, st store.Store) (*ecdsa.PrivateKey, error) {
	b, err := st.Get(ctx, keyJWTKey)
	if errors.Is(err, store.ErrNotFound) {
		if err := makeJWTKey(ctx, st); err != nil {
			return nil, err
		}
		b, err = st.Get(ctx, keyJWTKey)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the JWT key: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(b)
	ek, ok := k.(*ecdsa.PrivateKey)
	if err != nil || !ok {
		return nil, errors.New("the JWT key in the state directory is damaged")
	}
	return ek, nil
}

// loadACLs returns every ACL by prefix.
func loadACLs(ctx context.Context, st store.Store) (map[string]auth.ACL, error) {
	kvs, err := st.List(ctx, pfxACL)
	if err != nil {
		return nil, err
	}
	return parseACLs(kvs)
}

// parseACLs decodes the ACL records kvs (keys with pfxACL).
func parseACLs(kvs []store.KV) (map[string]auth.ACL, error) {
	m := make(map[string]auth.ACL, len(kvs))
	for _, kv := range kvs {
		var es []wire.ACLEntry
		if err := wire.Unmarshal(kv.Value, &es); err != nil {
			return nil, fmt.Errorf("ACL record %s is damaged: %w", kv.Key, err)
		}
		acl, err := toACL(es)
		if err != nil {
			return nil, err
		}
		m[strings.TrimPrefix(kv.Key, pfxACL)] = acl
	}
	return m, nil
}

func toACL(es []wire.ACLEntry) (auth.ACL, error) {
	acl := make(auth.ACL, 0, len(es))
	for _, e := range es {
		who := e.Who
		if e.Negative {
			who = "-" + who
		}
		ent, err := auth.ParseEntry(who, e.Rights)
		if err != nil {
			return nil, err
		}
		acl = append(acl, ent)
	}
	return acl, nil
}

// loadMounts returns the mount table sorted by prefix.
func loadMounts(ctx context.Context, st store.Store) ([]wire.MountEntry, error) {
	kvs, err := st.List(ctx, pfxMount)
	if err != nil {
		return nil, err
	}
	return parseMounts(kvs)
}

// parseMounts decodes the mount records kvs, sorted by prefix.
func parseMounts(kvs []store.KV) ([]wire.MountEntry, error) {
	out := make([]wire.MountEntry, 0, len(kvs))
	for _, kv := range kvs {
		var m wire.MountEntry
		if err := wire.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("mount record %s is damaged: %w", kv.Key, err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b wire.MountEntry) int { return strings.Compare(a.Prefix, b.Prefix) })
	return out, nil
}
