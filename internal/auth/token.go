package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// Grant gives rights at a share-relative path ("" is the share root) and
// below it, until a longer grant says otherwise.
type Grant struct {
	Path   string `cbor:"1,keyasint"`
	Rights Rights `cbor:"2,keyasint"`
}

// Token is a capability the controller signs for one principal and one
// mount: rights inside one share, below Root, until Expires.
type Token struct {
	ID        string    `cbor:"1,keyasint"`
	Principal string    `cbor:"2,keyasint"`
	Share     string    `cbor:"3,keyasint"`
	Root      string    `cbor:"4,keyasint"`
	Grants    []Grant   `cbor:"5,keyasint"`
	Issued    time.Time `cbor:"6,keyasint"`
	Expires   time.Time `cbor:"7,keyasint"`
	// Proxy, if set, is the identity of a share that may present the
	// token on the principal's behalf (a third-party transfer's source
	// pushing to this token's share).
	Proxy string `cbor:"8,keyasint,omitempty"`
	// SignIn marks a person's sign-in token for gateways (pando token
	// create): it names the principal and nothing else, and no share
	// takes it.
	SignIn bool `cbor:"9,keyasint,omitempty"`
	// Groups are the principal's groups as its home domain names them
	// (plain names for this domain's users; "physics@tacc" for a
	// linked domain's), for shares that map owners by group.
	Groups []string `cbor:"10,keyasint,omitempty"`
	// Assert marks a group assertion: a domain's signed word, for the
	// linked domain named in Audience, on who the principal is and its
	// groups. It grants nothing, and no share takes it.
	Assert   bool   `cbor:"11,keyasint,omitempty"`
	Audience string `cbor:"12,keyasint,omitempty"`
	// Scopes are the storage scopes (global paths, space-separated) of
	// the bearer token (JWT) the controller made this token from: its
	// rights are within them. Shares name them when they refuse.
	Scopes string `cbor:"13,keyasint,omitempty"`
}

// Token errors.
var (
	// ErrTokenExpired: the token's lifetime is over (or it is not valid yet).
	ErrTokenExpired = errors.New("token expired")
	// ErrTokenInvalid: malformed, too large, or not signed by the domain.
	ErrTokenInvalid = errors.New("token invalid")
)

// Limits on tokens.
const (
	MaxTokenSize = 64 << 10
	MaxGrants    = 1024
	clockSkew    = 5 * time.Second
)

// Covers reports whether rel is inside the token's root.
func (t *Token) Covers(rel string) bool { return IsUnder(rel, t.Root) }

// RightsAt returns the rights the token grants at rel: those of the grant
// with the longest prefix of rel, none outside the root.
func (t *Token) RightsAt(rel string) Rights {
	if !t.Covers(rel) {
		return 0
	}
	best := -1
	var r Rights
	for _, g := range t.Grants {
		if IsUnder(rel, g.Path) && len(g.Path) > best {
			best, r = len(g.Path), g.Rights
		}
	}
	return r
}

type signed struct {
	Body []byte `cbor:"1,keyasint"`
	Sig  []byte `cbor:"2,keyasint"`
}

var (
	tokenEnc, _ = cbor.EncOptions{Sort: cbor.SortCoreDeterministic, Time: cbor.TimeRFC3339Nano}.EncMode()
	tokenDec, _ = cbor.DecOptions{
		MaxNestedLevels: 8, MaxArrayElements: MaxGrants, MaxMapPairs: 64,
		IndefLength: cbor.IndefLengthForbidden, DupMapKey: cbor.DupMapKeyEnforcedAPF,
	}.DecMode()
)

// NewTokenKey makes a token signing key pair.
func NewTokenKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// SignToken encodes and signs t.
func SignToken(key ed25519.PrivateKey, t *Token) ([]byte, error) {
	if len(t.Grants) > MaxGrants {
		return nil, fmt.Errorf("token with %d grants exceeds %d", len(t.Grants), MaxGrants)
	}
	body, err := tokenEnc.Marshal(t)
	if err != nil {
		return nil, err
	}
	out, err := tokenEnc.Marshal(signed{Body: body, Sig: ed25519.Sign(key, body)})
	if err != nil {
		return nil, err
	}
	if len(out) > MaxTokenSize {
		return nil, fmt.Errorf("token of %d bytes exceeds %d", len(out), MaxTokenSize)
	}
	return out, nil
}

// VerifyToken checks a token's signature and lifetime at now.
func VerifyToken(pub ed25519.PublicKey, b []byte, now time.Time) (*Token, error) {
	if len(b) > MaxTokenSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrTokenInvalid, len(b))
	}
	var s signed
	if err := tokenDec.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenInvalid, err)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, s.Body, s.Sig) {
		return nil, fmt.Errorf("%w: not signed by this domain's controller", ErrTokenInvalid)
	}
	var t Token
	if err := tokenDec.Unmarshal(s.Body, &t); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenInvalid, err)
	}
	if !now.Before(t.Expires) {
		return nil, fmt.Errorf("%w at %s", ErrTokenExpired, t.Expires.UTC().Format(time.RFC3339))
	}
	if t.Issued.After(now.Add(clockSkew)) {
		return nil, fmt.Errorf("%w: issued in the future (%s); check the clocks of controller and share", ErrTokenExpired, t.Issued.UTC().Format(time.RFC3339))
	}
	if _, err := CleanRel(t.Root); err != nil {
		return nil, fmt.Errorf("%w: root: %v", ErrTokenInvalid, err)
	}
	return &t, nil
}

// SignInPrefix starts the text form of a sign-in token.
const SignInPrefix = "pando-signin."

// EncodeSignIn is the text form of a signed sign-in token, for an HTTP
// Authorization header ("Bearer " and this).
func EncodeSignIn(signed []byte) string {
	return SignInPrefix + base64.RawURLEncoding.EncodeToString(signed)
}

// DecodeSignIn reads the text form of a sign-in token (not checked: the
// controller checks it).
func DecodeSignIn(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), SignInPrefix)
	if !ok || len(rest) > MaxTokenSize*4/3+4 {
		return nil, fmt.Errorf("%w: not a sign-in token (pando token create makes one)", ErrTokenInvalid)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: not a sign-in token (pando token create makes one)", ErrTokenInvalid)
	}
	return b, nil
}
