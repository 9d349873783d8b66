package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// env is a domain with share data at /d/data, users alice (rlidwk there)
// and bob (rl), a gateway web, and its HTTP(S) front end.
type env struct {
	d         *testenv.Domain
	root      string
	url       string // https://127.0.0.1:PORT
	dir       string
	cacert    string // the gateway's serving certificate
	g         *Gateway
	passwords string
	users     map[string][2]string // name -> cert, key files
	gwCfg     *config.Config
	cert      tls.Certificate
	s3url     string
	s3keys    map[string][2]string // user -> access key, secret
}

func newEnv(t *testing.T, dav bool) *env {
	t.Helper()
	d := testenv.New(t, "d")
	e := &env{d: d, root: d.AddShare("data"), dir: t.TempDir(), users: map[string][2]string{}}
	ctx := context.Background()
	admin := d.Client(d.Admin)
	for _, u := range []string{"alice", "bob"} {
		r, err := admin.Admin().UserAdd(ctx, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		cf, kf := filepath.Join(e.dir, u+".crt"), filepath.Join(e.dir, u+".key")
		os.WriteFile(cf, r.Cert, 0o600)
		os.WriteFile(kf, r.Key, 0o600)
		e.users[u] = [2]string{cf, kf}
		if err := SetPassword(filepath.Join(e.dir, "passwd"), u, u+"-secret-pw"); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Admin().ACLSet(ctx, "/d/data", []wire.ACLEntry{{Who: "alice", Rights: "rlidwk"}, {Who: "bob", Rights: "rl"}}, false); err != nil {
		t.Fatal(err)
	}
	r, err := admin.Admin().GatewayAdd(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	e.gwCfg = &config.Config{Domain: "d", Controller: d.Admin.Controller, User: "web", CA: string(r.CA), Cert: string(r.Cert), Key: string(r.Key)}
	cons, _ := consistency.Parse("window=1s")
	wm, _ := vfs.ParseWriteMode("close")
	e.g, err = New(Config{Client: e.gwCfg, Cache: cache.Options{Dir: filepath.Join(e.dir, "cache"), MemoryBytes: 64 << 20, DiskBytes: 1 << 30},
		VFS: vfs.Options{Consistency: cons, Write: wm}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.g.Close)
	pw, err := OpenPasswords(filepath.Join(e.dir, "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	cert, certFile, err := ServingCert("", "", e.dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	e.cacert = certFile
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go e.g.Serve(ln, &cert, e.g.NewAuthenticator(pw), dav)
	e.url = "https://" + ln.Addr().String()
	e.cert = cert
	return e
}

// listen listens on a free port of 127.0.0.1 until the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveClear starts a clear-text front end of the gateway (as --insecure
// serves on loopback), and returns its http://127.0.0.1:PORT.
func (e *env) serveClear(t *testing.T, dav bool) string {
	t.Helper()
	pw, err := OpenPasswords(filepath.Join(e.dir, "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go e.g.Serve(ln, nil, e.g.NewAuthenticator(pw), dav)
	return "http://" + ln.Addr().String()
}

// startS3 starts the gateway's S3 front end, with a key for each user.
func (e *env) startS3(t *testing.T) { e.startS3Buckets(t, "", false) }

// startS3Buckets starts the S3 front end with the buckets below the
// global path buckets ("" for the domain's mounts), in clear text if
// clear (as --insecure serves on loopback).
func (e *env) startS3Buckets(t *testing.T, buckets string, clear bool) {
	t.Helper()
	e.s3keys = map[string][2]string{}
	file := filepath.Join(e.dir, "s3keys")
	for _, u := range []string{"alice", "bob"} {
		a, s, err := NewS3Key(file, u)
		if err != nil {
			t.Fatal(err)
		}
		e.s3keys[u] = [2]string{a, s}
	}
	keys, err := OpenS3Keys(file)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	cert, scheme := &e.cert, "https://"
	if clear {
		cert, scheme = nil, "http://"
	}
	if err := e.g.StartS3(ln, cert, S3Options{Keys: keys, HostSuffix: "s3.localhost", Buckets: buckets}); err != nil {
		t.Fatal(err)
	}
	e.s3url = scheme + ln.Addr().String()
}

// curl runs curl with args (after the TLS and output options) as user
// ("" for nobody, "pw:NAME" for a password, "bearer:TOKEN" for a bearer
// token), and returns the status, the
// body and the response headers.
func (e *env) curl(t *testing.T, user string, args ...string) (int, string, string) {
	t.Helper()
	hdr := filepath.Join(e.dir, "headers")
	body := filepath.Join(e.dir, "body")
	os.Remove(hdr)
	os.Remove(body)
	a := []string{"-sS", "--path-as-is", "--cacert", e.cacert, "-D", hdr, "-o", body, "-w", "%{http_code}"}
	switch {
	case strings.HasPrefix(user, "bearer:"):
		a = append(a, "-H", "Authorization: Bearer "+strings.TrimPrefix(user, "bearer:"))
	case strings.HasPrefix(user, "pw:"):
		u := strings.TrimPrefix(user, "pw:")
		a = append(a, "-u", u+":"+u+"-secret-pw")
	case user != "":
		a = append(a, "--cert", e.users[user][0], "--key", e.users[user][1])
	}
	out, err := exec.Command("curl", append(a, args...)...).Output()
	code := 0
	fmt.Sscan(string(out), &code)
	if err != nil && code == 0 {
		return 0, "", ""
	}
	b, _ := os.ReadFile(body)
	h, _ := os.ReadFile(hdr)
	return code, string(b), string(h)
}

// tree is every path below root with its mode and the hash of its
// content, to show that a refused request changed nothing.
func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %s changed: %q -> %q", what, k, v, after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s appeared (%s)", what, k, v)
		}
	}
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (./dev test installs it)", name)
		}
		t.Skipf("%s is not installed (./dev test installs it)", name)
	}
}

// exports keeps the exported directories of a tree of testenv's (not the
// controller's and shares' state, which change as they run).
func exports(m map[string]string) map[string]string {
	for k := range m {
		if !strings.HasPrefix(k, "export-") {
			delete(m, k)
		}
	}
	return m
}
