package auth

import (
	"fmt"
	"strings"
)

// Entry is one line of an ACL. Who is a user ("alice"), a group
// ("group:staff") or "anyone" (every authenticated principal of the domain).
type Entry struct {
	Who      string
	Rights   Rights
	Negative bool
}

// ACL is the list of entries on one namespace prefix.
type ACL []Entry

// Subject is who asks: a user and their groups.
type Subject struct {
	User   string
	Groups []string
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
	if who != "anyone" {
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

func (e Entry) matches(s Subject) bool {
	if e.Who == "anyone" || e.Who == s.User {
		return true
	}
	if g, ok := strings.CutPrefix(e.Who, "group:"); ok {
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
