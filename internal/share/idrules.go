package share

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"pando.dev/pando/internal/auth"
)

// Identity at a share (docs/security.md, "Identity at a share"). What a
// principal of another, linked domain creates is given, on the share's
// host, to a local account that the operator's rules file (--id-rules)
// chooses; what a principal of the share's own domain creates is given to
// the share's owner account as before (owner.go). Either way the
// principal itself is kept as the entry's recorded owner (ident.go), and
// a mount shows it through its own ID map (pando mount --map-user).
//
// A rules file has one rule a line, first match wins:
//
//	alice@uva            alice          # one principal
//	group:physics@uva    physics:phys   # a group of a domain, as the token's Groups say
//	*@uva                uvaguest       # every principal of a domain
//	*                    nobody         # every other remote principal
//
// ACCOUNT is USER or USER:GROUP, names (resolved in the local user
// database when the share starts) or numbers. A remote principal that no
// rule matches is given to the share's owner account (--owner: the
// default when there is no file). Blank lines and "#" comments are
// skipped. A malformed line, an unknown account, root, a rule for the
// share's own domain, or a rule after "*" (which no principal would
// reach) refuses the file.

// idRule is one line of a rules file.
type idRule struct {
	line  int
	match string // "*", "*@dom", "group:name@dom" or "name@dom"
	acct  *owner
}

// idRules is a parsed rules file.
type idRules struct {
	file  string
	rules []idRule
}

// loadIDRules reads the rules file at path for a share of domain home.
func loadIDRules(path, home string) (*idRules, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--id-rules: %w", err)
	}
	defer f.Close()
	return parseIDRules(path, home, f, parseOwner)
}

// parseIDRules reads rules from r (named file in errors), resolving each
// account with lookup.
func parseIDRules(file, home string, r io.Reader, lookup func(string) (*owner, error)) (*idRules, error) {
	rs := &idRules{file: file}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	star := 0
	for n := 1; sc.Scan(); n++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("--id-rules %s line %d: %s", file, n, fmt.Sprintf(format, args...))
		}
		if len(f) != 2 {
			return nil, bad("%q is not a rule: write PRINCIPAL ACCOUNT[:GROUP], as alice@uva alice, *@uva guest or group:physics@uva physics", strings.TrimSpace(text))
		}
		if star != 0 {
			return nil, bad("no principal reaches this rule: the rule * on line %d matches every one first", star)
		}
		if err := validMatch(f[0], home); err != nil {
			return nil, bad("%v", err)
		}
		acct, err := lookup(f[1])
		if err != nil {
			return nil, bad("%v", err)
		}
		if acct.uid == 0 || acct.gid == 0 {
			return nil, bad("%s is root's: a principal of another domain never owns a file as root; name an unprivileged account", f[1])
		}
		if f[0] == "*" {
			star = n
		}
		rs.rules = append(rs.rules, idRule{line: n, match: f[0], acct: acct})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("--id-rules %s: a line is longer than 64 KiB", file)
		}
		return nil, fmt.Errorf("--id-rules %s: %w", file, err)
	}
	return rs, nil
}

// validMatch checks the PRINCIPAL of a rule.
func validMatch(m, home string) error {
	if m == "*" {
		return nil
	}
	what, at, ok := strings.Cut(strings.TrimPrefix(m, "group:"), "@")
	if !ok || strings.Contains(at, "@") {
		return fmt.Errorf("%q is no principal: give name@domain, *@domain, group:name@domain or *", m)
	}
	if err := auth.ValidName(at); err != nil {
		return fmt.Errorf("%q: domain %w", m, err)
	}
	if what != "*" || strings.HasPrefix(m, "group:") {
		if err := auth.ValidName(what); err != nil {
			return fmt.Errorf("%q: %w", m, err)
		}
	}
	if at == home {
		return fmt.Errorf("%q is of this share's own domain %s, whose principals' files the share's owner account (--owner) keeps; rules are for other domains", m, home)
	}
	return nil
}

// account is the account of the first rule that t's principal matches,
// or nil.
func (rs *idRules) account(t *auth.Token) *owner {
	_, dom, _ := strings.Cut(t.Principal, "@")
	for _, r := range rs.rules {
		switch {
		case r.match == "*",
			r.match == t.Principal,
			r.match == "*@"+dom,
			strings.HasPrefix(r.match, "group:") && groupOf(t, strings.TrimPrefix(r.match, "group:")):
			return r.acct
		}
	}
	return nil
}

func groupOf(t *auth.Token, g string) bool {
	for _, x := range t.Groups {
		if x == g {
			return true
		}
	}
	return false
}

// accountFor is the account that owns, on the share's host, what t's
// principal creates: the share's owner for its own domain's principals
// and for a remote one no rule names; nil is the share's own account.
func (s *Server) accountFor(t *auth.Token) *owner {
	rs := s.idRules.Load()
	if rs == nil || isHome(t.Principal, s.cfg.Domain) {
		return s.owner
	}
	if o := rs.account(t); o != nil {
		return o
	}
	return s.owner
}

// isHome reports whether principal ("alice@uva", "share:data@uva") is of
// domain home.
func isHome(principal, home string) bool {
	i := strings.LastIndexByte(principal, '@')
	return i >= 0 && principal[i+1:] == home
}

// ReloadIDRules reads the rules file again (on SIGHUP): a file that is
// refused leaves the rules in force unchanged.
func (s *Server) ReloadIDRules() error {
	if s.cfg.IDRules == "" {
		return nil
	}
	rs, err := loadIDRules(s.cfg.IDRules, s.cfg.Domain)
	if err != nil {
		return fmt.Errorf("share %s keeps its identity rules: %w", s.cfg.Name, err)
	}
	s.idRules.Store(rs)
	return nil
}
