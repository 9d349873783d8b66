package share

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/wire"
)

// The exported directory, and how a path a client names reaches an object
// in it (docs/security.md, "Rights follow the object").
//
// A client's path is resolved by resolve, one component at a time: a
// symlink met on the way is read and its target put in its place, as the
// kernel would do, so that the share checks the client's rights on the path
// reached, never on the name used. Every operation then acts on the
// resolved path through tree.at, which opens its parent with openat2 and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS and names the last component with a
// no-follow call: if a component was replaced by a symlink since (another
// client, a process on the share's host), the operation fails with ELOOP
// instead of following it.

// maxHops bounds the symlinks one resolution follows (Linux's MAXSYMLINKS).
const maxHops = 40

// tree is the share's root directory.
type tree struct {
	dir *os.File
	fd  int
}

func openTree(root string) (*tree, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return &tree{dir: os.NewFile(uintptr(fd), root), fd: fd}, nil
}

func (t *tree) close() error { return t.dir.Close() }

var beneath = unix.OpenHow{
	Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
}

// openDirFd opens the directory rel (resolved: no symlink in it) and
// returns its descriptor. A path longer than the kernel takes in one call
// (PATH_MAX) is walked in pieces, each beneath the directory before it.
func (t *tree) openDirFd(rel string) (int, error) {
	if rel == "" {
		rel = "." // a descriptor of its own: a dup would share the listing offset
	}
	at, rest := t.fd, rel
	for {
		piece := rest
		if len(piece) > pieceMax {
			i := strings.LastIndexByte(piece[:pieceMax], '/')
			if i <= 0 {
				if at != t.fd {
					unix.Close(at)
				}
				return -1, &fs.PathError{Op: "open", Path: rel, Err: unix.ENAMETOOLONG}
			}
			piece = piece[:i]
		}
		fd, err := openBeneath(at, piece)
		if at != t.fd {
			unix.Close(at)
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		if len(piece) == len(rest) {
			return fd, nil
		}
		at, rest = fd, rest[len(piece)+1:]
	}
}

// pieceMax is the longest path openDirFd opens in one call: less than
// PATH_MAX (4096 with its NUL).
const pieceMax = 4000

// openBeneath opens the directory p below the directory dirfd, never
// through a symlink or "..".
func openBeneath(dirfd int, p string) (int, error) {
	how := beneath
	for {
		fd, err := unix.Openat2(dirfd, p, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue // openat2 asks for a retry when a rename raced it
		}
		return fd, err
	}
}

// openDir opens the directory rel as a file (for listing, statfs).
func (t *tree) openDir(rel string) (*os.File, error) {
	fd, err := t.openDirFd(rel)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// at runs fn with a descriptor of rel's parent directory and rel's last
// name ("" for the root itself).
func (t *tree) at(rel string, fn func(dirfd int, name string) error) error {
	dir, name := splitRel(rel)
	fd, err := t.openDirFd(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd, name)
}

// atPath runs fn with rel opened O_PATH|O_NOFOLLOW and its /proc/self/fd
// name, through which the path-taking calls (chmod, xattrs) reach that very
// inode. A symlink is refused with ELOOP unless links is set.
func (t *tree) atPath(rel string, links bool, fn func(p string, fd int, st *unix.Stat_t) error) error {
	return t.at(rel, func(dirfd int, name string) error {
		if name == "" {
			name = "."
		}
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if !links && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			return &fs.PathError{Op: "open", Path: rel, Err: syscall.ELOOP}
		}
		err = fn("/proc/self/fd/"+strconv.Itoa(fd), fd, &st)
		if err == syscall.ENOENT && unix.Access("/proc/self/fd", unix.F_OK) != nil {
			return wire.Errorf(wire.CodeInternal, "the share cannot reach its files by descriptor: /proc is not mounted on its machine")
		}
		return err
	})
}

// openFile opens rel (resolved) with flags, never following a symlink.
func (t *tree) openFile(rel string, flags int, mode uint32) (*os.File, error) {
	var f *os.File
	err := t.at(rel, func(dirfd int, name string) error {
		if name == "" {
			name = "."
		}
		// Without blocking: a FIFO would hold the request until a writer
		// came. Only regular files and directories are opened at a share;
		// the I/O of special files is local to each host.
		fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, mode)
		if err != nil {
			return &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
			unix.Close(fd)
			return &fs.PathError{Op: "open", Path: rel, Err: unix.ENXIO}
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		f = os.NewFile(uintptr(fd), rel)
		return nil
	})
	return f, err
}

func (t *tree) readlink(rel string) (string, error) {
	var target string
	err := t.at(rel, func(dirfd int, name string) error {
		buf := make([]byte, 4097)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: rel, Err: err}
		}
		target = string(buf[:n])
		return nil
	})
	return target, err
}

