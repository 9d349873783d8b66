package share

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// Owners (docs/posix.md, "Ownership"). Every entry a client makes has an
// owner and a group, as names (wire.ValidIdent: a principal, a grid
// group, or "#N" for a local id), kept beside the entry in the share's
// own extended attribute ownerXattr, never as the real file's owner: a
// uid the share's host would give rights by (docs/security.md, rule 6)
// is never taken from a client. A share that runs as root keeps it in
// the trusted namespace, which every type of entry carries (symlinks,
// FIFOs and sockets too) and which only root on the share's host sees;
// a share that does not keeps it in user.pando.owner, which only regular
// files and directories carry: its other entries show no owner.
//
// The record also keeps the setuid and setgid bits of a directory, a FIFO
// or a socket (security rule 5 keeps them from the real entry; a regular
// file's and a device's are kept in metaXattr, special.go): they are
// shown, and the mount gives a setgid directory's group to what is made
// in it.
//
// What a client may claim: a new entry's owner is its principal or a
// local id ("#N", a user of the client's host); another principal needs
// the administer right (a) on the new entry's path. A chown to another
// owner needs the administer right; a chgrp needs it too unless the
// principal owns the entry. The client's kernel applies POSIX's rules
// for its local users (who may chown) on top (default_permissions).
var ownerXattr = func() string {
	if os.Geteuid() == 0 {
		return "trusted.pando.owner"
	}
	return wire.XattrShareOwner
}()

// ident is what ownerXattr holds.
type ident struct {
	owner, group string // "" for none
	setid        uint32 // setuid and setgid bits shown (see setidKept)
}

func (id ident) encode() []byte {
	flags, o, g := "", id.owner, id.group
	if id.setid&syscall.S_ISUID != 0 {
		flags += "u"
	}
	if id.setid&syscall.S_ISGID != 0 {
		flags += "g"
	}
	if flags == "" {
		flags = "-"
	}
	if o == "" {
		o = "-"
	}
	if g == "" {
		g = "-"
	}
	return []byte("1 " + flags + " " + o + " " + g)
}

func decodeIdent(b []byte) (ident, bool) {
	f := strings.Split(string(b), " ")
	if len(f) != 4 || f[0] != "1" {
		return ident{}, false
	}
	var id ident
	switch f[1] {
	case "-":
	case "u":
		id.setid = syscall.S_ISUID
	case "g":
		id.setid = syscall.S_ISGID
	case "ug":
		id.setid = syscall.S_ISUID | syscall.S_ISGID
	default:
		return ident{}, false
	}
	for i, v := range []*string{&id.owner, &id.group} {
		s := f[2+i]
		if s == "-" {
			continue
		}
		if !wire.ValidIdent(s) {
			return ident{}, false
		}
		*v = s
	}
	return id, true
}

// keepsIdent reports whether an entry of this mode can carry ownerXattr.
func keepsIdent(mode uint32) bool {
	return strings.HasPrefix(ownerXattr, "trusted.") || carriesXattrs(mode)
}

// setidKept reports whether an entry of this mode (at the share) has its
// setuid and setgid bits kept in its owner record.
func setidKept(mode uint32) bool {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR, syscall.S_IFIFO, syscall.S_IFSOCK:
		return true
	}
	return false
}

// getter reads an extended attribute of one file into buf.
type getter func(name string, buf []byte) (int, error)

// readIdent reads the record of a file with stat st.
func readIdent(st *unix.Stat_t, get getter) ident {
	if !keepsIdent(st.Mode) {
		return ident{}
	}
	var buf [2*wire.MaxIdent + 16]byte
	n, err := get(ownerXattr, buf[:])
	if err != nil {
		return ident{}
	}
	id, _ := decodeIdent(bytes.TrimRight(buf[:n], "\x00"))
	return id
}

// pathGetter reads the attributes of p, an O_PATH name (see tree.atPath):
// the file itself, a symlink too.
func pathGetter(p string) getter {
	return func(name string, buf []byte) (int, error) { return unix.Getxattr(p, name, buf) }
}

