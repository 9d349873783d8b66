package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/share"
	"pando.dev/pando/internal/store/etcdrun"
	"pando.dev/pando/internal/wire"
)

// The controllers scenario: token requests (resolve: an ACL walk and a
// signature) and ACL reads per second from 8 clients spread over 1, 2 and
// 3 controllers on one 3-member etcd cluster, beside one controller on
// bbolt; and the time from losing a controller, or the etcd leader, to
// the first request answered after it.
func runControllers(ctx context.Context, o Options) ([]Row, error) {
	dur := 5 * time.Second
	if o.Quick {
		dur = 2 * time.Second
	}
	dir, err := os.MkdirTemp("", "pando-bench-ctrl-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	o.say("controllers: one controller on bbolt")
	ref, err := ctrlTier(ctx, filepath.Join(dir, "bbolt"), "", 1)
	if err != nil {
		return nil, err
	}
	refTok, refACL, err := ref.load(ctx, dur)
	ref.close()
	if err != nil {
		return nil, err
	}
	cl, err := etcdrun.Start(filepath.Join(dir, "etcd"), 3)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var rows []Row
	for n := 1; n <= 3; n++ {
		o.say("controllers: %d on etcd", n)
		tr, err := ctrlTier(ctx, filepath.Join(dir, fmt.Sprintf("etcd%d", n)), fmt.Sprintf("%s/bench%d", cl.URL(), n), n)
		if err != nil {
			return nil, err
		}
		tok, acl, err := tr.load(ctx, dur)
		if err == nil && n == 2 {
			var rs []Row
			rs, err = tr.failover(ctx, cl)
			rows = append(rows, rs...)
		}
		tr.close()
		if err != nil {
			return nil, err
		}
		c := fmt.Sprintf("%d on etcd (3 members)", n)
		rows = append(rows,
			Row{Scenario: "controllers", Case: c, Metric: "token requests", Value: tok, Unit: "req/s", Ref: "1 on bbolt", RefValue: refTok, HigherBetter: true,
				Note: "8 clients, each with its own connection, spread over the controllers"},
			Row{Scenario: "controllers", Case: c, Metric: "ACL reads", Value: acl, Unit: "req/s", Ref: "1 on bbolt", RefValue: refACL, HigherBetter: true})
	}
	return rows, nil
}

// tier is a domain served by n controllers on one store.
type tier struct {
	ctrls  []*controller.Controller
	admin  *config.Config
	closes []func()
}

func (t *tier) close() {
	for i := len(t.closes) - 1; i >= 0; i-- {
		t.closes[i]()
	}
}

// ctrlTier starts n controllers of domain bench on storeURL ("" for
// bbolt), one share mounted at /bench/data.
func ctrlTier(ctx context.Context, dir, storeURL string, n int) (*tier, error) {
	t := &tier{}
	for i := range n {
		c, err := controller.Start(ctx, controller.Config{StateDir: filepath.Join(dir, fmt.Sprintf("ctrl%d", i)), Domain: "bench",
			Listen: "127.0.0.1:0", Store: storeURL})
		if err != nil {
			t.close()
			return nil, err
		}
		t.ctrls = append(t.ctrls, c)
		t.closes = append(t.closes, func() { c.Close() })
	}
	adm, err := config.Load(t.ctrls[0].AdminBundlePath())
	if err != nil {
		t.close()
		return nil, err
	}
	adm.Controllers = nil
	for _, c := range t.ctrls[1:] {
		adm.Controllers = append(adm.Controllers, c.Addr())
	}
	t.admin = adm
	root := filepath.Join(dir, "export")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.close()
		return nil, err
	}
	s, err := share.Start(ctx, share.RunConfig{Name: "data", Root: root, Listen: "127.0.0.1:0", StateDir: filepath.Join(dir, "share"), Credentials: adm})
	if err != nil {
		t.close()
		return nil, err
	}
	t.closes = append(t.closes, func() { s.Close() })
	c, err := client.New(adm, client.Options{})
	if err != nil {
		t.close()
		return nil, err
	}
	defer c.Close()
	if err := c.Admin().MountAdd(ctx, "/bench/data", "data", ""); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// clientOf returns a client of the tier that asks controller i first.
func (t *tier) clientOf(i int) (*client.Client, error) {
	cfg := *t.admin
	cfg.Controller = t.ctrls[i%len(t.ctrls)].Addr()
	cfg.Controllers = nil
	for _, c := range t.ctrls {
		cfg.Controllers = append(cfg.Controllers, c.Addr())
	}
	return client.New(&cfg, client.Options{})
}

// load runs 8 clients for dur, each alternating a token request and an
// ACL read, and returns both rates.
func (t *tier) load(ctx context.Context, dur time.Duration) (tokens, acls float64, err error) {
	const clients = 8
	var nTok, nACL atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	deadline := time.Now().Add(dur)
	for i := range clients {
		c, cerr := t.clientOf(i)
		if cerr != nil {
			return 0, 0, cerr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for time.Now().Before(deadline) {
				var r wire.ResolveResp
				err := c.ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/bench/data"}, &r)
				if err == nil {
					nTok.Add(1)
					_, err = c.Admin().ACLGet(ctx, "/bench/data")
				}
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
				nACL.Add(1)
			}
		}()
	}
	wg.Wait()
	s := dur.Seconds()
	return float64(nTok.Load()) / s, float64(nACL.Load()) / s, first
}

// failover measures, on a tier of at least two controllers, the time from
// closing the controller a client asks first to its next answered token
// request, and from killing the etcd leader to the next ACL change made.
func (t *tier) failover(ctx context.Context, cl *etcdrun.Cluster) ([]Row, error) {
	c, err := t.clientOf(0)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var r wire.ResolveResp
	if err := c.ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/bench/data"}, &r); err != nil {
		return nil, err
	}
	firstOK := func(op func() error) (time.Duration, error) {
		t0 := time.Now()
		for {
			if err := op(); err == nil {
				return time.Since(t0), nil
			} else if time.Since(t0) > 30*time.Second {
				return 0, fmt.Errorf("still failing 30 s after the fault: %w", err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.ctrls[0].Close()
	ctrlGap, err := firstOK(func() error {
		return c.ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/bench/data"}, &r)
	})
	if err != nil {
		return nil, err
	}
	leader := cl.Leader()
	cl.Kill(leader)
	i := 0
	etcdGap, err := firstOK(func() error {
		i++
		return c.Admin().ACLSet(ctx, "/bench/data", []wire.ACLEntry{{Who: fmt.Sprintf("u%d", i), Rights: "r"}}, false)
	})
	if rerr := cl.Restart(leader); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	if _, err := cl.WaitLeader(); err != nil {
		return nil, err
	}
	return []Row{
		{Scenario: "controllers", Case: "2 on etcd, the one asked first closed", Metric: "time to the next answered token request", Value: ms(ctrlGap), Unit: "ms",
			Note: "the client dials the other controller"},
		{Scenario: "controllers", Case: "2 on etcd, the etcd leader killed", Metric: "time to the next ACL change made", Value: ms(etcdGap), Unit: "ms",
			Note: "etcd elects a new leader (election timeout 500 ms)"},
	}, nil
}
