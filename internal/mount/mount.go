package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// Mount is a mounted namespace.
type Mount struct {
	v      *vfs.FS
	dir    string
	log    *slog.Logger
	server *fuse.Server

	mu    sync.Mutex
	files map[*file]struct{}

	noPassthrough bool

	// opens of regular files, by the mode the kernel serves them in
	ptOpens, directOpens, cachedOpens atomic.Int64
	// FUSE READ requests the agent answered, and their bytes
	reads, readBytes atomic.Int64

	// threads seen reading a direct open in small pieces (see
	// smallReader); cleared when it grows past maxSmallPids
	smallPids map[uint32]bool

	guard *guard
	root  *node
	ids   atomic.Pointer[IDMap] // replaced whole when a login changes it
	// logins: local users may log in (logins.go)
	logins logins
	// lent: other uids may reach the mount (allow_other); the kernel
	// keeps no entries (see entryTimeout)
	lent bool
}

// Opens counts the opens of regular files so far by how their reads are
// served: by the kernel straight from the cache's data file
// (passthrough), by the agent with direct I/O (a large file the agent
// serves, or any file while other opens of it are passthrough), and by
// the agent through the kernel's page cache.
type Opens struct {
	Passthrough int64 `json:"passthrough"`
	Direct      int64 `json:"direct"`
	Cached      int64 `json:"cached"`
	// Reads and ReadBytes count the kernel's READ requests the agent
	// answered and the bytes it sent (a passthrough read sends none).
	Reads     int64 `json:"reads"`
	ReadBytes int64 `json:"read_bytes"`
}

// Sub returns the counts of o since p.
func (o Opens) Sub(p Opens) Opens {
	return Opens{Passthrough: o.Passthrough - p.Passthrough, Direct: o.Direct - p.Direct, Cached: o.Cached - p.Cached,
		Reads: o.Reads - p.Reads, ReadBytes: o.ReadBytes - p.ReadBytes}
}

// Opens returns the open counts (see Opens).
func (m *Mount) Opens() Opens {
	return Opens{Passthrough: m.ptOpens.Load(), Direct: m.directOpens.Load(), Cached: m.cachedOpens.Load(),
		Reads: m.reads.Load(), ReadBytes: m.readBytes.Load()}
}

// Options configure a mount.
type Options struct {
	Log   *slog.Logger
	Debug bool
	// NoPassthrough has every read of a cached file go through the agent
	// (and the kernel's page cache of the FUSE file), never directly to
	// the cache's data file.
	NoPassthrough bool
	// LendTo names the local uids besides the one running the agent that
	// may use the mount, with the agent's principal (see guard.go). With
	// none, only the agent's own uid may.
	LendTo []uint32
	// IDMap shows owners and groups as local ids (idmap.go); nil: the
	// default, which maps only the agent's principal. Principal, Self and
	// SelfGroup are filled in.
	IDMap *IDMap
	// Logins lets each local user log in with their own credential
	// (pando login): a uid logged in is served by its own vfs (see
	// logins.go). The mount is then reachable by other uids, as a lent
	// one is.
	Logins bool
	// NonEmpty mounts over a directory that holds files (hiding them
	// while mounted), as fusermount's nonempty option did.
	NonEmpty bool
}

