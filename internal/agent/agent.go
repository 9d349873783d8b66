// Package agent runs the FUSE agent: one client (and one per linked
// domain, under the federation.Router the vfs holds), one block cache,
// one vfs and its mount, plus a control socket in the cache directory through
// which `pando stats` and `pando cache` talk to the running agent, and,
// with --logins, a login socket through which local users hand it their
// credentials (`pando login`). Client is the other end of both sockets,
// and trusts a login socket only if the uid that mounted the file system
// serves it.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/federation"
	"pando.dev/pando/internal/metricsrv"
	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/procs"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/vfs"
)

// Config configures an agent.
type Config struct {
	Client *config.Config
	// CertRenewed keeps the certificate the agent's client renews (see
	// client.Options.CertRenewed).
	CertRenewed func(cert, key []byte)
	MountPoint  string
	Cache       cache.Options
	VFS         vfs.Options
	Log         *slog.Logger
	Debug       bool
	// Streams is the number of data channels per share (default 2).
	Streams int
	// NoPassthrough: see mount.Options.
	NoPassthrough bool
	// LendTo, NonEmpty: see mount.Options.
	LendTo   []uint32
	NonEmpty bool
	// IDMap: see mount.Options.
	IDMap *mount.IDMap
	// Logins: local users may log in with their own credential (pando
	// login; see login.go).
	Logins bool
	// WrapData, if set, wraps the data path the mount's vfs reads and
	// writes files through (the router over the agent's client): a
	// decorator of remote.Data, e.g. one that counts or fails reads.
	WrapData func(remote.Data) remote.Data
}

// Agent is a running agent.
type Agent struct {
	cfg        Config
	cl         *client.Client
	rt         *federation.Router // the vfs's namespace: cl, and the linked domains' clients
	cache      *cache.Cache
	v          *vfs.FS
	m          *mount.Mount
	ctl        *http.Server
	ctlLn      net.Listener
	metricsSrv *metricsrv.Server
	start      time.Time
	closeOnce  sync.Once
	// replayDone is closed when the retry of unsent data has stopped.
	replayDone chan struct{}
	logins     loginState
}

// SocketName is the control socket's name in the cache directory.
const SocketName = "agent.sock"

// DefaultCacheDir is where an agent keeps its cache unless told otherwise.
func DefaultCacheDir() string {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "pando", "agent")
}

// Start mounts the namespace.
func Start(cfg Config) (*Agent, error) {
	procs.Set() // spare Ps for the system calls that block (see procs)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Cache.Log = cfg.Log
	var sid [12]byte
	_, _ = rand.Read(sid[:])
	copts := client.Options{Streams: cfg.Streams, Session: hex.EncodeToString(sid[:]), EarlyData: true, KeepFresh: true, Log: cfg.Log, CertRenewed: cfg.CertRenewed}
	cl, err := client.New(cfg.Client, copts)
	if err != nil {
		return nil, err
	}
	ch, err := cache.Open(cfg.Cache)
	if err != nil {
		cl.Close()
		return nil, err
	}
	a := &Agent{cfg: cfg, cl: cl, rt: federation.ForClient(cl, copts), cache: ch, start: time.Now()}
	if cfg.VFS.Log == nil {
		cfg.VFS.Log = cfg.Log
	}
	var data remote.Data = a.rt
	if cfg.WrapData != nil {
		data = cfg.WrapData(data)
	}
	a.v = vfs.New(a.rt, data, ch, cfg.VFS)
	// Consistency sessions first, so that the mount's first answers stay
	// good; a share that does not answer soon is not waited for.
	cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	a.v.Connect(cctx)
	cancel()
	a.m, err = mount.Start(a.v, cfg.MountPoint, mount.Options{Log: cfg.Log, Debug: cfg.Debug, NoPassthrough: cfg.NoPassthrough, LendTo: cfg.LendTo, IDMap: cfg.IDMap, NonEmpty: cfg.NonEmpty, Logins: cfg.Logins})
	if err != nil {
		ch.Close()
		a.rt.Close()
		cl.Close()
		return nil, err
	}
	if err := a.serveControl(); err != nil {
		cfg.Log.Warn("no control socket; pando stats will not reach this agent", "err", err)
	}
	if cfg.Logins {
		if err := a.serveLogins(); err != nil {
			a.m.Unmount()
			ch.Close()
			a.rt.Close()
			cl.Close()
			return nil, fmt.Errorf("the login socket (--logins): %w", err)
		}
	}
	// Data left unsent by an earlier run (or by closes that fail later)
	// is sent, or kept beside a file that changed meanwhile, and retried
	// while its share cannot be reached.
	a.replayDone = make(chan struct{})
	go func() {
		defer close(a.replayDone)
		a.v.RetryUnsent(cfg.Log)
	}()
	return a, nil
}

