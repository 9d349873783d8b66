package auth

import (
	"fmt"
	"path"
	"strings"
)

// Scopes of the WLCG token profile (storage.read:/path and its kin): a
// bearer token's rights. A scope names an action and a path; it covers
// that path and everything below it, and the path is required.

// The storage scopes pando honours, and the rights each gives.
const (
	ScopeRead   = "storage.read"   // read and list
	ScopeCreate = "storage.create" // create new files and directories (no overwrite, no removal)
	ScopeModify = "storage.modify" // change, create, remove and rename
)

var scopeRights = map[string]Rights{
	ScopeRead:   Read | List,
	ScopeCreate: Insert | List,
	ScopeModify: Insert | Delete | Write | Lock | List,
}

// MaxScopes bounds the scopes of one token.
const MaxScopes = 64

// Scope is one storage scope: an action on a path and below it.
type Scope struct {
	Action string // ScopeRead, ScopeCreate or ScopeModify
	Path   string // clean and absolute ("/" covers everything)
}

func (s Scope) String() string { return s.Action + ":" + s.Path }

// Rights is what the scope gives on its path and below.
func (s Scope) Rights() Rights { return scopeRights[s.Action] }

// ParseScope parses one scope "storage.read:/path".
func ParseScope(s string) (Scope, error) {
	act, p, ok := strings.Cut(s, ":")
	if _, known := scopeRights[act]; !known {
		return Scope{}, fmt.Errorf("scope %q: the action is none of %s, %s, %s", s, ScopeRead, ScopeCreate, ScopeModify)
	}
	if !ok || !strings.HasPrefix(p, "/") {
		return Scope{}, fmt.Errorf("scope %q has no path; write it as %s:/path", s, act)
	}
	if len(p) > MaxPath || path.Clean(p) != p {
		return Scope{}, fmt.Errorf("scope %q: the path is not clean (no //, . or .., no trailing /)", s)
	}
	return Scope{Action: act, Path: p}, nil
}

// ParseScopeClaim parses the space-separated scope claim of a token.
// Scopes of other kinds (openid, offline_access, compute.*) are passed
// over, as the profile asks; a storage scope that does not parse fails
// the claim.
func ParseScopeClaim(claim string) ([]Scope, error) {
	var out []Scope
	for _, f := range strings.Fields(claim) {
		if !strings.HasPrefix(f, "storage.") {
			continue
		}
		if len(out) == MaxScopes {
			return nil, fmt.Errorf("the token holds more than %d storage scopes", MaxScopes)
		}
		s, err := ParseScope(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ScopeClaim is scopes as a token's scope claim.
func ScopeClaim(scopes []Scope) string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = s.String()
	}
	return strings.Join(out, " ")
}

// ScopeRights returns the rights scopes give at the absolute path p: the
// union of those whose path is p or above it.
func ScopeRights(scopes []Scope, p string) Rights {
	var r Rights
	for _, s := range scopes {
		if s.Path == "/" || p == s.Path || strings.HasPrefix(p, s.Path+"/") {
			r |= s.Rights()
		}
	}
	return r
}
