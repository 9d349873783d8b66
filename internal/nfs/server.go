// Package nfs serves the namespace over NFSv3 (go-nfs, over the vfs as the
// mount is): each export is a global path served with the rights of one
// principal named for it, to clients of listed networks only.
//
// NFSv3's AUTH_SYS credentials are numbers the client fills in as it
// likes: they prove nothing, so the gateway ignores them. Whoever can
// reach an export from an allowed network acts as its principal.
package nfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	billy "github.com/go-git/go-billy/v5"
	gonfs "github.com/willscott/go-nfs"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// Users gives the vfs of a principal, as the gateway does for its other
// front ends: every request of it carries that principal's rights.
type Users interface {
	Acquire(ctx context.Context, user string) (*vfs.FS, error)
	Release(user string)
}

// Export is one export: clients mount Path (a global path, "/" for the
// whole namespace) and every request is made as Principal.
type Export struct {
	Path      string
	Principal string
}

// Counters count an NFS front end's work.
type Counters struct {
	Requests, Refused, BadRecords, ConnsRefused atomic.Int64
	BytesRead, BytesWritten                     atomic.Int64
}

// Config configures a Server.
type Config struct {
	Exports []Export
	// Allow lists the client networks served; connections from
	// elsewhere are closed at accept.
	Allow []netip.Prefix
	// HandleFile keeps the handles of long paths across restarts (see
	// handles.go); empty: in memory.
	HandleFile string
	Log        *slog.Logger
}

// Server is an NFSv3 front end.
type Server struct {
	users   Users
	exports map[string]*exportFS // by path
	byID    map[uint32]*exportFS
	allow   []netip.Prefix
	handles *handleTable
	c       *Counters
	log     *slog.Logger

	mu    sync.Mutex
	lns   []net.Listener
	conns map[net.Conn]struct{}
	quit  chan struct{}
	done  chan struct{}
}

var quietOnce sync.Once

// ParseExport reads NAME=PRINCIPAL: NAME the global path clients mount.
func ParseExport(s string) (Export, error) {
	p, user, ok := strings.Cut(s, "=")
	if !ok || user == "" {
		return Export{}, fmt.Errorf("export %q: give PATH=PRINCIPAL, e.g. /uva/data=alice", s)
	}
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsAny(p, "\x00\\") {
		return Export{}, fmt.Errorf("export %q: the path must be a clean global path beginning with / (e.g. /uva/data)", s)
	}
	return Export{Path: p, Principal: user}, nil
}