// Mount is the FUSE mount.
func (a *Agent) Mount() *mount.Mount { return a.m }

// FS is the agent's file system.
func (a *Agent) FS() *vfs.FS { return a.v }

// Client is the client the agent opened for its file system (RPC counts,
// calls to the domain besides the file system): the home domain's, under
// the router that the vfs holds.
func (a *Agent) Client() *client.Client { return a.cl }

// Cache is the agent's block cache.
func (a *Agent) Cache() *cache.Cache { return a.cache }

// Wait blocks until the mount is gone.
func (a *Agent) Wait() { a.m.Wait() }

// Close unmounts and releases everything.
func (a *Agent) Close() error {
	var err error
	a.closeOnce.Do(func() {
		err = a.m.Unmount()
		a.m.Wait()
		a.closeLogins()
		if ferr := a.v.FlushDelegs(); ferr != nil {
			a.cfg.Log.Warn("data kept back under write delegations could not all be sent; it stays in the cache and is sent at the next start", "err", ferr)
		}
		a.v.Close()
		<-a.replayDone
		if a.metricsSrv != nil {
			a.metricsSrv.Close()
		}
		if a.ctl != nil {
			a.ctl.Close()
			os.Remove(filepath.Join(a.cfg.Cache.Dir, SocketName))
		}
		if cerr := a.cache.Close(); err == nil {
			err = cerr
		}
		a.rt.Close()
		a.cl.Close()
	})
	return err
}

