package auth

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"path"
	"strings"
	"testing"
	"time"
)

// The fuzz targets sign with fixed keys at a fixed time, so that the
// tokens checked in under testdata/fuzz verify (or fail) the same way on
// every run.
var (
	fuzzNow        = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fuzzKey        = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	fuzzForeignKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize))
)

// fuzzTokens returns the seeds of FuzzVerifyToken: the one token that
// must verify, and tokens that must not (expired, issued in the future,
// with a root that leaves the share, signed by another domain).
func fuzzTokens(tb testing.TB) (good []byte, bad map[string][]byte) {
	sign := func(key ed25519.PrivateKey, change func(*Token)) []byte {
		tok := testToken(fuzzNow)
		change(tok)
		b, err := SignToken(key, tok)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	good = sign(fuzzKey, func(*Token) {})
	bad = map[string][]byte{
		"expired":   sign(fuzzKey, func(t *Token) { t.Issued, t.Expires = fuzzNow.Add(-time.Hour), fuzzNow }),
		"future":    sign(fuzzKey, func(t *Token) { t.Issued = fuzzNow.Add(time.Minute) }),
		"escape":    sign(fuzzKey, func(t *Token) { t.Root = "../etc" }),
		"foreign":   sign(fuzzForeignKey, func(*Token) {}),
		"no sig":    {0xa2, 0x01, 0x40, 0x02, 0x40},
		"truncated": good[:len(good)/2],
	}
	return good, bad
}

// FuzzVerifyToken: arbitrary bytes never panic, and a token verifies only
// if the domain's key signed exactly its body (no forged, altered or
// foreign token verifies), its lifetime holds at the time of the check
// and its root stays inside the share. Since no fuzzer forges an ed25519
// signature, the only body that may ever verify is that of the one valid
// token signed here.
func FuzzVerifyToken(f *testing.F) {
	pub := fuzzKey.Public().(ed25519.PublicKey)
	good, bad := fuzzTokens(f)
	var gs signed
	if err := tokenDec.Unmarshal(good, &gs); err != nil {
		f.Fatal(err)
	}
	if _, err := VerifyToken(pub, good, fuzzNow); err != nil {
		f.Fatalf("the good seed does not verify: %v", err)
	}
	f.Add(good)
	for name, b := range bad {
		if _, err := VerifyToken(pub, b, fuzzNow); err == nil {
			f.Fatalf("seed %q verifies", name)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := VerifyToken(pub, b, fuzzNow)
		if err != nil {
			if !errors.Is(err, ErrTokenInvalid) && !errors.Is(err, ErrTokenExpired) {
				t.Fatalf("refusal without ErrTokenInvalid or ErrTokenExpired: %v", err)
			}
			return
		}
		var s signed
		if err := tokenDec.Unmarshal(b, &s); err != nil {
			t.Fatalf("verified, but its envelope does not decode: %v", err)
		}
		if !bytes.Equal(s.Body, gs.Body) || !ed25519.Verify(pub, s.Body, s.Sig) {
			t.Fatalf("a body the key never signed verified: %+v", tok)
		}
		if !fuzzNow.Before(tok.Expires) || tok.Issued.After(fuzzNow.Add(clockSkew)) {
			t.Fatalf("verified outside its lifetime: %+v", tok)
		}
		if _, err := CleanRel(tok.Root); err != nil {
			t.Fatalf("verified with root %q: %v", tok.Root, err)
		}
		if _, err := VerifyToken(fuzzForeignKey.Public().(ed25519.PublicKey), b, fuzzNow); err == nil {
			t.Fatal("the same bytes verify under another domain's key")
		}
		if _, err := VerifyToken(pub, b, tok.Expires); !errors.Is(err, ErrTokenExpired) {
			t.Fatalf("verifies at its own expiry: %v", err)
		}
		if r := tok.RightsAt(tok.Root + "x"); tok.Root != "" && r != 0 {
			t.Fatalf("rights %s outside the token's root", r)
		}
	})
}

// FuzzCleanRel: a share-relative path from the wire is accepted only if
// it is clean (path.Clean leaves it alone), relative, free of NUL, ".."
// and "." components, and within the limits; and it is returned as given.
func FuzzCleanRel(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", "...", "..", "../a", "a/..", "/a", "a//b", "./a", "a/.", "a\x00b", "a/b/", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := CleanRel(p)
		if err != nil {
			return
		}
		if got != p {
			t.Fatalf("CleanRel(%q) = %q", p, got)
		}
		if p == "" {
			return
		}
		if path.Clean(p) != p || path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || len(p) > MaxPath {
			t.Fatalf("accepted %q", p)
		}
		for _, c := range strings.Split(p, "/") {
			if c == ".." || c == "." || c == "" || len(c) > MaxComponent {
				t.Fatalf("accepted %q with component %q", p, c)
			}
		}
		if !IsUnder(p, "") || IsUnder(p, p+"x") {
			t.Fatalf("IsUnder is wrong about %q", p)
		}
	})
}

// FuzzParseRights: rights from the wire (an ACL entry) parse to a subset
// of All, and the canonical string parses back to the same rights.
func FuzzParseRights(f *testing.F) {
	for _, s := range []string{"rl", "rlidwka", "none", "read", "write", "all", "", "x", "READ", "rrl"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRights(s)
		if err != nil {
			return
		}
		if r&^All != 0 {
			t.Fatalf("ParseRights(%q) = %#x, beyond All", s, uint8(r))
		}
		back, err := ParseRights(r.String())
		if err != nil || back != r {
			t.Fatalf("%q -> %s -> %v, %v", s, r, back, err)
		}
		_ = r.Describe()
	})
}
