package mount

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Local users: every request the agent serves acts with its principal's
// grid rights, so it serves only the uid that mounted it and the uids the
// administrator lends the mount to (Options.LendTo). guard is the one
// place that decides: it stands between the kernel and the node file
// system, and a request from any other uid that names a file (a lookup,
// an open, a create, a change, an attribute, an extended attribute) is
// answered EACCES there, before it reaches a node, the vfs, the cache or
// a share. What is left through is what only an open descriptor or the
// kernel itself can ask for (reads and writes through a descriptor, its
// locks, closing it, forgetting inodes): a descriptor was opened by an
// admitted uid, which is Unix's rule too (rights are checked at open; the
// descriptor carries them). Two answers are given to anyone, as they say
// nothing about the files: the mount root's attributes (so that ls -ld
// and a walk past the mount point work) and statfs of the root (df).
//
// The kernel's caches are shared by all uids, so a mount that other uids
// can reach (allow_other, only when lending) tells the kernel to keep no
// entries (Mount.entryTimeout): every step of every path walk is a lookup
// that reaches the guard. Attributes and data the kernel caches are
// reached only through an entry or an open file, and the kernel sends
// every open. A mount lent to nobody is mounted without allow_other, and
// the kernel itself refuses every other uid, cached entries included; the
// guard refuses them too.

// guard is the raw file system the kernel talks to (see above). It
// implements fuse.RawFileSystem method by method, without embedding: a
// go-fuse that adds a request does not compile until it is sorted here.
type guard struct {
	fs      fuse.RawFileSystem
	admit   []uint32 // sorted
	refused atomic.Int64
	// lookups counts the lookups and attribute requests the kernel sent
	// (those its entry and attribute caches did not answer).
	lookups atomic.Int64
	m       *Mount

	mu   sync.Mutex
	told map[uint32]bool // uids whose first refusal was logged
}

// maxTold bounds the uids remembered as logged.
const maxTold = 1024

var _ fuse.RawFileSystem = (*guard)(nil)

// enter reports whether the caller of a request may have it served; the
// request counts as under way on the caller's login, if any, until leave
// is called (see logins.go).
func (g *guard) enter(h *fuse.InHeader) (leave func(), ok bool) {
	leave = g.hold(h)
	return leave, g.ok(h)
}

// hold counts a request as under way on its caller's login, if any,
// until the function it returns is called: a login is not closed under
// a request.
func (g *guard) hold(h *fuse.InHeader) func() {
	if g.m == nil {
		return func() {}
	}
	return g.m.hold(h.Uid)
}

// ok reports whether the caller of a request may have it served.
func (g *guard) ok(h *fuse.InHeader) bool {
	if _, found := slices.BinarySearch(g.admit, h.Uid); found {
		return true
	}
	if g.m != nil && g.m.loggedIn(h.Uid) {
		return true // served by its own vfs (logins.go)
	}
	g.refused.Add(1)
	if g.m == nil {
		return false
	}
	g.mu.Lock()
	first := !g.told[h.Uid] && len(g.told) < maxTold
	if first {
		if g.told == nil {
			g.told = make(map[uint32]bool)
		}
		g.told[h.Uid] = true
	}
	g.mu.Unlock()
	if first {
		g.m.log.Warn("refused a local user the mount is not lent to (pando mount --lend-to UID lends it); its later refusals are logged at debug level",
			"uid", h.Uid, "pid", h.Pid, "served", g.admit)
	} else {
		g.m.log.Debug("refused a local user the mount is not lent to", "uid", h.Uid, "pid", h.Pid, "opcode", h.Opcode)
	}
	return false
}

// root reports whether a request names the mount's root.
func root(h *fuse.InHeader) bool { return h.NodeId == fuse.FUSE_ROOT_ID }

func (g *guard) String() string        { return g.fs.String() }
func (g *guard) SetDebug(debug bool)   { g.fs.SetDebug(debug) }
func (g *guard) Init(s *fuse.Server)   { g.fs.Init(s) }
func (g *guard) OnUnmount()            { g.fs.OnUnmount() }
func (g *guard) Forget(node, n uint64) { g.fs.Forget(node, n) }

// Requests that name a file: refused for uids not admitted.

func (g *guard) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	g.lookups.Add(1)
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Lookup(c, h, name, out)
}

func (g *guard) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	g.lookups.Add(1)
	// The root's attributes say nothing; a request through an open file
	// (the kernel asks before reading a descriptor) is the descriptor's.
	defer g.hold(&in.InHeader)()
	if !root(&in.InHeader) && in.Flags()&fuse.FUSE_GETATTR_FH == 0 && !g.ok(&in.InHeader) {
		return fuse.EACCES
	}
	return g.fs.GetAttr(c, in, out)
}

