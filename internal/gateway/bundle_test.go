package gateway

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/testenv"
)

// TestCredentials: pando up's gateway credentials are made once, with
// the administrator's client, kept in their bundle (mode 0600) and read
// from it afterwards, with the controller's addresses of the day.
func TestCredentials(t *testing.T) {
	d := testenv.New(t, "d")
	ctx := context.Background()
	bundle := filepath.Join(t.TempDir(), "state", "gateway.json")
	creds, err := Credentials(ctx, d.Client(d.Admin).Admin(), d.Admin, bundle, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	if creds.User != "gateway" || creds.Domain != "d" || creds.Controller != d.Admin.Controller || creds.Cert == "" || creds.Key == "" {
		t.Fatalf("credentials made: user %q domain %q controller %q", creds.User, creds.Domain, creds.Controller)
	}
	if fi, err := os.Stat(bundle); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the bundle: %v, %v", fi, err)
	}
	// The gateway's credentials sign it in.
	g, err := New(Config{Client: creds, Cache: cache.Options{Dir: t.TempDir(), MemoryBytes: 8 << 20, DiskBytes: 1 << 30}})
	if err != nil {
		t.Fatalf("a gateway with the credentials made: %v", err)
	}
	if g.Identity().String() != "gateway:gateway@d" {
		t.Errorf("the gateway is %s", g.Identity())
	}
	g.Close()

	// Later: read from the bundle, no administrator's client needed,
	// and the controller is where admin says it is now.
	moved := *d.Admin
	moved.Controller = "127.0.0.1:1"
	again, err := Credentials(ctx, nil, &moved, bundle, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	if again.Cert != creds.Cert || again.Controller != "127.0.0.1:1" {
		t.Errorf("credentials read again: same cert %v, controller %q", again.Cert == creds.Cert, again.Controller)
	}
	kept, err := config.Load(bundle)
	if err != nil || kept.Controller != d.Admin.Controller {
		t.Errorf("the bundle changed: %v, %v", kept, err)
	}
}
