package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/gateway"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/vfs"
)

// gwClient reads and writes through one door of a gateway.
type gwClient struct {
	hc          *http.Client
	base        string // scheme://addr
	s3          bool
	user, pass  string // Basic, or the S3 key and secret
	bucketPath  string // the path of /bench/data through this door
	description string
}

func (c *gwClient) do(method, p string, body []byte) (int64, error) {
	req, err := http.NewRequest(method, c.base+p, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if c.s3 {
		sum := sha256.Sum256(body)
		h := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", h)
		if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
			aws.Credentials{AccessKeyID: c.user, SecretAccessKey: c.pass}, req, h, "s3", "us-east-1", time.Now()); err != nil {
			return 0, err
		}
	} else if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 300 {
		return n, fmt.Errorf("%s %s through %s: %s", method, p, c.description, resp.Status)
	}
	return n, err
}

func (c *gwClient) timeGet(name string, size int64) (float64, error) {
	t0 := time.Now()
	n, err := c.do("GET", c.bucketPath+"/"+name, nil)
	if err == nil && n != size {
		err = fmt.Errorf("GET of %s through %s: %d bytes of %d", name, c.description, n, size)
	}
	return mbps(size, time.Since(t0)), err
}

// runGateways reads a large file cold and warm, and writes many small
// files, through the HTTP, WebDAV, S3 and SMB gateways, beside the mount and
// beside rclone serve over the mount's directory (when rclone is here).
func runGateways(ctx context.Context, o Options) ([]Row, error) {
	size, nsmall := int64(1<<30), 10000
	if o.Quick {
		size, nsmall = 64<<20, 300
	}
	e, root, _, err := startWith(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := pattern.WriteFile(filepath.Join(root, "big"), size); err != nil {
		return nil, err
	}
	// The folders of the small files, made before any door looks.
	for _, d := range []string{"mount", "http", "webdav", "http-clear", "webdav-clear", "s3", "nfs", "smb"} {
		if err := os.Mkdir(filepath.Join(root, "small-"+d), 0o755); err != nil {
			return nil, err
		}
	}
	a, err := e.Mount(vfs.Options{}, 0)
	if err != nil {
		return nil, err
	}
	doors, caFile, err := startGateways(ctx, e)
	if err != nil {
		return nil, err
	}
	var rows []Row
	row := func(c, m string, v float64, unit, ref string, rv float64) {
		rows = append(rows, Row{Scenario: "gateways", Case: c, Metric: m, Value: v, Unit: unit, Ref: ref, RefValue: rv, HigherBetter: true})
	}
	o.say("gateways: the mount")
	mc, _, err := timeRead(a.Path("/bench/data/big"))
	if err != nil {
		return nil, err
	}
	// The warm read is the third, as for the gateways: the second is
	// served by the agent and leaves the cache's data file ready, and the
	// third is read by the kernel from it (FUSE passthrough).
	if _, _, err := timeRead(a.Path("/bench/data/big")); err != nil {
		return nil, err
	}
	c0, err := procCPU(0)
	if err != nil {
		return nil, err
	}
	mw, _, err := timeRead(a.Path("/bench/data/big"))
	if err != nil {
		return nil, err
	}
	c1, err := procCPU(0)
	if err != nil {
		return nil, err
	}
	mountWarm := mbps(size, mw)
	gib := float64(size) / (1 << 30)
	row("mount", "cold read "+sizeName(size), mbps(size, mc), "MB/s", "", 0)
	row("mount", "warm read "+sizeName(size)+" (passthrough)", mountWarm, "MB/s", "", 0)
	lowRow := func(c, m string, v float64, unit, ref string, rv float64) {
		rows = append(rows, Row{Scenario: "gateways", Case: c, Metric: m, Value: v, Unit: unit, Ref: ref, RefValue: rv})
	}
	lowRow("mount", "warm read, reader CPU", (c1-c0).Seconds()/gib, "CPU-s/GiB", "", 0)

	// rclone serve over the mount's directory, as a reference per door:
	// HTTP and WebDAV, over TLS with the gateway's certificate and in
	// clear (Debian 12's rclone 1.60 has no serve s3 or serve nfs).
	rclone := map[string]*gwClient{}
	rclonePID := map[string]int{}
	if _, err := exec.LookPath("rclone"); err == nil {
		keyFile := filepath.Join(filepath.Dir(caFile), "gateway.key")
		for _, door := range []string{"http", "webdav", "http clear", "webdav clear"} {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			proto, clear := strings.Fields(door)[0], strings.HasSuffix(door, "clear")
			args := []string{"serve", proto, "--addr", addr}
			if !clear {
				args = append(args, "--cert", caFile, "--key", keyFile)
			}
			cmd := exec.Command("rclone", append(args, a.Path("/bench/data"))...)
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					break
				}
			}
			rclonePID[door] = cmd.Process.Pid
			rclone[door] = &gwClient{hc: &http.Client{}, base: "http://" + addr, description: "rclone serve " + door}
			if !clear {
				rclone[door].hc, rclone[door].base = doors[0].hc, "https://"+addr
			}
		}
	}
	for _, d := range doors {
		o.say("gateways: %s", d.description)
		cold, err := d.timeGet("big", size)
		if err != nil {
			return nil, err
		}
		// One read more before the warm one is timed, as for rclone
		// below: the first after a cold read writes the cached blocks to
		// the cache's data file, from which reads come from then on.
		if _, err := d.timeGet("big", size); err != nil {
			return nil, err
		}
		wr, err := d.curlGet("big", size, caFile, 0)
		if err != nil {
			return nil, err
		}
		warm := wr.mbps
		row(d.description, "cold read "+sizeName(size), cold, "MB/s", "mount, cold", mbps(size, mc))
		row(d.description, "warm read "+sizeName(size), warm, "MB/s", "mount, warm (passthrough)", mountWarm)
		if rc := rclone[d.description]; rc != nil {
			if _, err := rc.timeGet("big", size); err != nil { // warms the mount's side
				return nil, err
			}
			rw, err := rc.curlGet("big", size, caFile, rclonePID[d.description])
			if err != nil {
				return nil, err
			}
			row(d.description, "warm read "+sizeName(size), warm, "MB/s", rc.description+", warm", rw.mbps)
			lowRow(d.description, "warm read, server CPU", wr.serverCPU, "CPU-s/GiB", rc.description, rw.serverCPU)
		} else {
			lowRow(d.description, "warm read, server CPU", wr.serverCPU, "CPU-s/GiB", "", 0)
		}
		lowRow(d.description, "warm read, curl CPU", wr.clientCPU, "CPU-s/GiB", "", 0)
		// Small files.
		body := bytes.Repeat([]byte("x"), 4096)
		dir := "/small-" + strings.ReplaceAll(d.description, " ", "-")
		t0 := time.Now()
		for i := range nsmall {
			if _, err := d.do("PUT", fmt.Sprintf("%s%s/f%05d", d.bucketPath, dir, i), body); err != nil {
				return nil, err
			}
		}
		row(d.description, fmt.Sprintf("%d x 4KiB written", nsmall), float64(nsmall)/time.Since(t0).Seconds(), "files/s", "", 0)
	}
	if err := benchNFS(ctx, o, e, a.Path("/bench/data"), size, nsmall, mc, mountWarm, row); err != nil {
		return nil, err
	}
	smbRows, err := smbRows(ctx, o, e, size, nsmall, mc, mw)
	if err != nil {
		return nil, fmt.Errorf("the SMB gateway: %w", err)
	}
	rows = append(rows, smbRows...)
	o.say("gateways: small files through the mount")
	body := bytes.Repeat([]byte("x"), 4096)
	t0 := time.Now()
	for i := range nsmall {
		if err := os.WriteFile(a.Path(fmt.Sprintf("/bench/data/small-mount/f%05d", i)), body, 0o644); err != nil {
			return nil, err
		}
	}
	row("mount", fmt.Sprintf("%d x 4KiB written", nsmall), float64(nsmall)/time.Since(t0).Seconds(), "files/s", "", 0)
	return rows, nil
}