func (g *guard) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	g.lookups.Add(1)
	defer g.hold(&in.InHeader)()
	if !root(&in.InHeader) && in.GetattrFlags&fuse.FUSE_GETATTR_FH == 0 && !g.ok(&in.InHeader) {
		return fuse.EACCES
	}
	return g.fs.Statx(c, in, out)
}

func (g *guard) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer g.hold(h)()
	if !root(h) && !g.ok(h) {
		return fuse.EACCES
	}
	return g.fs.StatFs(c, h, out)
}

func (g *guard) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.SetAttr(c, in, out)
}

func (g *guard) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Access(c, in)
}

func (g *guard) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return nil, fuse.EACCES
	}
	return g.fs.Readlink(c, h)
}

func (g *guard) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Open(c, in, out)
}

func (g *guard) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.OpenDir(c, in, out)
}

func (g *guard) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Create(c, in, name, out)
}

func (g *guard) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Tmpfile(c, in, out)
}

func (g *guard) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Mknod(c, in, name, out)
}

func (g *guard) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Mkdir(c, in, name, out)
}

func (g *guard) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Unlink(c, h, name)
}

func (g *guard) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Rmdir(c, h, name)
}

func (g *guard) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Rename(c, in, oldName, newName)
}

func (g *guard) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Link(c, in, name, out)
}

func (g *guard) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.Symlink(c, h, target, name, out)
}

func (g *guard) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return 0, fuse.EACCES
	}
	return g.fs.GetXAttr(c, h, attr, dest)
}

func (g *guard) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return 0, fuse.EACCES
	}
	return g.fs.ListXAttr(c, h, dest)
}

func (g *guard) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	leave, ok := g.enter(&in.InHeader)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.SetXAttr(c, in, attr, data)
}

func (g *guard) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	leave, ok := g.enter(h)
	defer leave()
	if !ok {
		return fuse.EACCES
	}
	return g.fs.RemoveXAttr(c, h, attr)
}

// Requests through an open descriptor, or from the kernel itself: served
// for whoever holds the descriptor (an admitted uid opened it).

func (g *guard) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	return g.fs.Read(c, in, buf)
}

func (g *guard) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return g.fs.Write(c, in, data)
}

func (g *guard) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	return g.fs.Writev(c, in, data)
}

func (g *guard) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	return g.fs.Lseek(c, in, out)
}

func (g *guard) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	return g.fs.GetLk(c, in, out)
}

func (g *guard) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status { return g.fs.SetLk(c, in) }

func (g *guard) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status { return g.fs.SetLkw(c, in) }

func (g *guard) Release(c <-chan struct{}, in *fuse.ReleaseIn) { g.fs.Release(c, in) }

func (g *guard) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return g.fs.CopyFileRange(c, in)
}

func (g *guard) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	return g.fs.Ioctl(c, in, inbuf, out, outbuf)
}

func (g *guard) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status { return g.fs.Flush(c, in) }

func (g *guard) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status { return g.fs.Fsync(c, in) }

func (g *guard) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return g.fs.Fallocate(c, in)
}

func (g *guard) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return g.fs.ReadDir(c, in, out)
}

func (g *guard) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return g.fs.ReadDirPlus(c, in, out)
}

func (g *guard) ReleaseDir(in *fuse.ReleaseIn) { g.fs.ReleaseDir(in) }

func (g *guard) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return g.fs.FsyncDir(c, in)
}

// ParseLendTo resolves the uids of --lend-to: numbers, or names of local
// users.
func ParseLendTo(list []string) ([]uint32, error) {
	var uids []uint32
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if n, err := strconv.ParseUint(s, 10, 32); err == nil {
			if n == 1<<32-1 {
				return nil, fmt.Errorf("--lend-to: %s is not a uid (it means \"no uid\"); name a local user or a uid", s)
			}
			uids = append(uids, uint32(n))
			continue
		}
		u, err := user.Lookup(s)
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("--lend-to: there is no local user named %q; give a user name or a numeric uid", s)
		} else if err != nil {
			return nil, fmt.Errorf("--lend-to: cannot look up the local user %q: %w", s, err)
		}
		n, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--lend-to: user %q has uid %q, which is not a number", s, u.Uid)
		}
		uids = append(uids, uint32(n))
	}
	slices.Sort(uids)
	return slices.Compact(uids), nil
}

// allowOtherOK reports why a mount lent to other uids cannot be made by
// a process of uid euid, or "" if it can: FUSE lets a user who is not
// root mount with allow_other only when its configuration (conf,
// /etc/fuse.conf) says user_allow_other.
func allowOtherOK(euid int, conf string) string {
	if euid == 0 {
		return ""
	}
	b, _ := os.ReadFile(conf)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "user_allow_other" {
			return ""
		}
	}
	return "--lend-to lets other local users into the mount, which FUSE allows a user other than root only when /etc/fuse.conf has the line user_allow_other: add it, or mount as root"
}
