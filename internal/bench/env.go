// Package bench reproduces the seeds' experiments on one machine: it
// starts a controller, shares (optionally behind the WAN emulator) and
// agents in a temporary folder, runs a scenario, and reports every figure
// beside its reference measured in the same run (local disk, the raw
// link), as a table, JSON and plots.
package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/share"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// Env is a domain started for one scenario.
type Env struct {
	Dir    string
	Domain string
	ctrl   *controller.Controller
	Admin  *config.Config
	closes []func()
}

// NewEnv starts a controller of domain "bench" in a new temporary folder.
func NewEnv(ctx context.Context) (*Env, error) { return NewEnvIn(ctx, "") }

// NewEnvIn is NewEnv with the folder below base (e.g. /dev/shm, to keep
// everything in memory).
func NewEnvIn(ctx context.Context, base string) (*Env, error) {
	return NewDomainEnv(ctx, base, "bench")
}

// NewDomainEnv is NewEnvIn for a domain of another name (two linked
// domains, say).
func NewDomainEnv(ctx context.Context, base, domain string) (*Env, error) {
	dir, err := os.MkdirTemp(base, "pando-bench-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, Domain: domain}
	e.closes = append(e.closes, func() { os.RemoveAll(dir) })
	c, err := controller.Start(ctx, controller.Config{StateDir: filepath.Join(dir, "controller"), Domain: e.Domain, Listen: "127.0.0.1:0"})
	if err != nil {
		e.Close()
		return nil, err
	}
	e.ctrl = c
	e.closes = append(e.closes, func() { e.ctrl.Close() }) // the one running then (see faultsController)
	if e.Admin, err = config.Load(c.AdminBundlePath()); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close stops everything the environment started, newest first.
func (e *Env) Close() {
	for i := len(e.closes) - 1; i >= 0; i-- {
		e.closes[i]()
	}
	e.closes = nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// AddShare exports a new directory as share name at /bench/<name>; with a
// link, clients reach it through a WAN emulator (returned too).
func (e *Env) AddShare(ctx context.Context, name string, link *wan.Config) (string, *wan.Proxy, error) {
	root := filepath.Join(e.Dir, "export-"+name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", nil, err
	}
	listen, advertise := "127.0.0.1:0", ""
	var px *wan.Proxy
	if link != nil {
		var err error
		if listen, err = freeAddr(); err != nil {
			return "", nil, err
		}
		if px, err = wan.Listen("127.0.0.1:0", listen, *link); err != nil {
			return "", nil, err
		}
		e.closes = append(e.closes, func() { px.Close() })
		advertise = px.Addr()
	}
	s, err := share.Start(ctx, share.RunConfig{Name: name, Root: root, Listen: listen, Advertise: advertise,
		StateDir: filepath.Join(e.Dir, "shares"), Credentials: e.Admin, Protection: []string{"private", "safe", "clear"}})
	if err != nil {
		return "", nil, err
	}
	e.closes = append(e.closes, func() { s.Close() })
	c, err := client.New(e.Admin, client.Options{})
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	if err := c.Admin().MountAdd(ctx, "/"+e.Domain+"/"+name, name, ""); err != nil {
		return "", nil, err
	}
	return root, px, nil
}

// Agent is a mounted agent; Path maps a global path to the mount.
type Agent struct {
	*agent.Agent
	dir     string // the mount point
	home    string // its mount point's and cache's directory
	opts    vfs.Options
	streams int
}

// Path returns the local path of a global path under the mount.
func (a *Agent) Path(g string) string { return filepath.Join(a.dir, filepath.FromSlash(g)) }

// Mount starts an agent with its own cache and mount point.
func (e *Env) Mount(opts vfs.Options, streams int) (*Agent, error) {
	dir, err := os.MkdirTemp(e.Dir, "agent-")
	if err != nil {
		return nil, err
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	return e.mountIn(dir, opts, streams)
}

// Restart stops a and starts an agent again on its cache and mount point,
// with the same options: what a restarted `pando mount` finds.
func (e *Env) Restart(a *Agent) (*Agent, error) {
	a.Unmount()
	return e.mountIn(a.home, a.opts, a.streams)
}

func (e *Env) mountIn(dir string, opts vfs.Options, streams int) (*Agent, error) {
	mnt := filepath.Join(dir, "mnt")
	a, err := agent.Start(agent.Config{Client: e.Admin, MountPoint: mnt, VFS: opts, Streams: streams,
		Cache: cache.Options{Dir: filepath.Join(dir, "cache"), DiskBytes: 4 << 30}})
	if err != nil {
		return nil, err
	}
	once := false
	closeFn := func() {
		if !once {
			once = true
			a.Close()
		}
	}
	e.closes = append(e.closes, closeFn)
	return &Agent{Agent: a, dir: mnt, home: dir, opts: opts, streams: streams}, nil
}

// Unmount stops an agent early (its close in Env.Close is then a no-op).
func (a *Agent) Unmount() { a.Agent.Close() }

// dropCache evicts a file from the kernel's page cache, so that the next
// read comes from the disk.
func dropCache(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	f.Sync()
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// timeRead reads a whole file and returns the time it took.
func timeRead(path string) (time.Duration, int64, error) {
	t0 := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	return time.Since(t0), n, nil
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e6 }

func sizeName(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// freshPages touches n bytes of new memory and frees them again, so that
// the copy timed next finds recently freed pages. On a virtual machine
// that reports free memory to its host (free page reporting), a page the
// host has taken back costs a fault on the host when the guest touches it
// again, and a copy that allocates 1 GiB of page cache ran between 300
// and 1,700 MB/s depending on how long ago memory was last freed, whatever
// the tool. Each tool is timed after the same call.
func freshPages(n int64) {
	m, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return
	}
	_ = unix.Munmap(m)
}