// writeIdent records id for the file at p (an O_PATH name) with stat st;
// a file system without extended attributes keeps none (ENOTSUP).
func writeIdent(p string, st *unix.Stat_t, id ident) error {
	if !keepsIdent(st.Mode) {
		return nil
	}
	if id == (ident{}) {
		if err := unix.Removexattr(p, ownerXattr); err != nil && err != unix.ENODATA {
			return err
		}
		return nil
	}
	return unix.Setxattr(p, ownerXattr, id.encode(), 0)
}

// claim checks the owner and group a client asks for a new entry at rel
// and returns its record: owner "" is the principal's.
func claim(t *auth.Token, rel, owner, group string) (ident, error) {
	if owner == "" {
		owner = t.Principal
	}
	if !wire.ValidIdent(owner) || group != "" && !wire.ValidIdent(group) {
		return ident{}, wire.Errorf(wire.CodeInvalid, "owner %q, group %q: an owner or group is a principal, a group or #N, of 1 to %d bytes without spaces", owner, group, wire.MaxIdent)
	}
	if _, local := wire.NumericIdent(owner); owner != t.Principal && !local && !t.RightsAt(rel).Has(auth.Admin) {
		return ident{}, &wire.Error{Code: wire.CodePerm, Missing: auth.Admin.String(), Paths: []string{rel},
			Message: t.Principal + " may make /" + rel + " its own or a local id's (#N), not " + owner + "'s: that needs the administer right (a) there"}
	}
	return ident{owner: owner, group: group}, nil
}

// chownAsked applies a client's chown or chgrp (r.Valid's SetOwner,
// SetGroup), if it asks one, to rel under the rules above.
func (s *Server) chownAsked(t *auth.Token, rel string, r wire.SetAttrReq) error {
	if r.Valid&(wire.SetOwner|wire.SetGroup) == 0 {
		return nil
	}
	return s.tree.atPath(rel, true, func(p string, _ int, st *unix.Stat_t) error {
		if !keepsIdent(st.Mode) {
			return &wire.Error{Code: wire.CodePerm, Paths: []string{rel},
				Message: "share " + s.cfg.Name + " keeps owners only of regular files and directories (it does not run as root); /" + rel + " is neither"}
		}
		cur := readIdent(st, pathGetter(p))
		next := cur
		admin := t.RightsAt(rel).Has(auth.Admin)
		if r.Valid&wire.SetOwner != 0 && r.Owner != cur.owner {
			if !wire.ValidIdent(r.Owner) {
				return wire.Errorf(wire.CodeInvalid, "chown /%s: %q is no owner: give a principal or #N", rel, r.Owner)
			}
			if !admin {
				return &wire.Error{Code: wire.CodePerm, Missing: auth.Admin.String(), Paths: []string{rel},
					Message: t.Principal + " may not give /" + rel + " to " + r.Owner + ": changing an owner needs the administer right (a) there"}
			}
			next.owner = r.Owner
		}
		if r.Valid&wire.SetGroup != 0 && r.Group != cur.group {
			if !wire.ValidIdent(r.Group) {
				return wire.Errorf(wire.CodeInvalid, "chgrp /%s: %q is no group: give a group or #N", rel, r.Group)
			}
			if !admin && cur.owner != t.Principal {
				return &wire.Error{Code: wire.CodePerm, Missing: auth.Admin.String(), Paths: []string{rel},
					Message: t.Principal + " may not change the group of /" + rel + ": it does not own it, and lacks the administer right (a) there"}
			}
			next.group = r.Group
		}
		if next == cur {
			return nil
		}
		if err := writeIdent(p, st, next); err != nil {
			if errors.Is(err, syscall.ENOTSUP) {
				return &wire.Error{Code: wire.CodeNotSupp, Paths: []string{rel},
					Message: "share " + s.cfg.Name + " cannot keep owners: the file system of its directory has no extended attributes"}
			}
			return &os.PathError{Op: "chown", Path: rel, Err: err}
		}
		return nil // setxattr moved the ctime, as a chown does
	})
}
