package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
)

// Bearer tokens (JWTs of the WLCG profile: pando token create --scope,
// or a trusted issuer's) at a gateway. The controller says whose a token
// is (bearer-check); the gateway then serves it as a session of its own,
// named by the token's hash (bearerPrefix, which no user name can be),
// with a cache and vfs of its own whose client asks for every share
// token with the JWT itself (client.Options.Bearer). The controller
// verifies the JWT again each time and signs share tokens with only the
// rights its scopes cover (and, for the domain's own tokens, the user's
// ACLs grant): the gateway never widens a token, and an expired,
// distrusted or revoked one gets no share token any more.

// bearerPrefix starts the names of bearer sessions: '~' is in no user name.
const bearerPrefix = "~jwt-"

// bearerCheck is how long a checked JWT is trusted without asking the
// controller again: an issuer distrusted, or a JWT otherwise refused,
// is refused at the gateway within it (a revoked user's at once).
const bearerCheck = 10 * time.Second

// maxBearers bounds the bearer sessions remembered.
const maxBearers = 4096

// bearerSession is a JWT the controller accepted.
type bearerSession struct {
	token     string
	principal string // alice@uva, or SUB@ISSUER
	user      string // the home user of a token of the domain's own
	expires   time.Time
}

// checkBearer returns the session name of the JWT tok, checked with the
// controller (remembered as sign-in tokens are).
func (g *Gateway) checkBearer(ctx context.Context, tok string) (string, error) {
	tok = strings.TrimSpace(tok)
	if len(tok) > auth.MaxJWTSize {
		return "", fmt.Errorf("the bearer token has %d bytes, more than %d", len(tok), auth.MaxJWTSize)
	}
	return g.bearerChecks.check([]byte(tok), bearerCheck, "the bearer token was refused; ask its issuer for a new one", func() (string, time.Time, error) {
		cl, err := g.control()
		if err != nil {
			return "", time.Time{}, err
		}
		r, err := cl.Admin().BearerCheck(ctx, tok)
		if err != nil {
			return "", time.Time{}, fmt.Errorf("checking the bearer token with the controller: %w", err)
		}
		sum := sha256.Sum256([]byte(tok))
		name := bearerPrefix + hex.EncodeToString(sum[:12])
		end := time.Unix(0, r.Expires)
		g.mu.Lock()
		if len(g.bearers) >= maxBearers {
			now := time.Now()
			for k, b := range g.bearers {
				if now.After(b.expires) && g.users[k] == nil {
					delete(g.bearers, k)
				}
			}
		}
		if len(g.bearers) < maxBearers {
			g.bearers[name] = bearerSession{token: tok, principal: r.Principal, user: r.User, expires: end}
		}
		g.mu.Unlock()
		return name, end, nil
	})
}
