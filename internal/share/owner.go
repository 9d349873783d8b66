package share

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
)

// No privilege from the grid (docs/security.md): a share never makes a
// setuid or setgid file because a client asked, unless its operator allows
// it, and a share that runs as root gives what it creates to an
// unprivileged account, so that no client makes a root-owned file on the
// share's host.

// owner is the account that owns what a share running as root creates.
type owner struct {
	uid, gid int
	name     string
}

// ownerFor decides who owns what the share creates: spec ("USER" or
// "USER:GROUP", names or numbers) if given; otherwise, for a share that runs
// as root, the owner of the exported directory, or nobody if that is root.
// A share that does not run as root creates as its own account (nil).
func ownerFor(spec, root string, euid int) (*owner, string, error) {
	if spec != "" {
		o, err := parseOwner(spec)
		return o, "", err
	}
	if euid != 0 {
		return nil, "", nil
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return nil, "", err
	}
	if st.Uid != 0 {
		return &owner{uid: int(st.Uid), gid: int(st.Gid), name: strconv.Itoa(int(st.Uid))}, "", nil
	}
	o, err := parseOwner("nobody")
	if err != nil {
		o = &owner{uid: 65534, gid: 65534, name: "nobody"}
	}
	return o, fmt.Sprintf("the share runs as root and its directory %s belongs to root: files that clients create are given to %s; name their owner with --owner USER (--owner root to keep root)", root, o.name), nil
}

func parseOwner(spec string) (*owner, error) {
	uname, gname, hasGroup := strings.Cut(spec, ":")
	o := &owner{name: spec}
	if u, err := user.Lookup(uname); err == nil {
		o.uid, _ = strconv.Atoi(u.Uid)
		o.gid, _ = strconv.Atoi(u.Gid)
	} else if n, nerr := strconv.Atoi(uname); nerr == nil && n >= 0 {
		o.uid, o.gid = n, n
	} else {
		return nil, fmt.Errorf("owner %q: no such user on this machine; give an existing user name or number", uname)
	}
	if hasGroup {
		if g, err := user.LookupGroup(gname); err == nil {
			o.gid, _ = strconv.Atoi(g.Gid)
		} else if n, nerr := strconv.Atoi(gname); nerr == nil && n >= 0 {
			o.gid = n
		} else {
			return nil, fmt.Errorf("owner %q: no such group on this machine; give an existing group name or number", spec)
		}
	}
	return o, nil
}

// safeMode is the mode a client may give a file it creates or chmods: what
// it asked, without setuid and setgid unless the operator allows them.
func (s *Server) safeMode(mode uint32) uint32 {
	mode &= 0o7777
	if s.cfg.AllowSetID {
		return mode
	}
	return mode &^ (syscall.S_ISUID | syscall.S_ISGID)
}

// own gives rel, just created for t's principal, which asked for mode
// (type bits and 07777) and, for a device, rdev, to the account that owns
// what it creates (accountFor: the share's owner, or the one the identity
// rules choose for a principal of another domain),
// records the owner and group id the client was given (see ident.go),
// and gives it the mode asked: exactly (the share's umask, which the
// client's kernel has already applied once, is undone), with what the
// share's host may not have kept as a record (see special.go).
func (s *Server) own(t *auth.Token, rel string, mode, rdev uint32, id ident) error {
	acct := s.accountFor(t)
	return s.tree.atPath(rel, true, func(p string, fd int, st *unix.Stat_t) error {
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			mode = st.Mode // a link has no mode of its own
		}
		if acct != nil {
			if err := unix.Fchownat(fd, "", acct.uid, acct.gid, unix.AT_EMPTY_PATH); err != nil {
				return &os.PathError{Op: "chown", Path: rel, Err: err}
			}
			// chown clears setuid and setgid: see again.
			if err := unix.Fstat(fd, st); err != nil {
				return err
			}
		}
		if setidKept(st.Mode) && !s.cfg.AllowSetID {
			id.setid = mode & (syscall.S_ISUID | syscall.S_ISGID)
		}
		if err := writeIdent(p, st, id); err != nil && !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, syscall.EACCES) {
			// A file system without extended attributes keeps no
			// owner, nor does a share not running as root for a file
			// made without write permission.
			return &os.PathError{Op: "chown", Path: rel, Err: err}
		}
		if err := s.setMode(p, st, mode, rdev); err != nil {
			return &os.PathError{Op: "chmod", Path: rel, Err: err}
		}
		return nil
	})
}