// ParseAllow reads a client network: a CIDR or one address.
func ParseAllow(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--allow %q: give a network (10.0.0.0/8) or an address (192.0.2.7)", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// New makes an NFS front end over users.
func New(users Users, cfg Config, c *Counters) (*Server, error) {
	if len(cfg.Exports) == 0 {
		return nil, errors.New("no export: give at least one --export PATH=PRINCIPAL")
	}
	if len(cfg.Allow) == 0 {
		return nil, errors.New("no client network: give --allow CIDR (e.g. 10.0.0.0/8 or 127.0.0.1/32); NFS clients are not authenticated, so the networks served must be listed")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if c == nil {
		c = new(Counters)
	}
	quietOnce.Do(func() { gonfs.Log.SetLevel(gonfs.PanicLevel) })
	registerExport()
	s := &Server{users: users, exports: make(map[string]*exportFS), byID: make(map[uint32]*exportFS), allow: cfg.Allow,
		c: c, log: cfg.Log, conns: make(map[net.Conn]struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	for _, ex := range cfg.Exports {
		if s.exports[ex.Path] != nil {
			return nil, fmt.Errorf("export %s is given twice", ex.Path)
		}
		e := &exportFS{srv: s, name: ex.Path, user: ex.Principal, id: exportID(ex.Path)}
		if s.byID[e.id] != nil {
			return nil, fmt.Errorf("exports %s and %s cannot both be served (their handles would meet); rename one", ex.Path, s.byID[e.id].name)
		}
		e.files = newOpenFiles(e)
		s.exports[ex.Path], s.byID[e.id] = e, e
	}
	var err error
	if s.handles, err = openHandleTable(cfg.HandleFile); err != nil {
		return nil, err
	}
	go s.reaper()
	return s, nil
}

// Exports lists the exports, by path.
func (s *Server) Exports() []Export {
	var out []Export
	for _, e := range s.exports {
		out = append(out, Export{Path: e.name, Principal: e.user})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func (s *Server) reaper() {
	defer close(s.done)
	t := time.NewTicker(flushIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case now := <-t.C:
			for _, e := range s.exports {
				e.files.reap(now)
			}
		}
	}
}

// Serve serves NFSv3 and its MOUNT protocol on ln (one port for both, as
// clients that skip the portmapper expect) until ln is closed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	srv := &gonfs.Server{Handler: handler{s}, Context: context.Background()}
	return srv.Serve(&guardListener{Listener: ln, s: s})
}

// Close stops serving and sends what the exports' open handles hold.
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.quit:
		s.mu.Unlock()
		return
	default:
		close(s.quit)
	}
	lns := s.lns
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	<-s.done
	for _, e := range s.exports {
		e.files.closeAll()
	}
	s.handles.close()
}

func (s *Server) allowed(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range s.allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// handler is go-nfs's Handler.
type handler struct{ s *Server }

// Mount mounts an export, or a directory below one (libnfs's tools
// mount the directory of the file they are given).
func (h handler) Mount(ctx context.Context, c net.Conn, req gonfs.MountRequest) (gonfs.MountStatus, billy.Filesystem, []gonfs.AuthFlavor) {
	p := string(req.Dirpath)
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	var e *exportFS
	for name, ex := range h.s.exports {
		if (p == name || name == "/" && strings.HasPrefix(p, "/") || strings.HasPrefix(p, name+"/")) && (e == nil || len(name) > len(e.name)) {
			e = ex
		}
	}
	if e == nil {
		h.s.log.Info("nfs: a mount of a path not exported refused", "client", c.RemoteAddr().String(), "path", fmt.Sprintf("%.200q", p))
		return gonfs.MountStatusErrNoEnt, nil, nil
	}
	var ns []string
	if rest := strings.TrimPrefix(strings.TrimPrefix(p, e.name), "/"); rest != "" {
		ns = strings.Split(rest, "/")
		fi, err := e.Lstat(strings.Join(ns, sep))
		if err != nil {
			h.s.log.Info("nfs: a mount refused", "client", c.RemoteAddr().String(), "path", fmt.Sprintf("%.200q", p), "err", err)
		}
		switch {
		case err != nil && errors.Is(err, os.ErrPermission):
			return gonfs.MountStatusErrAcces, nil, nil
		case err != nil:
			return gonfs.MountStatusErrNoEnt, nil, nil
		case !fi.IsDir():
			return gonfs.MountStatusErrNotDir, nil, nil
		}
	}
	h.s.log.Debug("nfs: mounted", "client", c.RemoteAddr().String(), "export", e.name, "path", p, "as", e.user)
	return gonfs.MountStatusOk, &subFS{exportFS: e, prefix: ns}, []gonfs.AuthFlavor{gonfs.AuthFlavorNull, gonfs.AuthFlavorUnix}
}

// subFS is a directory below an export, as a mount gives it: go-nfs
// makes its root's handle from it; every handle names its path from the
// export's root.
type subFS struct {
	*exportFS
	prefix []string
}

func (h handler) Change(fs billy.Filesystem) billy.Change {
	if e, ok := fs.(*exportFS); ok {
		return e
	}
	return nil
}

func (h handler) FSStat(ctx context.Context, fs billy.Filesystem, st *gonfs.FSStat) error {
	e, ok := fs.(*exportFS)
	if !ok {
		return nil
	}
	return e.do("statfs", "", func(ctx context.Context, v *vfs.FS, g string) error {
		r, err := v.StatFS(ctx, g)
		if err != nil || r.Bsize == 0 {
			return nil // go-nfs's defaults stand (the root "/" has no share)
		}
		bs := uint64(r.Bsize)
		st.TotalSize, st.FreeSize, st.AvailableSize = r.Blocks*bs, r.Bfree*bs, r.Bavail*bs
		st.TotalFiles, st.FreeFiles, st.AvailableFiles = r.Files, r.Ffree, r.Ffree
		return nil
	})
}

func (h handler) ToHandle(fs billy.Filesystem, p []string) []byte {
	switch e := fs.(type) {
	case *exportFS:
		return h.s.handles.handle(e, p)
	case *subFS:
		return h.s.handles.handle(e.exportFS, append(append([]string(nil), e.prefix...), p...))
	}
	return nil
}

func (h handler) FromHandle(fh []byte) (billy.Filesystem, []string, error) {
	e, ns, err := h.s.resolve(fh)
	if err != nil {
		return nil, nil, err
	}
	return e, ns, nil
}

// InvalidateHandle: handles name paths; nothing is kept per handle.
func (h handler) InvalidateHandle(billy.Filesystem, []byte) error { return nil }

// HandleLimit bounds, in go-nfs, the entries of one READDIR reply (half
// of it): handles themselves are not kept, so it is only that bound.
func (h handler) HandleLimit() int { return 1 << 20 }

// Check looks at each export's root as its principal: an export the
// principal cannot see (no such path, a principal the domain does not
// have, or no right to look) is a mistake of the command line, reported
// before anything is served. A share that cannot be reached now is only
// logged: it may come back.
func (s *Server) Check(ctx context.Context) error {
	for _, ex := range s.Exports() {
		v, err := s.users.Acquire(ctx, ex.Principal)
		if err != nil {
			return fmt.Errorf("export %s as %s: %w", ex.Path, ex.Principal, err)
		}
		a, err := v.GetAttr(ctx, ex.Path)
		s.users.Release(ex.Principal)
		switch en := vfs.Errno(err); {
		case err == nil && a.Mode&syscall.S_IFMT != syscall.S_IFDIR:
			return fmt.Errorf("export %s: not a directory", ex.Path)
		case en == syscall.ENOENT || en == syscall.ENOTDIR:
			return fmt.Errorf("export %s: no such directory (as %s): %w", ex.Path, ex.Principal, err)
		case en == syscall.EACCES || en == syscall.EPERM || notRegistered(err):
			return fmt.Errorf("export %s as %s: %w", ex.Path, ex.Principal, err)
		case err != nil:
			s.log.Warn("nfs: an export cannot be looked at now; it is served anyway", "export", ex.Path, "as", ex.Principal, "err", err)
		}
	}
	return nil
}

// notRegistered: the controller knows no such principal.
func notRegistered(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeNotRegistered
}