func (t *tree) remove(rel string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return t.at(rel, func(dirfd int, name string) error {
		if err := unix.Unlinkat(dirfd, name, flags); err != nil {
			return &fs.PathError{Op: "remove", Path: rel, Err: err}
		}
		return nil
	})
}

func (t *tree) mkdir(rel string, mode uint32) error {
	return t.at(rel, func(dirfd int, name string) error {
		if err := unix.Mkdirat(dirfd, name, mode); err != nil {
			return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
		}
		return nil
	})
}

func (t *tree) mknod(rel string, mode uint32) error {
	return t.at(rel, func(dirfd int, name string) error {
		if err := unix.Mknodat(dirfd, name, mode, 0); err != nil {
			return &fs.PathError{Op: "mknod", Path: rel, Err: err}
		}
		return nil
	})
}

func (t *tree) symlink(target, rel string) error {
	return t.at(rel, func(dirfd int, name string) error {
		if err := unix.Symlinkat(target, dirfd, name); err != nil {
			return &fs.PathError{Op: "symlink", Path: rel, Err: err}
		}
		return nil
	})
}

// link makes newRel a hard link to oldRel (itself, if a symlink).
func (t *tree) link(oldRel, newRel string) error {
	return t.at(oldRel, func(oldfd int, oldName string) error {
		return t.at(newRel, func(newfd int, newName string) error {
			if err := unix.Linkat(oldfd, oldName, newfd, newName, 0); err != nil {
				return &fs.PathError{Op: "link", Path: newRel, Err: err}
			}
			return nil
		})
	})
}

// chmod sets rel's mode; a symlink (which has none to set) is refused.
func (t *tree) chmod(rel string, mode uint32) error {
	return t.atPath(rel, false, func(p string, _ int, _ *unix.Stat_t) error {
		if err := unix.Chmod(p, mode); err != nil {
			return &fs.PathError{Op: "chmod", Path: rel, Err: err}
		}
		return nil
	})
}

// resolve returns the path that rel reaches: every symlink among its
// directories (and its last component too, if follow) replaced by its
// target. A target that is absolute or climbs above the root is refused
// with CodeEscape; a chain of more than maxHops links with ELOOP. A
// component that does not exist, or is no directory, ends the walk: the
// operation then meets the error itself. rel must be clean (auth.CleanRel).
func (t *tree) resolve(rel string, follow bool) (string, error) {
	if t.plain(rel, follow) {
		return rel, nil
	}
	orig := rel
	for hops := 0; ; {
		done, rest := "", rel
		for rest != "" {
			comp, tail, _ := strings.Cut(rest, "/")
			cur := joinRel(done, comp)
			if tail == "" && !follow {
				return cur, nil
			}
			var st unix.Stat_t
			err := t.at(cur, func(dirfd int, name string) error {
				return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			})
			if err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
				if err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
					return joinRel(cur, tail), nil
				}
				done, rest = cur, tail
				continue
			}
			if hops++; hops > maxHops {
				return "", &wire.Error{Code: wire.CodeLoop, Message: fmt.Sprintf("/%s: more than %d symlinks on the way; refused", orig, maxHops)}
			}
			target, err := t.readlink(cur)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				return "", &wire.Error{Code: wire.CodeEscape, Message: fmt.Sprintf("/%s is a symlink to the absolute path %s, which leads outside the share; refused", cur, target)}
			}
			next := path.Clean(path.Join(done, target, tail))
			if next == ".." || strings.HasPrefix(next, "../") {
				return "", &wire.Error{Code: wire.CodeEscape, Message: fmt.Sprintf("/%s is a symlink to %s, which leads outside the share; refused", cur, target)}
			}
			if next == "." {
				next = ""
			}
			rel = next
			break
		}
		if rest == "" {
			return rel, nil
		}
	}
}

// plain reports whether rel has no symlink to resolve: its parent opens
// without meeting one and, if follow, its last component is none.
func (t *tree) plain(rel string, follow bool) bool {
	if rel == "" {
		return true
	}
	err := t.at(rel, func(dirfd int, name string) error {
		if !follow {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			return syscall.ELOOP
		}
		return nil
	})
	// A parent that does not exist or is no directory is the operation's
	// to report; only a symlink on the way needs the slow walk.
	return err == nil || !isErrno(err, syscall.ELOOP)
}

func isErrno(err error, e syscall.Errno) bool {
	return errors.Is(err, e)
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	if name == "" {
		return dir
	}
	return dir + "/" + name
}