// Start mounts v at dir. A dead mount left at dir by an agent that died is
// cleaned up first.
func Start(v *vfs.FS, dir string, opts Options) (*Mount, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if err := cleanStale(dir, opts.Log); err != nil {
		return nil, err
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cannot mount on %s: it is not a directory (create it first)", dir)
	}
	if err := mountable(dir, opts.NonEmpty); err != nil {
		return nil, err
	}
	me := uint32(os.Geteuid())
	admit := slices.Sorted(slices.Values(append([]uint32{me}, opts.LendTo...)))
	admit = slices.Compact(admit)
	lent := len(admit) > 1 || opts.Logins
	if lent {
		if why := allowOtherOK(os.Geteuid(), "/etc/fuse.conf"); why != "" {
			return nil, errors.New(strings.Replace(why, "--lend-to lets", "--lend-to and --logins let", 1))
		}
	}
	m := &Mount{v: v, dir: dir, log: opts.Log, files: make(map[*file]struct{}), noPassthrough: opts.NoPassthrough, lent: lent}
	m.guard = &guard{admit: admit, m: m}
	ids := IDMap{Nobody: DefaultNobody, NobodyGroup: DefaultNobody}
	if opts.IDMap != nil {
		ids = *opts.IDMap
	}
	ids.Principal, ids.Self, ids.SelfGroup = v.Principal(), me, uint32(os.Getegid())
	m.ids.Store(&ids)
	m.logins.on, m.logins.base = opts.Logins, ids.Users
	root := &node{m: m}
	m.root = root
	var mountOpts []string
	if lent {
		// Other uids get in: the kernel checks mode bits for every
		// caller before a request reaches the agent.
		mountOpts = append(mountOpts, "default_permissions")
	}
	zero := time.Duration(0)
	fopts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:       "pando",
			Name:         "pando",
			MaxWrite:     1 << 20,
			MaxReadAhead: 8 << 20,
			// Only when lending: otherwise the kernel itself keeps every
			// other uid out, its caches included.
			AllowOther:  lent,
			Options:     mountOpts,
			DirectMount: true,
			Debug:       opts.Debug,
			// The kernel may run many requests at once; the share serves
			// them concurrently.
			MaxBackground: 64,
			// Reads are served from memory (ReadResultData), never from a
			// descriptor that splice could move: without this, go-fuse
			// sets up a pipe for every read before it finds that out, and
			// for a 1 MiB read (more than the default pipe-max-size) fails
			// to grow the pipe and logs it.
			DisableSplice: true,
			// Large files read through the agent are opened for direct
			// I/O (see node.open); with this, programs may still map
			// them shared. With atomic O_TRUNC, an open with O_TRUNC
			// reaches the agent as such (not as a truncate before it),
			// so that the emptying travels with the data written after
			// it (see vfs.truncAtOpen).
			ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_ATOMIC_O_TRUNC,
			// fcntl and flock locks come to the agent, which has the
			// share hold them (see lock.go).
			EnableLocks: true,
		},
		// Each entry carries its own timeouts, from its path's mode.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		RootStableAttr:  &fs.StableAttr{Ino: synthIno("/")},
		// A mode is shown as the share has it: a file made with mode 0
		// is 0, not go-fuse's stand-in 0644.
		NullPermissions: true,
	}
	m.guard.fs = fs.NewNodeFS(root, fopts)
	server, err := fuse.NewServer(m.guard, dir, &fopts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("cannot mount on %s: %w (is fuse3 installed and /dev/fuse usable?)", dir, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("cannot mount on %s: %w (is fuse3 installed and /dev/fuse usable?)", dir, err)
	}
	m.server = server
	closeOnExec()
	if lent {
		m.log.Info("mount lent to local users", "uids", admit)
	}
	raiseReadAhead(dir, opts.Log)
	v.SetNotifier(func(g string, tree bool) { m.forgetKernel(root, g, tree) })
	return m, nil
}

// closeOnExec marks every descriptor of the process close-on-exec.
// go-fuse opens /dev/fuse without it, and a program the process starts
// later (Samba, for the SMB gateway; fusermount3) would hold the mount's
// connection open: a mount whose agent died would hang instead of
// failing. Go opens every other descriptor close-on-exec already.
func closeOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// Refused counts the requests refused because the local user who made
// them may not use the mount (see guard.go).
func (m *Mount) Refused() int64 { return m.guard.refused.Load() }

// KernelLookups counts the lookups and attribute requests the kernel
// sent to the agent: what its entry and attribute caches did not answer.
func (m *Mount) KernelLookups() int64 { return m.guard.lookups.Load() }

