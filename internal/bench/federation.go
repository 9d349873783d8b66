package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
	"pando.dev/pando/internal/wire"
)

// runFederation: two linked domains, uva and tacc, each with a share
// behind the WAN emulator (40 ms by default), and a share of tacc served
// only through a relay behind the same emulator. An agent of uva walks a
// tree and reads a large file cold at its home share and at tacc's: the
// linked domain's figures beside the home ones, and the relayed read
// beside the direct read of tacc.
func runFederation(ctx context.Context, o Options) ([]Row, error) {
	tree := walkTree{top: 10, subs: 9, files: 20}
	size := int64(1 << 30)
	if o.Quick {
		tree, size = walkTree{top: 4, subs: 4, files: 10}, 64<<20
	}
	rtt := 40 * time.Millisecond
	if len(o.RTTs) > 0 {
		rtt = o.RTTs[0]
	}
	rate := o.Rate
	if rate == 0 {
		rate = 1e9
	}
	link := &wan.Config{RTT: rtt, Rate: rate}
	home, err := NewDomainEnv(ctx, "", "uva")
	if err != nil {
		return nil, err
	}
	defer home.Close()
	far, err := NewDomainEnv(ctx, "", "tacc")
	if err != nil {
		return nil, err
	}
	defer far.Close()
	homeRoot, _, err := home.AddShare(ctx, "data", link)
	if err != nil {
		return nil, err
	}
	farRoot, _, err := far.AddShare(ctx, "data", link)
	if err != nil {
		return nil, err
	}
	relayAddr, srv, err := far.StartRelay()
	if err != nil {
		return nil, err
	}
	px, err := wan.Listen("127.0.0.1:0", relayAddr, *link)
	if err != nil {
		return nil, err
	}
	far.closes = append(far.closes, func() { px.Close() })
	relayedRoot, err := far.AddShareVia(ctx, "relayed", relayAddr, px.Addr())
	if err != nil {
		return nil, err
	}
	if err := linkEnvs(ctx, far, home, wire.AdmitAll); err != nil {
		return nil, err
	}
	if err := linkEnvs(ctx, home, far, wire.AdmitNone); err != nil {
		return nil, err
	}
	fc, err := client.New(far.Admin, client.Options{})
	if err != nil {
		return nil, err
	}
	err = fc.Admin().ACLSet(ctx, "/tacc", []wire.ACLEntry{{Who: "anyone@uva", Rights: "rl"}}, false)
	fc.Close()
	if err != nil {
		return nil, err
	}
	name := "f" + sizeName(size)
	for _, root := range []string{homeRoot, farRoot, relayedRoot} {
		if err := tree.build(filepath.Join(root, "tree")); err != nil {
			return nil, err
		}
		if err := pattern.WriteFile(filepath.Join(root, name), size); err != nil {
			return nil, err
		}
	}
	cs := fmt.Sprintf("RTT %v", rtt)
	var rows []Row

	// The walks, each by a fresh agent (cold), home first.
	walk := func(g string) (float64, error) {
		a, err := home.Mount(vfs.Options{}, 0)
		if err != nil {
			return 0, err
		}
		defer a.Unmount()
		o.say("federation: walk of %d files at %s, %s", tree.total(), g, cs)
		t0 := time.Now()
		n, err := walkFiles(a.Path(g))
		if err == nil && n != tree.total() {
			err = fmt.Errorf("the walk of %s saw %d of %d files", g, n, tree.total())
		}
		return time.Since(t0).Seconds() * 1000, err
	}
	hw, err := walk("/uva/data/tree")
	if err != nil {
		return nil, err
	}
	fw, err := walk("/tacc/data/tree")
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{Scenario: "federation", Case: cs, Metric: "walk of a linked domain's share", Value: fw, Unit: "ms",
		Ref: "the same walk of a home share", RefValue: hw, Quick: o.Quick,
		Note: fmt.Sprintf("%d files in %d directories, a fresh agent of uva each (target: within 1.2x)", tree.total(), tree.dirs())})

	// The cold reads: home, tacc direct, tacc through the relay.
	rounds := 3
	if o.Quick {
		rounds = 1
	}
	rates := map[string][]float64{}
	for i := range rounds {
		for _, via := range []struct{ g, root string }{{"/uva/data/", homeRoot}, {"/tacc/data/", farRoot}, {"/tacc/relayed/", relayedRoot}} {
			o.say("federation: cold read of %s at %s, %d of %d", sizeName(size), via.g, i+1, rounds)
			dropCache(filepath.Join(via.root, name))
			a, err := home.Mount(vfs.Options{}, 0)
			if err != nil {
				return nil, err
			}
			d, n, err := timeRead(a.Path(via.g + name))
			a.Unmount()
			if err != nil {
				return nil, err
			}
			if n != size {
				return nil, fmt.Errorf("read %d bytes of %d at %s", n, size, via.g)
			}
			rates[via.g] = append(rates[via.g], mbps(size, d))
		}
	}
	st := srv.Stats()["share:relayed@tacc"]
	rc := fmt.Sprintf("%s, %s", sizeName(size), cs)
	rows = append(rows,
		Row{Scenario: "federation", Case: rc, Metric: "cold read of a linked domain's share", Value: median(rates["/tacc/data/"]), Unit: "MB/s",
			Ref: "the same read of a home share", RefValue: median(rates["/uva/data/"]), HigherBetter: true, Quick: o.Quick,
			Note: fmt.Sprintf("median of %d, a fresh agent of uva each", rounds)},
		Row{Scenario: "federation", Case: rc, Metric: "cold read of a linked domain's share through a relay", Value: median(rates["/tacc/relayed/"]), Unit: "MB/s",
			Ref: "the same read of the linked domain, share reached directly", RefValue: median(rates["/tacc/data/"]), HigherBetter: true, Quick: o.Quick,
			Note: fmt.Sprintf("median of %d (target: at least 80%%); the relay spliced %d connections, %d MiB to the client", rounds, st.Conns, st.ToClient>>20)})
	return rows, nil
}

// linkEnvs links domain `from` with `to` (from admits to's users as admit
// says), as pando domain link does.
func linkEnvs(ctx context.Context, from, to *Env, admit string) error {
	fp, err := auth.FingerprintPEM([]byte(to.Admin.CA))
	if err != nil {
		return err
	}
	c, err := client.New(from.Admin, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Admin().DomainLink(ctx, wire.DomainLink{Name: to.Domain, Controllers: []string{to.Admin.Controller}, Admit: admit}, fp, "")
	return err
}
