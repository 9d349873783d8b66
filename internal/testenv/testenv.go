// Package testenv starts a real domain in-process for tests and benchmarks:
// a controller on a bbolt store in a temporary directory, and shares on
// 127.0.0.1, talking over the same TLS connections as separate processes.
package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/share"
)

// Domain is a controller with its shares.
type Domain struct {
	Ctrl   *controller.Controller
	Admin  *config.Config
	Roots  map[string]string
	Shares map[string]*share.Running
	// Protection is passed to shares added from now on.
	Protection []string
	// IDRules is the identity rules file of shares added from now on
	// (share.Config.IDRules).
	IDRules string
	dir     string
	tb      testing.TB
}

// New starts a controller for domain name in a temporary directory.
func New(tb testing.TB, name string) *Domain { return NewWith(tb, name, nil) }

// NewWith is New with the controller's configuration changed by set (nil:
// none), e.g. its tokens' or certificates' lifetimes.
func NewWith(tb testing.TB, name string, set func(*controller.Config)) *Domain {
	tb.Helper()
	dir := tb.TempDir()
	ccfg := controller.Config{StateDir: filepath.Join(dir, "controller"), Domain: name, Listen: "127.0.0.1:0"}
	if set != nil {
		set(&ccfg)
	}
	ctrl, err := controller.Start(context.Background(), ccfg)
	if err != nil {
		tb.Fatal(err)
	}
	admin, err := config.Load(ctrl.AdminBundlePath())
	if err != nil {
		ctrl.Close()
		tb.Fatal(err)
	}
	d := &Domain{Ctrl: ctrl, Admin: admin, Roots: map[string]string{}, Shares: map[string]*share.Running{}, dir: dir, tb: tb}
	tb.Cleanup(d.StopController)
	return d
}

// StopController closes the controller: its address refuses connections
// until RestartController. Shares and clients keep running.
func (d *Domain) StopController() {
	if d.Ctrl != nil {
		d.Ctrl.Close()
		d.Ctrl = nil
	}
}

// RestartController starts the controller again, on its state and at the
// address it had, signing tokens that last tokenTTL (0: the default).
func (d *Domain) RestartController(tokenTTL time.Duration) {
	d.tb.Helper()
	d.StopController()
	ctrl, err := controller.Start(context.Background(), controller.Config{
		StateDir: filepath.Join(d.dir, "controller"), Listen: d.Admin.Controller, TokenTTL: tokenTTL})
	if err != nil {
		d.tb.Fatal(err)
	}
	d.Ctrl = ctrl
}

// AddShare exports a new directory as share name, mounted at /<domain>/<name>.
func (d *Domain) AddShare(name string) string { return d.AddShareAt(name, "127.0.0.1:0", "") }

// Client returns a client for cfg, closed at the end of the test.
func (d *Domain) Client(cfg *config.Config) *client.Client {
	d.tb.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		d.tb.Fatal(err)
	}
	d.tb.Cleanup(func() { c.Close() })
	return c
}

// AddShareAt is AddShare with the share listening on listen and
// registering advertise as the address clients dial (a WAN proxy, say).
func (d *Domain) AddShareAt(name, listen, advertise string) string {
	d.tb.Helper()
	root := filepath.Join(d.dir, "export-"+name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		d.tb.Fatal(err)
	}
	s, err := share.Start(context.Background(), share.RunConfig{Name: name, Root: root, Listen: listen, Advertise: advertise,
		StateDir: filepath.Join(d.dir, "shares"), Credentials: d.Admin, Protection: d.Protection, IDRules: d.IDRules})
	if err != nil {
		d.tb.Fatal(err)
	}
	d.tb.Cleanup(func() { s.Close() })
	c := d.Client(d.Admin)
	if err := c.Admin().MountAdd(context.Background(), "/"+d.Admin.Domain+"/"+name, name, ""); err != nil {
		d.tb.Fatal(err)
	}
	d.Roots[name], d.Shares[name] = root, s
	return root
}

// FreePort returns a 127.0.0.1 address with a port that was free a moment ago.
func FreePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// MakeFile writes size bytes that do not repeat (so that nothing on the
// way can compress or deduplicate them).
func MakeFile(tb testing.TB, path string, size int64) {
	tb.Helper()
	if err := pattern.WriteFile(path, size); err != nil {
		tb.Fatal(err)
	}
}

// SameFile fails the test unless files a and b hold the same bytes.
func SameFile(tb testing.TB, a, b string) {
	tb.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		tb.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		tb.Fatal(err)
	}
	if d := Diff(x, y); d != "" {
		tb.Fatalf("%s and %s differ: %s", a, b, d)
	}
}

// Diff says how got differs from want ("" if it does not): its length, or
// where its bytes first differ and what they are there.
func Diff(got, want []byte) string {
	switch {
	case bytes.Equal(got, want):
		return ""
	case len(got) != len(want):
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	i := 0
	for got[i] == want[i] {
		i++
	}
	j := i
	for j < len(got) && got[j] != want[j] {
		j++
	}
	return fmt.Sprintf("bytes %d..%d differ (first 8 there: % x, want % x)", i, j, got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
}

// Tree maps each path below root (relative to it) to its mode and, for a
// regular file, its content's SHA-256: two trees are equal when nothing
// below root changed.
func Tree(tb testing.TB, root string) map[string]string {
	tb.Helper()
	m := map[string]string{}
	filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			v += " " + hex.EncodeToString(sum[:])
		}
		rel, _ := filepath.Rel(root, p)
		m[rel] = v
		return nil
	})
	return m
}
