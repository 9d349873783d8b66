package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// jwtFixedKey is a fixed P-256 key, so that fuzz seeds verify the same
// way on every run.
func jwtFixedKey(seed int64) *ecdsa.PrivateKey {
	c := elliptic.P256()
	d := new(big.Int).SetInt64(seed*7919 + 12345)
	x, y := c.ScalarBaseMult(d.Bytes())
	return &ecdsa.PrivateKey{PublicKey: ecdsa.PublicKey{Curve: c, X: x, Y: y}, D: d}
}

func jwtClaims(now time.Time) *JWTClaims {
	return &JWTClaims{
		Issuer: "https://issuer.example", Subject: "alice", Audience: jwt.Audience{"tacc"},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now), ID: "j1", Scope: "storage.read:/data openid", Version: JWTVersion,
	}
}

func mustSign(tb testing.TB, key *ecdsa.PrivateKey, c *JWTClaims) string {
	tb.Helper()
	s, err := SignJWT(key, c)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func mustKeys(tb testing.TB, key *ecdsa.PrivateKey) *jose.JSONWebKeySet {
	tb.Helper()
	b, err := JWKSOf(key)
	if err != nil {
		tb.Fatal(err)
	}
	ks, err := ParseJWKS(b)
	if err != nil {
		tb.Fatal(err)
	}
	return ks
}

// rawJWT builds a token with any header, signed or not, to show what the
// decoder refuses before any key is tried.
func rawJWT(header, claims string) string {
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(header)) + "." + e([]byte(claims)) + "." + e([]byte("sig"))
}

func TestJWT(t *testing.T) {
	now := time.Now()
	key, other := jwtFixedKey(1), jwtFixedKey(2)
	keys := mustKeys(t, key)
	check := func(tok string) error {
		j, err := ParseJWT(tok)
		if err != nil {
			return err
		}
		if err := j.Verify(keys, now); err != nil {
			return err
		}
		return j.CheckAudience("tacc")
	}
	good := mustSign(t, key, jwtClaims(now))
	if err := check(good); err != nil {
		t.Fatalf("a good token was refused: %v", err)
	}
	j, _ := ParseJWT(good)
	if len(j.Scopes) != 1 || j.Scopes[0] != (Scope{ScopeRead, "/data"}) {
		t.Fatalf("scopes %v, want storage.read:/data alone", j.Scopes)
	}
	// A token whose payload was swapped for another, keeping the
	// signature: forged.
	parts := strings.Split(good, ".")
	evil := *jwtClaims(now)
	evil.Scope = "storage.modify:/"
	parts[1] = strings.Split(mustSign(t, key, &evil), ".")[1]
	swapped := strings.Join(parts, ".")

	withKid := func(c *JWTClaims, k *ecdsa.PrivateKey, kid string) string {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k},
			(&jose.SignerOptions{}).WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		s, err := jwt.Signed(sig).Claims(c).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	kid, _ := JWTKeyID(&key.PublicKey)
	claims := func(f func(*JWTClaims)) *JWTClaims { c := jwtClaims(now); f(c); return c }
	body := `{"iss":"i","sub":"s","exp":9999999999}`
	for _, c := range []struct {
		name string
		tok  string
		want error
		says string
	}{
		{"forged", withKid(jwtClaims(now), other, kid), ErrJWTForged, "does not verify"},
		{"swapped-payload", swapped, ErrJWTForged, "does not verify"},
		{"expired", mustSign(t, key, claims(func(c *JWTClaims) { c.Expiry = jwt.NewNumericDate(now.Add(-time.Minute)) })), ErrJWTExpired, "expired at"},
		{"not-yet", mustSign(t, key, claims(func(c *JWTClaims) { c.NotBefore = jwt.NewNumericDate(now.Add(time.Hour)) })), ErrJWTExpired, "not valid before"},
		{"wrong-audience", mustSign(t, key, claims(func(c *JWTClaims) { c.Audience = jwt.Audience{"uva"} })), ErrJWTAudience, `audience is "uva", but this domain wants "tacc"`},
		{"no-audience", mustSign(t, key, claims(func(c *JWTClaims) { c.Audience = nil })), ErrJWTAudience, `audience is none`},
		{"unknown-key", withKid(jwtClaims(now), other, "k2"), ErrJWTUnknownKey, `key id "k2"`},
		{"no-exp", mustSign(t, key, claims(func(c *JWTClaims) { c.Expiry = nil })), ErrJWTInvalid, "no expiry"},
		{"no-path", mustSign(t, key, claims(func(c *JWTClaims) { c.Scope = "storage.read" })), ErrJWTInvalid, "has no path"},
		{"alg-none", rawJWT(`{"alg":"none"}`, body), ErrJWTInvalid, `algorithm "none"`},
		{"alg-hs256", rawJWT(`{"alg":"HS256","kid":"`+kid+`"}`, body), ErrJWTInvalid, `algorithm "HS256"`},
		{"jku", rawJWT(`{"alg":"ES256","jku":"https://evil/jwks"}`, body), ErrJWTInvalid, `"jku"`},
		{"x5u", rawJWT(`{"alg":"ES256","x5u":"https://evil/cert"}`, body), ErrJWTInvalid, `"x5u"`},
		{"jwk", rawJWT(`{"alg":"ES256","jwk":{}}`, body), ErrJWTInvalid, `"jwk"`},
		{"too-big", good + strings.Repeat("A", MaxJWTSize), ErrJWTInvalid, "more than"},
		{"two-parts", "a.b", ErrJWTInvalid, "three parts"},
	} {
		err := check(c.tok)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}

func TestScopes(t *testing.T) {
	ss, err := ParseScopeClaim("openid storage.read:/uva/data storage.create:/uva/data/in offline_access")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]Rights{
		"/uva/data": Read | List, "/uva/data/x": Read | List, "/uva/data/in/f": Read | List | Insert,
		"/uva/database": 0, "/uva": 0,
	} {
		if got := ScopeRights(ss, p); got != want {
			t.Errorf("rights at %s: %s, want %s", p, got, want)
		}
	}
	for _, bad := range []string{"storage.read", "storage.read:", "storage.read:rel", "storage.read:/a/../b", "storage.read:/a/", "storage.delete:/a"} {
		if _, err := ParseScopeClaim(bad); err == nil {
			t.Errorf("scope %q was taken", bad)
		}
	}
}

