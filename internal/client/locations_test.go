package client_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// TestLocations: a mount with a replica lists both locations for a path
// below it, with the path's place in each, while requests (Locate, a read)
// go to the primary alone.
func TestLocations(t *testing.T) {
	d := testenv.New(t, "uva")
	alpha := d.AddShare("alpha")
	beta := d.AddShare("beta")
	for root, content := range map[string]string{alpha: "primary", beta: "replica"} {
		if err := os.MkdirAll(filepath.Join(root, "sub", "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "sub", "x", "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(d.Admin, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Admin().MountAdd(ctx, "/uva/both", "alpha", "sub", wire.Location{Share: "beta", SharePath: "sub", Kind: wire.LocReplica}); err != nil {
		t.Fatal(err)
	}
	locs, err := c.Locations(ctx, "/uva/both/x/f")
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Location{{Share: "alpha", SharePath: "sub/x/f", Kind: wire.LocPrimary}, {Share: "beta", SharePath: "sub/x/f", Kind: wire.LocReplica}}
	if !slices.Equal(locs, want) {
		t.Fatalf("locations %+v, want %+v", locs, want)
	}
	if locs, err := c.Locations(ctx, "/uva"); err != nil || locs != nil {
		t.Fatalf("locations above every mount: %+v %v", locs, err)
	}
	if l, err := c.Locate(ctx, "/uva/both/x/f"); err != nil || l.Share != "alpha" || l.Rel != "sub/x/f" || l.Prefix != "/uva/both" {
		t.Fatalf("located at %+v (%v), want the primary", l, err)
	}
	data, _, _, err := c.GetFile(ctx, "/uva/both/x/f", make([]byte, 1<<16))
	if err != nil || string(data) != "primary" {
		t.Fatalf("read %q (%v), want the primary's file", data, err)
	}
}
