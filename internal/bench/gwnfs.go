package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	gonfs "github.com/willscott/go-nfs"
	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	nfshelpers "github.com/willscott/go-nfs/helpers"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/gateway"
	"pando.dev/pando/internal/nfs"
)

// nfsDoor reads and writes through an NFSv3 server with go-nfs-client,
// 1 MiB per READ (a Linux client's largest rsize), one call at a time.
type nfsDoor struct {
	v           *nfsc.Target
	description string
}

// mountNFS mounts dir of the NFS server at addr (MOUNT and NFS on that
// port), closed with e.
func mountNFS(e *Env, addr, dir string) (*nfsc.Target, error) {
	// go-nfs-client binds a random local port and tries again only for
	// privileged ones: one in use fails the dial.
	c, err := rpc.DialTCP("tcp", addr, false)
	for i := 0; err != nil && errors.Is(err, syscall.EADDRINUSE) && i < 20; i++ {
		c, err = rpc.DialTCP("tcp", addr, false)
	}
	if err != nil {
		return nil, err
	}
	e.closes = append(e.closes, func() { c.Close() })
	return (&nfsc.Mount{Client: c}).Mount(dir, rpc.AuthNull)
}

// startNFSDoor starts a gateway of its own serving /bench/data over NFS
// as the administrator, to 127.0.0.1.
func startNFSDoor(ctx context.Context, e *Env) (*nfsDoor, error) {
	creds, err := gatewayCreds(ctx, e, "bench-nfs")
	if err != nil {
		return nil, err
	}
	g, err := gateway.New(gateway.Config{Client: creds, Cache: cache.Options{Dir: filepath.Join(e.Dir, "gateway-nfs"), DiskBytes: 4 << 30, MemoryBytes: 256 << 20}})
	if err != nil {
		return nil, err
	}
	e.closes = append(e.closes, g.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.closes = append(e.closes, func() { ln.Close() })
	if _, err := g.StartNFS(ln, nfs.Config{Exports: []nfs.Export{{Path: "/" + e.Domain + "/data", Principal: e.Admin.User}},
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}); err != nil {
		return nil, err
	}
	v, err := mountNFS(e, ln.Addr().String(), "/"+e.Domain+"/data")
	if err != nil {
		return nil, err
	}
	return &nfsDoor{v: v, description: "nfs"}, nil
}

func (d *nfsDoor) timeRead(name string, size int64) (float64, error) {
	t0 := time.Now()
	f, err := d.v.Open(name)
	if err != nil {
		return 0, fmt.Errorf("opening %s through %s: %w", name, d.description, err)
	}
	buf := make([]byte, 1<<20)
	var n int64
	for n < size {
		k, err := f.ReadAt(buf, n)
		n += int64(k)
		if k == 0 || (err != nil && n < size) {
			return 0, fmt.Errorf("reading %s through %s: %d bytes of %d: %v", name, d.description, n, size, err)
		}
	}
	return mbps(size, time.Since(t0)), nil
}

// writeSmall writes n files of body into dir, one after the other.
func (d *nfsDoor) writeSmall(dir string, n int, body []byte) (float64, error) {
	t0 := time.Now()
	for i := range n {
		f, err := d.v.OpenFile(fmt.Sprintf("%s/f%05d", dir, i), 0o644)
		if err != nil {
			return 0, fmt.Errorf("creating through %s: %w", d.description, err)
		}
		if _, err := f.Write(body); err != nil {
			return 0, fmt.Errorf("writing through %s: %w", d.description, err)
		}
		if err := f.Close(); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// goNFSOver serves dir with go-nfs itself over the local file system
// (go-billy's osfs, go-nfs's handle cache): what rclone serve nfs is
// made of, without rclone's own VFS, as the reference where rclone has
// no serve nfs.
func goNFSOver(e *Env, dir string) (*nfsDoor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.closes = append(e.closes, func() { ln.Close() })
	h := nfshelpers.NewCachingHandler(nfshelpers.NewNullAuthHandler(osfs.New(dir)), 1<<20)
	go gonfs.Serve(ln, h)
	v, err := mountNFS(e, ln.Addr().String(), "/")
	if err != nil {
		return nil, err
	}
	return &nfsDoor{v: v, description: "go-nfs over the mount"}, nil
}

// rcloneNFS starts rclone serve nfs over dir if this rclone has it (it
// came in rclone 1.65; Debian 12 has 1.60, without it).
func rcloneNFS(e *Env, dir string) (*nfsDoor, error) {
	if _, err := exec.LookPath("rclone"); err != nil {
		return nil, nil
	}
	// (An rclone without it answers "serve nfs --help" with serve's help.)
	out, _ := exec.Command("rclone", "serve", "--help").Output()
	if !regexp.MustCompile(`(?m)^\s+nfs\s`).Match(out) {
		return nil, nil
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("rclone", "serve", "nfs", "--addr", addr, dir)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e.closes = append(e.closes, func() { cmd.Process.Kill(); cmd.Wait() })
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
	}
	v, err := mountNFS(e, addr, "/")
	if err != nil {
		return nil, err
	}
	return &nfsDoor{v: v, description: "rclone serve nfs"}, nil
}

// benchNFS reads the large file cold and warm and writes the small files
// through the NFS gateway, with go-nfs-client, beside rclone serve nfs
// over the mount's directory dir when rclone has it.
func benchNFS(ctx context.Context, o Options, e *Env, dir string, size int64, nsmall int, mountCold time.Duration, mountWarm float64,
	row func(c, m string, v float64, unit, ref string, rv float64)) error {
	o.say("gateways: nfs")
	d, err := startNFSDoor(ctx, e)
	if err != nil {
		return err
	}
	cold, err := d.timeRead("big", size)
	if err != nil {
		return err
	}
	if _, err := d.timeRead("big", size); err != nil {
		return err
	}
	warm, err := d.timeRead("big", size)
	if err != nil {
		return err
	}
	row("nfs", "cold read "+sizeName(size), cold, "MB/s", "mount, cold", mbps(size, mountCold))
	row("nfs", "warm read "+sizeName(size), warm, "MB/s", "mount, warm", mountWarm)
	what := "rclone serve nfs (over the mount), warm"
	ref, err := rcloneNFS(e, dir)
	if err == nil && ref == nil {
		o.say("gateways: no rclone serve nfs here (it came in rclone 1.65; Debian 12 has 1.60): go-nfs over the mount is the reference")
		what = "go-nfs (rclone's) over the mount, warm"
		ref, err = goNFSOver(e, dir)
	}
	if err != nil {
		return err
	}
	// The second read is timed: the first warms the mount's side.
	if _, err := ref.timeRead("big", size); err != nil {
		return err
	}
	rw, err := ref.timeRead("big", size)
	if err != nil {
		return err
	}
	row("nfs", "warm read "+sizeName(size), warm, "MB/s", what, rw)
	body := make([]byte, 4096)
	for i := range body {
		body[i] = 'x'
	}
	fps, err := d.writeSmall("small-nfs", nsmall, body)
	if err != nil {
		return err
	}
	row("nfs", fmt.Sprintf("%d x 4KiB written", nsmall), fps, "files/s", "", 0)
	return nil
}