func TestParseJWKS(t *testing.T) {
	for _, bad := range []string{`{}`, `{"keys":[]}`, `not json`,
		`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
	} {
		if _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("key set %s was taken", bad)
		}
	}
	ed := `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"e"}]}`
	if _, err := ParseJWKS([]byte(ed)); err != nil {
		t.Errorf("an Ed25519 key set was refused: %v", err)
	}
}

// FuzzParseJWT: the decoder of bearer tokens from other domains and
// issuers never panics; what verifies is exactly the token the fixed key
// signed, with claims it signed, and it fails under another key.
func FuzzParseJWT(f *testing.F) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	key := jwtFixedKey(1)
	keys, others := mustKeys(f, key), mustKeys(f, jwtFixedKey(2))
	good := mustSign(f, key, jwtClaims(now))
	f.Add(good)
	f.Add(rawJWT(`{"alg":"none"}`, `{"iss":"i","sub":"s","exp":9999999999}`))
	f.Add(rawJWT(`{"alg":"ES256","jku":"x"}`, `{}`))
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, s string) {
		j, err := ParseJWT(s)
		if err != nil {
			if !errors.Is(err, ErrJWTInvalid) {
				t.Fatalf("a refusal outside ErrJWTInvalid: %v", err)
			}
			return
		}
		if j.Claims.Issuer == "" || j.Claims.Subject == "" || j.Claims.Expiry == nil {
			t.Fatalf("a token without iss, sub or exp parsed: %+v", j.Claims)
		}
		if err := j.Verify(keys, now); err != nil {
			return
		}
		if strings.TrimSpace(s) != good {
			// Another encoding of the good token's parts verifies only
			// if go-jose took it; its claims must still be the signed ones.
			if j.Claims.Subject != "alice" || j.Claims.Scope != jwtClaims(now).Scope {
				t.Fatalf("a token the fixed key did not sign verified: %+v", j.Claims)
			}
		}
		j2, _ := ParseJWT(s)
		if j2.Verify(others, now) == nil {
			t.Fatal("the token verified under another issuer's key")
		}
	})
}

// FuzzParseJWKS: the decoder of issuers' key sets (files another domain
// or issuer hands over) never panics, and what it accepts is 1 to
// MaxJWTKeys public P-256 or Ed25519 keys, each with a key id of its own.
func FuzzParseJWKS(f *testing.F) {
	good, err := JWKSOf(jwtFixedKey(1))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"e"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-384","x":"AA","y":"AA","kid":"p"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := ParseJWKS(b)
		if err != nil {
			return
		}
		if n := len(ks.Keys); n == 0 || n > MaxJWTKeys {
			t.Fatalf("a key set of %d keys was taken", n)
		}
		seen := map[string]bool{}
		for _, k := range ks.Keys {
			if k.KeyID == "" || seen[k.KeyID] || !k.IsPublic() {
				t.Fatalf("key %q taken (twice: %v, public: %v)", k.KeyID, seen[k.KeyID], k.IsPublic())
			}
			seen[k.KeyID] = true
			switch pub := k.Key.(type) {
			case *ecdsa.PublicKey:
				if pub.Curve != elliptic.P256() {
					t.Fatalf("a key on %s was taken", pub.Curve.Params().Name)
				}
			case ed25519.PublicKey:
			default:
				t.Fatalf("a key of type %T was taken", k.Key)
			}
		}
	})
}

// TestJWTEdDSA: a token an issuer signs with Ed25519 verifies with its
// key set, and not with an ES256 set.
func TestJWTEdDSA(t *testing.T) {
	now := time.Now()
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv}, (&jose.SignerOptions{}).WithHeader("kid", "ed"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(jwtClaims(now)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: priv.Public(), KeyID: "ed"}}})
	ks, err := ParseJWKS(b)
	if err != nil {
		t.Fatal(err)
	}
	j, err := ParseJWT(tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Verify(ks, now); err != nil {
		t.Fatalf("an EdDSA token: %v", err)
	}
	if err := j.Verify(mustKeys(t, jwtFixedKey(1)), now); !errors.Is(err, ErrJWTUnknownKey) {
		t.Fatalf("an EdDSA token under an ES256 set: %v", err)
	}
}
