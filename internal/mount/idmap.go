package mount

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// Owners and groups (docs/posix.md, "Ownership"), mapped as NFSv4 does:
// they travel as names (wire.ValidIdent), and each agent shows them as
// its local uids and gids through its IDMap:
//
//   - the agent's principal is the uid running the agent;
//   - a principal or grid group the map names is the uid or gid it gives;
//   - "#N", a local id without a grid name, is N (as NFS's AUTH_SYS);
//   - any other principal or group is nobody (IDMap.Nobody);
//   - an entry whose share keeps no owner (made at the share's host)
//     shows as the agent's uid and gid, as all entries did before.
//
// The other way, for a chown and for what a local user makes: the agent's
// uid is its principal, a uid or gid the map names is its name, any
// other is "#N". The share decides what a principal may claim
// (internal/share/ident.go); the kernel applies POSIX's rules to each
// local caller over the attributes shown (default_permissions, on a
// mount lent to other uids).

// IDMap maps owner and group names to local ids.
type IDMap struct {
	// Principal is the agent's: its files show as Self's.
	Principal string
	// Self and SelfGroup are the uid and gid running the agent.
	Self, SelfGroup uint32
	// Users and Groups map principals and grid groups to local ids.
	Users, Groups map[string]uint32
	// Nobody and NobodyGroup show the principals and groups not mapped.
	Nobody, NobodyGroup uint32
}

// DefaultNobody is the uid and gid of nobody, shown for an owner the
// map does not know.
const DefaultNobody = 65534

func (m *IDMap) uid(owner string) uint32 {
	switch {
	case owner == "" || owner == m.Principal:
		return m.Self
	}
	if n, ok := wire.NumericIdent(owner); ok {
		return n
	}
	if n, ok := m.Users[owner]; ok {
		return n
	}
	return m.Nobody
}

func (m *IDMap) gid(owner, group string) uint32 {
	if group == "" {
		if owner == "" || owner == m.Principal {
			return m.SelfGroup
		}
		return m.NobodyGroup
	}
	if n, ok := wire.NumericIdent(group); ok {
		return n
	}
	if n, ok := m.Groups[group]; ok {
		return n
	}
	return m.NobodyGroup
}

// owner is the name of local uid n.
func (m *IDMap) owner(n uint32) string {
	if n == m.Self && m.Principal != "" {
		return m.Principal
	}
	for name, u := range m.Users {
		if u == n {
			return name
		}
	}
	return wire.Numeric(n)
}

// group is the name of local gid n.
func (m *IDMap) group(n uint32) string {
	for name, g := range m.Groups {
		if g == n {
			return name
		}
	}
	return wire.Numeric(n)
}

// creator is what a local caller with uid and gid makes, in a directory
// with attributes dir: its owner, and its group (the directory's when the
// directory is setgid, as Linux gives).
func (m *IDMap) creator(uid, gid uint32, dir wire.Attr) vfs.Creator {
	c := vfs.Creator{Owner: m.owner(uid), Group: m.group(gid)}
	if dir.Mode&setgid != 0 && dir.Group != "" {
		c.Group = dir.Group
	}
	return c
}

const setgid = 0o2000

// ParseIDMap reads the --map-user, --map-group and --nobody flags:
// "PRINCIPAL=USER", "GROUP=GROUP" (local names or numbers) and
// "USER[:GROUP]".
func ParseIDMap(users, groups []string, nobody string) (*IDMap, error) {
	m := &IDMap{Users: map[string]uint32{}, Groups: map[string]uint32{}, Nobody: DefaultNobody, NobodyGroup: DefaultNobody}
	for _, s := range users {
		name, local, ok := strings.Cut(s, "=")
		if !ok || !wire.ValidIdent(name) || strings.HasPrefix(name, "#") {
			return nil, fmt.Errorf("--map-user %q: give PRINCIPAL=USER, as alice@uva=alice", s)
		}
		n, err := localID(local, false)
		if err != nil {
			return nil, fmt.Errorf("--map-user %q: %w", s, err)
		}
		m.Users[name] = n
	}
	for _, s := range groups {
		name, local, ok := strings.Cut(s, "=")
		if !ok || !wire.ValidIdent(name) || strings.HasPrefix(name, "#") {
			return nil, fmt.Errorf("--map-group %q: give GROUP=LOCALGROUP, as staff@uva=staff", s)
		}
		n, err := localID(local, true)
		if err != nil {
			return nil, fmt.Errorf("--map-group %q: %w", s, err)
		}
		m.Groups[name] = n
	}
	if nobody != "" {
		u, g, hasGroup := strings.Cut(nobody, ":")
		n, err := localID(u, false)
		if err != nil {
			return nil, fmt.Errorf("--nobody %q: %w", nobody, err)
		}
		m.Nobody, m.NobodyGroup = n, n
		if hasGroup {
			if m.NobodyGroup, err = localID(g, true); err != nil {
				return nil, fmt.Errorf("--nobody %q: %w", nobody, err)
			}
		}
	}
	return m, nil
}

// localID resolves a local user (or group) name or number.
func localID(s string, group bool) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n != 1<<32-1 {
		return uint32(n), nil
	}
	var id string
	var err error
	if group {
		var g *user.Group
		if g, err = user.LookupGroup(s); err == nil {
			id = g.Gid
		}
	} else {
		var u *user.User
		if u, err = user.Lookup(s); err == nil {
			id = u.Uid
		}
	}
	var uu user.UnknownUserError
	var ug user.UnknownGroupError
	if errors.As(err, &uu) || errors.As(err, &ug) {
		what := "user"
		if group {
			what = "group"
		}
		return 0, fmt.Errorf("there is no local %s named %q; give a name or a number", what, s)
	}
	if err != nil {
		return 0, fmt.Errorf("cannot look up %q: %w", s, err)
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q has the id %q, which is not a number", s, id)
	}
	return uint32(n), nil
}
