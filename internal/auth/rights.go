package auth

import (
	"fmt"
	"strings"
)

// Rights is a set of AFS-style rights.
type Rights uint8

// The rights, in canonical order "rlidwka".
const (
	Read   Rights = 1 << iota // r: read file data
	List                      // l: look up names, list directories, stat
	Insert                    // i: create files, directories, links
	Delete                    // d: remove and rename away
	Write                     // w: change file data and attributes
	Lock                      // k: take locks
	Admin                     // a: change ACLs and mounts
)

// All is every right.
const All = Read | List | Insert | Delete | Write | Lock | Admin

const letters = "rlidwka"

var words = []string{"read", "list", "insert", "delete", "write", "lock", "administer"}

// ParseRights parses letters ("rl", "rlidwka") or one of the words none,
// read (rl), write (rlidwk), all.
func ParseRights(s string) (Rights, error) {
	switch strings.ToLower(s) {
	case "none":
		return 0, nil
	case "read":
		return Read | List, nil
	case "write":
		return Read | List | Insert | Delete | Write | Lock, nil
	case "all":
		return All, nil
	case "":
		return 0, fmt.Errorf("empty rights; use letters of %q or none, read, write, all", letters)
	}
	var r Rights
	for _, c := range s {
		i := strings.IndexRune(letters, c)
		if i < 0 {
			return 0, fmt.Errorf("unknown right %q in %q; rights are letters of %q (read, list, insert, delete, write, lock, administer) or none, read, write, all", c, s, letters)
		}
		r |= 1 << i
	}
	return r, nil
}

// String is the canonical letters, or "none".
func (r Rights) String() string {
	if r == 0 {
		return "none"
	}
	var b strings.Builder
	for i := range letters {
		if r&(1<<i) != 0 {
			b.WriteByte(letters[i])
		}
	}
	return b.String()
}

// Has reports whether r includes every right of need.
func (r Rights) Has(need Rights) bool { return r&need == need }

// Describe names the rights in words: "read, insert".
func (r Rights) Describe() string {
	var out []string
	for i, w := range words {
		if r&(1<<i) != 0 {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return "no"
	}
	return strings.Join(out, ", ")
}
