package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// TestShareOnlyAReplica: a share that holds only a replica of a mount is
// reported as such, not as a share with nothing mounted from it; the
// primary is checked with a request, as before.
func TestShareOnlyAReplica(t *testing.T) {
	d := testenv.New(t, "uva")
	d.AddShare("alpha")
	d.AddShare("beta")
	c := d.Client(d.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Admin().MountRemove(ctx, "/uva/beta"); err != nil {
		t.Fatal(err)
	}
	if err := c.Admin().MountAdd(ctx, "/uva/both", "alpha", "", wire.Location{Share: "beta", Kind: wire.LocReplica}); err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range checkShares(ctx, c, Options{Timeout: 10 * time.Second}) {
		got[r.Check] = r
	}
	if r := got["share beta"]; r.Status != OK || !strings.Contains(r.Msg, "replica of /uva/both") {
		t.Errorf("share beta: %+v", r)
	}
	if r := got["share alpha"]; r.Status != OK || !strings.Contains(r.Msg, "serves /uva/") {
		t.Errorf("share alpha: %+v", r)
	}
}