// startGateways starts a gateway for the administrator with HTTP (TLS and
// clear), WebDAV and S3 front ends, and returns a client of each.
func startGateways(ctx context.Context, e *Env) ([]*gwClient, string, error) {
	creds, err := gatewayCreds(ctx, e, "bench-gw")
	if err != nil {
		return nil, "", err
	}
	pwFile, keyFile := filepath.Join(e.Dir, "passwd"), filepath.Join(e.Dir, "s3keys")
	if err := gateway.SetPassword(pwFile, "admin", "bench-password"); err != nil {
		return nil, "", err
	}
	pw, err := gateway.OpenPasswords(pwFile)
	if err != nil {
		return nil, "", err
	}
	access, secret, err := gateway.NewS3Key(keyFile, "admin")
	if err != nil {
		return nil, "", err
	}
	keys, err := gateway.OpenS3Keys(keyFile)
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(e.Dir, "gateway")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	// Each door has a gateway of its own, so that each cold read is cold.
	newGateway := func(name string) (*gateway.Gateway, error) {
		g, err := gateway.New(gateway.Config{Client: creds, Cache: cache.Options{Dir: filepath.Join(dir, name), DiskBytes: 4 << 30, MemoryBytes: 256 << 20}})
		if err == nil {
			e.closes = append(e.closes, g.Close)
		}
		return g, err
	}
	cert, certFile, err := gateway.ServingCert("", "", dir, []string{"127.0.0.1"})
	if err != nil {
		return nil, "", err
	}
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	listen := func() (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			e.closes = append(e.closes, func() { ln.Close() })
		}
		return ln, err
	}
	var out []*gwClient
	for _, d := range []struct {
		name string
		dav  bool
		tls  bool
	}{{"http", false, true}, {"webdav", true, true}, {"http clear", false, false}, {"webdav clear", true, false}} {
		ln, err := listen()
		if err != nil {
			return nil, "", err
		}
		g, err := newGateway(strings.ReplaceAll(d.name, " ", "-"))
		if err != nil {
			return nil, "", err
		}
		authn := g.NewAuthenticator(pw)
		c := &gwClient{hc: tlsClient, base: "https://" + ln.Addr().String(), user: "admin", pass: "bench-password", bucketPath: "/bench/data", description: d.name}
		if d.tls {
			go g.Serve(ln, &cert, authn, d.dav)
		} else {
			c.hc, c.base = &http.Client{}, "http://"+ln.Addr().String()
			go g.Serve(ln, nil, authn, d.dav)
		}
		out = append(out, c)
	}
	ln, err := listen()
	if err != nil {
		return nil, "", err
	}
	g, err := newGateway("s3")
	if err != nil {
		return nil, "", err
	}
	if err := g.StartS3(ln, &cert, gateway.S3Options{Keys: keys}); err != nil {
		return nil, "", err
	}
	out = append(out, &gwClient{hc: tlsClient, base: "https://" + ln.Addr().String(), s3: true, user: access, pass: secret, bucketPath: "/data", description: "s3"})
	return out, certFile, nil
}

// gatewayCreds makes the credentials of a gateway name.
func gatewayCreds(ctx context.Context, e *Env, name string) (*config.Config, error) {
	cl, err := client.New(e.Admin, client.Options{})
	if err != nil {
		return nil, err
	}
	resp, err := cl.Admin().GatewayAdd(ctx, name)
	cl.Close()
	if err != nil {
		return nil, err
	}
	return &config.Config{Domain: e.Domain, Controller: e.Admin.Controller, User: name, CA: string(resp.CA), Cert: string(resp.Cert), Key: string(resp.Key)}, nil
}
