package auth

import (
	"fmt"
	"strings"
)

// Entry is one line of an ACL. Who is a user ("alice"), a group
// ("group:staff") or "anyone" (every authenticated principal of the
// domain), or the same of a linked domain: "bob@tacc",
// "group:physics@tacc", "anyone@tacc". An entry without a domain names
// the home domain's principals only.
type Entry struct {
	Who      string
	Rights   Rights
	Negative bool
}

// ACL is the list of entries on one namespace prefix.
type ACL []Entry

// Subject is who asks: a user and their groups, of the home domain
// (Domain "") or of a linked one (as its home domain names them).
type Subject struct {
	User   string
	Groups []string
	Domain string
}

// ParseEntry parses a WHO and RIGHTS pair; a WHO starting with "-" is a
// negative entry.
func ParseEntry(who, rights string) (Entry, error) {
	neg := strings.HasPrefix(who, "-")
	who = strings.TrimPrefix(who, "-")
	name := who
	if g, ok := strings.CutPrefix(who, "group:"); ok {
		name = g
	}
	if n, dom, ok := strings.Cut(name, "@"); ok {
		if err := ValidName(dom); err != nil {
			return Entry{}, fmt.Errorf("ACL entry for %q: domain: %w", who, err)
		}
		name = n
		if n == "anyone" && who != name+"@"+dom {
			return Entry{}, fmt.Errorf("ACL entry for %q: anyone@DOMAIN is no group; write anyone@%s", who, dom)
		}
	}
	if name != "anyone" || strings.HasPrefix(who, "group:") {
		if err := ValidName(name); err != nil {
			return Entry{}, fmt.Errorf("ACL entry for %q: %w", who, err)
		}
	}
	r, err := ParseRights(rights)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Who: who, Rights: r, Negative: neg}, nil
}

// Domain is the domain an entry names ("" for the home domain's).
func (e Entry) Domain() string {
	_, dom, _ := strings.Cut(e.Who, "@")
	return dom
}

func (e Entry) matches(s Subject) bool {
	who := e.Who
	if s.Domain == "" {
		if strings.Contains(who, "@") {
			return false
		}
	} else {
		n, ok := strings.CutSuffix(who, "@"+s.Domain)
		if !ok {
			return false
		}
		who = n
	}
	if who == "anyone" || who == s.User {
		return true
	}
	if g, ok := strings.CutPrefix(who, "group:"); ok {
		for _, sg := range s.Groups {
			if sg == g {
				return true
			}
		}
	}
	return false
}

// Effective returns s's rights at the global path p: the union of matching
// positive entries on every prefix from "/" down to p, minus the union of
// matching negative entries on those prefixes. Prefixes are component-wise.
func Effective(acls map[string]ACL, s Subject, p string) Rights {
	var pos, neg Rights
	apply := func(prefix string) {
		for _, e := range acls[prefix] {
			if !e.matches(s) {
				continue
			}
			if e.Negative {
				neg |= e.Rights
			} else {
				pos |= e.Rights
			}
		}
	}
	apply("/")
	if p != "/" && p != "" {
		for i := 1; i <= len(p); i++ {
			if i == len(p) || p[i] == '/' {
				apply(p[:i])
			}
		}
	}
	return pos &^ neg
}
