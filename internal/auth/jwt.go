package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Bearer tokens in the WLCG token profile (JWTs): claims iss, sub, aud,
// exp, iat, nbf, jti, scope and wlcg.ver, signed with ES256 or EdDSA. The
// controller verifies them against the keys (a JWKS) of the issuers it
// trusts, and signs its own with the domain's JWT key.
//
// They are parsed and verified with go-jose (github.com/go-jose/go-jose/v4):
// one maintained library reads the issuers' key sets (JWKS), publishes
// the domain's own, and verifies and signs compact JWS, taking an
// allow-list of algorithms at parse time so that no token chooses its own.
// The decoder here bounds the size and refuses, before go-jose sees the
// token, any algorithm but ES256 and EdDSA (so none and the HMAC ones)
// and the headers that would name keys from elsewhere (jku, x5u, jwk,
// x5c) or extensions it must understand (crit).

// Limits on bearer tokens and key sets.
const (
	MaxJWTSize  = 8 << 10
	MaxJWKSSize = 64 << 10
	MaxJWTKeys  = 16
	// JWTVersion is the WLCG profile version pando's tokens carry.
	JWTVersion = "1.0"
)

// JWT errors, each refusing the token for one reason (errors.Is).
var (
	// ErrJWTInvalid: malformed, too large, an algorithm or header not
	// taken, or a claim missing.
	ErrJWTInvalid = errors.New("bearer token invalid")
	// ErrJWTForged: the signature does not verify with the issuer's key.
	ErrJWTForged = errors.New("bearer token signature does not verify")
	// ErrJWTExpired: past its exp, or before its nbf.
	ErrJWTExpired = errors.New("bearer token expired")
	// ErrJWTAudience: the token is for another audience.
	ErrJWTAudience = errors.New("bearer token audience does not match")
	// ErrJWTUnknownKey: the issuer has no key of the token's key id.
	ErrJWTUnknownKey = errors.New("bearer token key unknown")
)

var jwtAlgs = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA}

// JWTClaims are the claims of the WLCG profile.
type JWTClaims struct {
	Issuer    string           `json:"iss"`
	Subject   string           `json:"sub"`
	Audience  jwt.Audience     `json:"aud,omitempty"`
	Expiry    *jwt.NumericDate `json:"exp,omitempty"`
	IssuedAt  *jwt.NumericDate `json:"iat,omitempty"`
	NotBefore *jwt.NumericDate `json:"nbf,omitempty"`
	ID        string           `json:"jti,omitempty"`
	Scope     string           `json:"scope,omitempty"`
	Version   string           `json:"wlcg.ver,omitempty"`
}

// JWT is a parsed bearer token whose signature is not checked yet: its
// issuer and key id choose the keys that must verify it (Verify).
type JWT struct {
	tok    *jwt.JSONWebToken
	KeyID  string
	Claims JWTClaims // as the token says, until Verify checks them
	Scopes []Scope
}

// jwtHeader is what the decoder reads of a token's header.
type jwtHeader map[string]json.RawMessage

// ParseJWT decodes a compact JWT (not yet verified): size, algorithm and
// headers, and the claims the profile requires (iss, sub, exp and valid
// storage scopes).
func ParseJWT(s string) (*JWT, error) {
	s = strings.TrimSpace(s)
	if len(s) > MaxJWTSize {
		return nil, fmt.Errorf("%w: it has %d bytes, more than %d", ErrJWTInvalid, len(s), MaxJWTSize)
	}
	head, _, ok := strings.Cut(s, ".")
	if !ok || strings.Count(s, ".") != 2 {
		return nil, fmt.Errorf("%w: a JWT has three parts separated by dots", ErrJWTInvalid)
	}
	hb, err := base64.RawURLEncoding.DecodeString(head)
	var h jwtHeader
	if err == nil {
		err = json.Unmarshal(hb, &h)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: its header is no base64url JSON object", ErrJWTInvalid)
	}
	var alg string
	if json.Unmarshal(h["alg"], &alg) != nil || (alg != string(jose.ES256) && alg != string(jose.EdDSA)) {
		return nil, fmt.Errorf("%w: it is signed with algorithm %.20q; only ES256 and EdDSA are taken", ErrJWTInvalid, alg)
	}
	for _, bad := range []string{"jku", "x5u", "jwk", "x5c", "crit"} {
		if _, ok := h[bad]; ok {
			return nil, fmt.Errorf("%w: its header holds %q; keys are taken only from the issuer's key set the domain trusts", ErrJWTInvalid, bad)
		}
	}
	tok, err := jwt.ParseSigned(s, jwtAlgs)
	if err != nil || len(tok.Headers) != 1 {
		return nil, fmt.Errorf("%w: %v", ErrJWTInvalid, err)
	}
	t := &JWT{tok: tok, KeyID: tok.Headers[0].KeyID}
	if err := tok.UnsafeClaimsWithoutVerification(&t.Claims); err != nil {
		return nil, fmt.Errorf("%w: its claims are no JSON object of the WLCG profile", ErrJWTInvalid)
	}
	c := &t.Claims
	switch {
	case c.Issuer == "" || c.Subject == "":
		return nil, fmt.Errorf("%w: it names no issuer (iss) or subject (sub)", ErrJWTInvalid)
	case c.Expiry == nil:
		return nil, fmt.Errorf("%w: it has no expiry (exp)", ErrJWTInvalid)
	case len(c.Issuer) > 512 || len(c.Subject) > 256 || len(c.Audience) > 16:
		return nil, fmt.Errorf("%w: its issuer, subject or audience list is too long", ErrJWTInvalid)
	}
	if t.Scopes, err = ParseScopeClaim(c.Scope); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJWTInvalid, err)
	}
	return t, nil
}