// entryTimeout is how long the kernel may keep p's entry (or that p does
// not exist): not at all on a lent mount, as it would answer a path walk
// of any uid from it. Attributes are reached only through an entry or an
// open file, and are kept as the path's mode allows (KernelTimeout).
func (m *Mount) entryTimeout(p string) time.Duration {
	if m.lent {
		return 0
	}
	return m.v.KernelTimeout(p)
}

// Dir is the mount point.
func (m *Mount) Dir() string { return m.dir }

// Wait blocks until the file system is unmounted (by Unmount, or from
// outside with fusermount3 -u or umount).
func (m *Mount) Wait() { m.server.Wait() }

// Unmount unmounts, retrying while the mount point is busy, and lazily at
// the end so that the agent never leaves a dead mount behind.
func (m *Mount) Unmount() error {
	var err error
	for i := 0; i < 20; i++ {
		if !Mounted(m.dir) {
			return nil
		}
		if err = m.server.Unmount(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lerr := syscall.Unmount(m.dir, syscall.MNT_DETACH); lerr == nil {
		return nil
	}
	return fmt.Errorf("cannot unmount %s: %w (close the programs using it)", m.dir, err)
}

// OpenFiles is the number of open file handles (for leak checks).
func (m *Mount) OpenFiles() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.files)
}

func (m *Mount) track(f *file) *file {
	m.mu.Lock()
	m.files[f] = struct{}{}
	m.mu.Unlock()
	return f
}

// flushOpen sends what the open files of n hold unsent.
func (m *Mount) flushOpen(ctx context.Context, n *node) error {
	m.mu.Lock()
	var dirty []*vfs.File
	for f := range m.files {
		if f.n == n && f.h.Dirty() {
			dirty = append(dirty, f.h)
		}
	}
	m.mu.Unlock()
	for _, h := range dirty {
		if err := h.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (m *Mount) untrack(f *file) {
	m.mu.Lock()
	delete(m.files, f)
	m.mu.Unlock()
}

// ino returns the mount's inode number for a path with attributes a.
func (m *Mount) ino(ctx context.Context, p string, a wire.Attr) uint64 {
	if a.Ino == 0 {
		return synthIno(p)
	}
	share, err := m.v.ShareOf(ctx, p)
	if err != nil || share == "" {
		return synthIno(p)
	}
	return inoOf(share, a.Ino)
}

// fail logs unexpected errors and returns the errno for the kernel.
func (m *Mount) fail(op, p string, err error) syscall.Errno {
	e := errno(err)
	if e == syscall.EIO || e == syscall.ETIMEDOUT {
		m.log.Warn("operation failed", "op", op, "path", p, "err", err)
	} else if e != 0 {
		m.log.Debug("operation refused", "op", op, "path", p, "err", err)
	}
	return e
}

// cleanStale unmounts a dead FUSE mount at dir ("transport endpoint is
// not connected"), which an agent that was killed leaves behind.
func cleanStale(dir string, log *slog.Logger) error {
	_, err := os.Stat(dir)
	if err == nil {
		// The kernel may answer a stat from attributes it keeps: an open
		// reaches the agent, or finds none.
		var f *os.File
		if f, err = os.Open(dir); err == nil {
			f.Close()
		}
	}
	if err == nil || !errors.Is(err, syscall.ENOTCONN) {
		return nil
	}
	log.Info("cleaning up the dead mount of an earlier agent", "dir", dir)
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err == nil {
		return nil
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("%s holds the dead mount of an earlier agent and it cannot be removed: %s", dir, out)
	}
	return nil
}

// mountable refuses a mount point that is mounted already (a second mount
// would stack on the first and hide it) or, unless nonEmpty, that holds
// files (the mount would hide them without a word).
func mountable(dir string, nonEmpty bool) error {
	if Mounted(dir) {
		return fmt.Errorf("cannot mount on %s: something is mounted there already (another pando mount?); unmount it first (fusermount3 -u %s), or choose another directory", dir, dir)
	}
	if nonEmpty {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot mount on %s: %w", dir, err)
	}
	defer f.Close()
	names, _ := f.Readdirnames(3)
	if len(names) == 0 {
		return nil
	}
	held := strings.Join(names, ", ")
	if len(names) == 3 {
		held += ", ..."
	}
	return fmt.Errorf("cannot mount on %s: it is not empty (it holds %s); the mount would hide what is there: choose an empty directory, or pass --nonempty", dir, held)
}

// Mounted reports whether dir is a mount point now (per /proc/self/mounts).
func Mounted(dir string) bool {
	for _, m := range mountTable() {
		if m.dir == dir {
			return true
		}
	}
	return false
}

// mounted is a line of the kernel's mount table.
type mounted struct{ dir, fstype, opts string }

// mountTable reads the kernel's mount table (/proc/self/mounts).
func mountTable() []mounted {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var out []mounted
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			out = append(out, mounted{dir: unescapeMount(f[1]), fstype: f[2], opts: f[3]})
		}
	}
	return out
}