// Stats is what `pando stats` shows.
type Stats struct {
	MountPoint  string            `json:"mount_point"`
	Consistency string            `json:"consistency"`
	WriteMode   string            `json:"write_mode"`
	Uptime      string            `json:"uptime"`
	RPCs        map[string]uint64 `json:"rpcs"`
	// Staleness is, per share under poll, the age of the share's last
	// confirmation of this agent's cache: how stale answers may be.
	Staleness map[string]string `json:"staleness,omitempty"`
	// Shares is the reachability of each share used: up or down, since
	// when, why, and (down) whether cached data is served stale.
	Shares []vfs.ShareState `json:"shares,omitempty"`
	// Offline is what the mount does with cached data while a share is
	// down: serve or fail.
	Offline string `json:"offline"`
	// Delegations counts write delegations (write mode back).
	Delegations *vfs.DelegStats `json:"delegations,omitempty"`
	Cache       cache.Stats     `json:"cache"`
	OpenFiles   int             `json:"open_files"`
	// Opens counts opens of regular files by how their reads are served.
	Opens mount.Opens `json:"opens"`
	// RefusedLocal counts requests refused because the local user who
	// made them may not use the mount (pando mount --lend-to).
	RefusedLocal int64 `json:"refused_local_users"`
	// KernelLookups counts the lookups and attribute requests the kernel
	// sent to the agent (those its own caches did not answer).
	KernelLookups int64 `json:"kernel_lookups"`
	// Logins lists the local users logged in (pando mount --logins).
	Logins []Login `json:"logins,omitempty"`
	// Unsent counts files with data not yet at their share that no open
	// file holds (a write delegation keeps it back, or it is retried, or
	// kept after a conflict: see Conflicts).
	Unsent int `json:"unsent"`
	// UnsentFiles lists them (with data kept back under a write
	// delegation), each with the last failure to send it: its cause
	// (ENOSPC: the share's disk is full), when, and the attempts.
	UnsentFiles []vfs.UnsentFile `json:"unsent_files,omitempty"`
	// MaxUnsent is the most unsent data writes may leave in the cache
	// while their share cannot be reached (--max-unsent).
	MaxUnsent int64 `json:"max_unsent"`
	// Conflicts counts files that changed at their share while this agent
	// held unsent data for them; ConflictList says where each local
	// version was kept.
	Conflicts    int            `json:"conflicts"`
	ConflictList []vfs.Conflict `json:"conflict_list,omitempty"`
	// Refused counts files whose written data the share refused for good
	// (rights, quota...): dropped from the cache, never sent again.
	Refused uint64 `json:"refused"`
	// Controller says whether the controller answers, and how old the
	// mount table and tokens the agent holds are (it works on them while
	// the controller is away, until the tokens expire).
	Controller client.ControllerStatus `json:"controller"`
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	o := a.v.Options()
	stale := make(map[string]string)
	for share, d := range a.v.Staleness() {
		if d < 0 {
			stale[share] = "not yet polled"
		} else {
			stale[share] = d.Round(time.Millisecond).String()
		}
	}
	var dl *vfs.DelegStats
	if o.Write == vfs.WriteBack {
		d := a.v.Delegations()
		dl = &d
	}
	conflicts := a.v.Conflicts()
	unsent := a.v.UnsentFiles()
	return Stats{Staleness: stale, Shares: a.v.Shares(), Offline: o.Offline.String(), Delegations: dl, MountPoint: a.cfg.MountPoint, Consistency: o.Consistency.String(), WriteMode: o.Write.String(),
		Uptime: time.Since(a.start).Round(time.Second).String(), RPCs: a.rt.Counts(), Cache: a.cache.Stats(),
		OpenFiles: a.m.OpenFiles(), Opens: a.m.Opens(), Unsent: len(unsent), UnsentFiles: unsent, MaxUnsent: a.v.MaxUnsent(), Conflicts: len(conflicts), ConflictList: conflicts,
		Refused: a.v.Refusals(), RefusedLocal: a.m.Refused(), KernelLookups: a.m.KernelLookups(), Logins: a.Logins(), Controller: a.cl.ControllerStatus()}
}

func (a *Agent) serveControl() error {
	sock := filepath.Join(a.cfg.Cache.Dir, SocketName)
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	os.Chmod(sock, 0o600)
	a.ctl = &http.Server{Handler: a.controlHandler(a.metricsHandler()), ReadHeaderTimeout: 5 * time.Second}
	a.ctlLn = ln
	go a.ctl.Serve(ln)
	return nil
}

// controlHandler answers on the control socket (Client's calls), with
// metrics for /metrics.
func (a *Agent) controlHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.Stats()) })
	mux.HandleFunc("GET /cache", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.cache.List()) })
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("POST /cache/drop", func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		n, err := a.drop(r.Context(), p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]int{"dropped": n})
	})
	return mux
}

// metricsHandler serves the agent's figures in the Prometheus format.
func (a *Agent) metricsHandler() http.Handler { return metricsrv.Handler(collector{a}) }

// ServeMetrics serves /metrics on addr (for a Prometheus server to scrape)
// until the agent closes.
func (a *Agent) ServeMetrics(addr string) (net.Addr, error) {
	srv, err := metricsrv.Serve(addr, a.metricsHandler())
	if err != nil {
		return nil, err
	}
	a.metricsSrv = srv
	return srv.Addr(), nil
}

// drop forgets the cached data of every file at or below p that has no
// unsent data.
func (a *Agent) drop(ctx context.Context, p string) (int, error) {
	g, err := client.Clean(p)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range a.cache.List() {
		if e.Name == g || len(e.Name) > len(g) && e.Name[:len(g)] == g && (g == "/" || e.Name[len(g)] == '/') {
			if e.Dirty {
				return n, fmt.Errorf("%s holds data not yet written to its share; close it first", e.Name)
			}
			a.cache.Drop(e.Key)
			n++
		}
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