// Verify checks the token's signature with the key of its key id in
// keys (the set of its issuer), and its lifetime at now. The claims
// are then those the issuer signed.
func (t *JWT) Verify(keys *jose.JSONWebKeySet, now time.Time) error {
	ks := keys.Key(t.KeyID)
	if t.KeyID == "" || len(ks) == 0 {
		return fmt.Errorf("%w: the token's key id %.80q is none of issuer %.200s's keys", ErrJWTUnknownKey, t.KeyID, t.Claims.Issuer)
	}
	var c JWTClaims
	if err := t.tok.Claims(ks[0].Key, &c); err != nil {
		return fmt.Errorf("%w: the token's signature does not verify with key %.80q of issuer %.200s", ErrJWTForged, t.KeyID, t.Claims.Issuer)
	}
	t.Claims = c // as signed (the same bytes parsed again)
	exp := c.Expiry.Time()
	switch {
	case !now.Before(exp.Add(clockSkew)):
		return fmt.Errorf("%w: the token expired at %s", ErrJWTExpired, exp.UTC().Format(time.RFC3339))
	case c.NotBefore != nil && now.Add(clockSkew).Before(c.NotBefore.Time()):
		return fmt.Errorf("%w: the token is not valid before %s", ErrJWTExpired, c.NotBefore.Time().UTC().Format(time.RFC3339))
	case c.IssuedAt != nil && now.Add(clockSkew).Before(c.IssuedAt.Time()):
		return fmt.Errorf("%w: the token was issued in the future (%s)", ErrJWTInvalid, c.IssuedAt.Time().UTC().Format(time.RFC3339))
	}
	return nil
}

// CheckAudience checks that want is among the token's audiences.
func (t *JWT) CheckAudience(want string) error {
	if t.Claims.Audience.Contains(want) {
		return nil
	}
	has := "none"
	if len(t.Claims.Audience) > 0 {
		has = fmt.Sprintf("%.200q", strings.Join(t.Claims.Audience, `", "`))
	}
	return fmt.Errorf("%w: the token's audience is %s, but this domain wants %q; ask its issuer for a token with audience %q", ErrJWTAudience, has, want, want)
}

// ParseJWKS reads an issuer's key set (RFC 7517 JSON): public ES256
// (P-256) and Ed25519 keys, each with a key id of its own.
func ParseJWKS(b []byte) (*jose.JSONWebKeySet, error) {
	if len(b) > MaxJWKSSize {
		return nil, fmt.Errorf("the key set has %d bytes, more than %d", len(b), MaxJWKSSize)
	}
	var ks jose.JSONWebKeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("the key set is no JWKS (a JSON object with \"keys\"): %w", err)
	}
	if len(ks.Keys) == 0 || len(ks.Keys) > MaxJWTKeys {
		return nil, fmt.Errorf("the key set holds %d keys; give 1 to %d", len(ks.Keys), MaxJWTKeys)
	}
	seen := map[string]bool{}
	for _, k := range ks.Keys {
		if k.KeyID == "" || seen[k.KeyID] {
			return nil, errors.New("each key of the key set needs a key id (kid) of its own")
		}
		seen[k.KeyID] = true
		switch pub := k.Key.(type) {
		case *ecdsa.PublicKey:
			if pub.Curve != elliptic.P256() {
				return nil, fmt.Errorf("key %q is on curve %s; only P-256 (ES256) and Ed25519 keys are taken", k.KeyID, pub.Curve.Params().Name)
			}
		case ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("key %q is no public P-256 (ES256) or Ed25519 key", k.KeyID)
		}
	}
	return &ks, nil
}

// NewJWTKey makes a domain's JWT signing key (ES256: P-256, which
// XRootD's and Pelican's verifiers take).
func NewJWTKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// JWTKeyID is the key id of a public key: its RFC 7638 thumbprint.
func JWTKeyID(pub crypto.PublicKey) (string, error) {
	tp, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// JWKSOf is the key set (JSON) that publishes key's public half.
func JWKSOf(key *ecdsa.PrivateKey) ([]byte, error) {
	kid, err := JWTKeyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &key.PublicKey, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"},
	}}, "", "  ")
}

// SignJWT signs c with key (ES256), naming the key by its id.
func SignJWT(key *ecdsa.PrivateKey, c *JWTClaims) (string, error) {
	kid, err := JWTKeyID(&key.PublicKey)
	if err != nil {
		return "", err
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		return "", err
	}
	return jwt.Signed(sig).Claims(c).Serialize()
}

// LooksLikeJWT reports whether a bearer credential is a JWT (three
// base64url parts) rather than a pando sign-in token.
func LooksLikeJWT(s string) bool {
	s = strings.TrimSpace(s)
	return strings.Count(s, ".") == 2 && !strings.HasPrefix(s, SignInPrefix)
}
