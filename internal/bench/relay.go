package bench

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/relay"
	"pando.dev/pando/internal/share"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// runRelay: a large file read cold through the mount from a share served
// through a relay, beside the same read from a share reached directly.
func runRelay(ctx context.Context, o Options) ([]Row, error) {
	e, err := NewEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	size := int64(1 << 30)
	if o.Quick {
		size = 64 << 20
	}
	var rows []Row
	rtts := o.RTTs
	if len(rtts) == 0 || o.Quick {
		rtts = []time.Duration{0}
	}
	for _, rtt := range rtts {
		var link *wan.Config
		if rtt > 0 {
			rate := o.Rate
			if rate == 0 {
				rate = 1e9
			}
			link = &wan.Config{RTT: rtt, Rate: rate}
		}
		r, err := RelayRead(ctx, o, e, size, link)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// StartRelay runs a relay on 127.0.0.1 that trusts the CA of e's domain
// (and of any domain whose CA PEM is in more); it stops with e.
func (e *Env) StartRelay(more ...[]byte) (string, *relay.Server, error) {
	trust, err := auth.NewForeign(append([][]byte{[]byte(e.Admin.CA)}, more...))
	if err != nil {
		return "", nil, err
	}
	srv, err := relay.New(relay.Config{Verify: func(chain []*x509.Certificate) (string, error) {
		id, err := trust.Verify(chain)
		return id.String(), err
	}})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go srv.Serve(ln)
	e.closes = append(e.closes, func() { srv.Close() })
	return ln.Addr().String(), srv, nil
}

// AddShareVia exports a new directory as share name at /<domain>/<name>,
// served only through the relay at relayAddr (it opens no port), and
// returns its root. Clients dial the relay at advertise (a WAN emulator
// in front of it, say), or relayAddr if it is empty.
func (e *Env) AddShareVia(ctx context.Context, name, relayAddr, advertise string) (string, error) {
	root := filepath.Join(e.Dir, "export-"+name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	s, err := share.Start(ctx, share.RunConfig{Name: name, Root: root, Relay: relayAddr, RelayAdvertise: advertise,
		StateDir: filepath.Join(e.Dir, "shares"), Credentials: e.Admin})
	if err != nil {
		return "", err
	}
	e.closes = append(e.closes, func() { s.Close() })
	c, err := client.New(e.Admin, client.Options{})
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.Admin().MountAdd(ctx, "/"+e.Domain+"/"+name, name, ""); err != nil {
		return "", err
	}
	return root, nil
}

// RelayRead starts, in e, a relay, a share served only through it and a
// share reached directly, writes a file of size bytes to each, and reads
// each cold through a fresh mount (the share's copy dropped from the page
// cache too), taking turns, three times (once with o.Quick). With a link,
// clients reach the direct share, and the relay, through a WAN emulator
// of their own (the relay sits beside the share, as in the share's site).
// Its row is the relayed read's median beside the direct one's, with what
// the relay counted.
func RelayRead(ctx context.Context, o Options, e *Env, size int64, link *wan.Config) ([]Row, error) {
	relayAddr, srv, err := e.StartRelay()
	if err != nil {
		return nil, err
	}
	tag, advertise := "", ""
	if link != nil {
		tag = fmt.Sprintf("-%dms", link.RTT.Milliseconds())
		px, err := wan.Listen("127.0.0.1:0", relayAddr, *link)
		if err != nil {
			return nil, err
		}
		e.closes = append(e.closes, func() { px.Close() })
		advertise = px.Addr()
	}
	direct, _, err := e.AddShare(ctx, "direct"+tag, link)
	if err != nil {
		return nil, err
	}
	relayed, err := e.AddShareVia(ctx, "relayed"+tag, relayAddr, advertise)
	if err != nil {
		return nil, err
	}
	name := "f" + sizeName(size)
	for _, root := range []string{direct, relayed} {
		if err := pattern.WriteFile(filepath.Join(root, name), size); err != nil {
			return nil, err
		}
	}
	rounds := 3
	if o.Quick {
		rounds = 1
	}
	rates := map[string][]float64{}
	for i := range rounds {
		for _, via := range []struct{ share, root string }{{"relayed" + tag, relayed}, {"direct" + tag, direct}} {
			o.say("relay: cold read of %s, %s, %d of %d", sizeName(size), via.share, i+1, rounds)
			dropCache(filepath.Join(via.root, name))
			a, err := e.Mount(vfs.Options{}, 0)
			if err != nil {
				return nil, err
			}
			d, n, err := timeRead(a.Path("/" + e.Domain + "/" + via.share + "/" + name))
			a.Unmount()
			if err != nil {
				return nil, err
			}
			if n != size {
				return nil, fmt.Errorf("read %d bytes of %d from %s", n, size, via.share)
			}
			rates[strings.TrimSuffix(via.share, tag)] = append(rates[strings.TrimSuffix(via.share, tag)], mbps(size, d))
		}
	}
	st := srv.Stats()["share:relayed"+tag+"@"+e.Domain]
	rtt := time.Duration(0)
	if link != nil {
		rtt = link.RTT
	}
	return []Row{{Scenario: "relay", Case: fmt.Sprintf("%s, RTT %s", sizeName(size), rtt), Metric: "cold read through a relay", Value: median(rates["relayed"]), Unit: "MB/s",
		Ref: "the same read, share reached directly", RefValue: median(rates["direct"]), HigherBetter: true, Quick: o.Quick,
		Note: fmt.Sprintf("median of %d; the relay spliced %d connections, %d MiB to the client, %d KiB to the share", rounds, st.Conns, st.ToClient>>20, st.ToServer>>10)}}, nil
}