// Agent is a pando mount on this host, as the kernel lists it.
type Agent struct {
	Dir   string
	Owner uint32 // the uid that mounted it (user_id=)
}

// Agents lists the pando mounts on this host (FUSE mounts of type
// fuse.pando) with the uid of the process that mounted each, as the
// kernel records it: no other local user can make it say otherwise.
func Agents() []Agent {
	var out []Agent
	for _, m := range mountTable() {
		if m.fstype != "fuse.pando" {
			continue
		}
		for _, o := range strings.Split(m.opts, ",") {
			if v, ok := strings.CutPrefix(o, "user_id="); ok {
				if uid, err := strconv.ParseUint(v, 10, 32); err == nil {
					out = append(out, Agent{Dir: m.dir, Owner: uint32(uid)})
				}
			}
		}
	}
	return out
}

// unescapeMount undoes the octal escapes of /proc/self/mounts ("\040").
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// forgetKernel drops the kernel's cached entry for global path g (a poll
// or a recall said it changed), its attributes and pages, so that the next
// lookup asks the agent again; with tree, those of everything the kernel
// holds under g too. A name the kernel holds no inode for still has its
// entry dropped (it may be a cached "no such file"). It runs on a
// goroutine of the agent's, never inside a request (the kernel takes the
// directory's lock), and what the kernel forgot meanwhile is skipped (or
// answered ENOENT by the kernel, which is ignored).
func (m *Mount) forgetKernel(root *node, g string, tree bool) {
	parts := strings.Split(strings.Trim(g, "/"), "/")
	if len(parts) == 0 || parts[0] == "" {
		if tree {
			forgetUnder(&root.Inode, maxForget)
		}
		return
	}
	dir := &root.Inode
	for _, name := range parts[:len(parts)-1] {
		dir = dir.GetChild(name)
		if dir == nil {
			return // the kernel does not hold it
		}
	}
	name := parts[len(parts)-1]
	if child := dir.GetChild(name); child != nil {
		if tree {
			forgetUnder(child, maxForget)
		}
		_ = child.NotifyContent(0, 0) // its pages and attributes, for open files too
	}
	_ = dir.NotifyEntry(name)
}

// maxForget bounds the inodes forgetUnder tells the kernel about; beyond
// it the entry of the top is dropped, which makes the kernel look up
// everything under it again.
const maxForget = 1 << 20

// forgetUnder drops the kernel's entries, attributes and pages of what it
// holds under dir, deepest first, at most n; it returns how many are left.
func forgetUnder(dir *fs.Inode, n int) int {
	for name, child := range dir.Children() {
		if n <= 0 {
			return 0
		}
		n = forgetUnder(child, n-1)
		_ = child.NotifyContent(0, 0)
		_ = dir.NotifyEntry(name)
	}
	return n
}
