package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Etcd is a Store on an etcd cluster, shared by every controller of a
// domain. Keys live under a prefix ("/pando/" unless the URL names
// another), so that one cluster can serve other users too.
type Etcd struct {
	cli    *clientv3.Client
	prefix string
}

var _ Store = (*Etcd)(nil)

// EtcdURL is a parsed etcd://HOST:PORT,HOST:PORT[/PREFIX] address.
type EtcdURL struct {
	Endpoints []string
	Prefix    string
}

// ParseEtcdURL parses s (etcd://HOST:PORT,HOST:PORT[/PREFIX]).
func ParseEtcdURL(s string) (EtcdURL, error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		return EtcdURL{}, fmt.Errorf("%q is not an etcd store address: write etcd://HOST:2379,HOST:2379", s)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	u := EtcdURL{Prefix: "/pando/"}
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		u.Prefix = "/" + prefix + "/"
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		if !strings.Contains(h, ":") {
			return EtcdURL{}, fmt.Errorf("etcd member %q has no port: write HOST:2379", h)
		}
		u.Endpoints = append(u.Endpoints, h)
	}
	if len(u.Endpoints) == 0 {
		return EtcdURL{}, fmt.Errorf("%q names no etcd member: write etcd://HOST:2379,HOST:2379", s)
	}
	return u, nil
}

// OpenEtcd connects to the cluster at url (with TLS if tc is not nil) and
// checks that it answers.
func OpenEtcd(ctx context.Context, url string, tc *tls.Config) (*Etcd, error) {
	u, err := ParseEtcdURL(url)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            u.Endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		TLS:                  tc,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot reach the etcd cluster at %s: %w", strings.Join(u.Endpoints, ","), err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(cctx, u.Prefix+"domain"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("the etcd cluster at %s does not answer: %w (is it running, and are its addresses right?)", strings.Join(u.Endpoints, ","), err)
	}
	return &Etcd{cli: cli, prefix: u.Prefix}, nil
}

// Client is the etcd client, for status reports.
func (e *Etcd) Client() *clientv3.Client { return e.cli }

// Get implements Store.
func (e *Etcd) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := retryRead(ctx, func() (*clientv3.GetResponse, error) { return e.cli.Get(ctx, e.prefix+key) })
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(r.Kvs) == 0 {
		return nil, ErrNotFound
	}
	return r.Kvs[0].Value, nil
}

// Put implements Store.
func (e *Etcd) Put(ctx context.Context, key string, value []byte) error {
	if _, err := e.cli.Put(ctx, e.prefix+key, string(value)); err != nil {
		return fmt.Errorf("etcd put %s: %w", key, err)
	}
	return nil
}

// Delete implements Store.
func (e *Etcd) Delete(ctx context.Context, key string) error {
	r, err := e.cli.Delete(ctx, e.prefix+key)
	if err != nil {
		return fmt.Errorf("etcd delete %s: %w", key, err)
	}
	if r.Deleted == 0 {
		return ErrNotFound
	}
	return nil
}

// listPage is how many keys one range request of List returns.
const listPage = 1000

// List implements Store. The pages are read at one revision: the listing
// is a consistent snapshot however many keys it holds.
func (e *Etcd) List(ctx context.Context, prefix string) ([]KV, error) {
	var out []KV
	from, end := e.prefix+prefix, clientv3.GetPrefixRangeEnd(e.prefix+prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := retryRead(ctx, func() (*clientv3.GetResponse, error) { return e.cli.Get(ctx, from, opts...) })
		if err != nil {
			return nil, fmt.Errorf("etcd list %s: %w", prefix, err)
		}
		rev = r.Header.Revision
		for _, kv := range r.Kvs {
			out = append(out, KV{Key: strings.TrimPrefix(string(kv.Key), e.prefix), Value: kv.Value})
		}
		if !r.More || len(r.Kvs) == 0 {
			return out, nil
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// CompareAndSwap implements Store, as one etcd transaction.
func (e *Etcd) CompareAndSwap(ctx context.Context, key string, old, new []byte) error {
	k := e.prefix + key
	cmp := clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	if old != nil {
		cmp = clientv3.Compare(clientv3.Value(k), "=", string(old))
	}
	op := clientv3.OpDelete(k)
	if new != nil {
		op = clientv3.OpPut(k, string(new))
	}
	r, err := e.cli.Txn(ctx).If(cmp).Then(op).Commit()
	if err != nil {
		return fmt.Errorf("etcd compare-and-swap %s: %w", key, err)
	}
	if !r.Succeeded {
		return ErrConflict
	}
	return nil
}

// Watch implements Store with an etcd watch. It ends (the channel closes)
// when ctx ends or etcd cancels the watch (compaction past its place).
func (e *Etcd) Watch(ctx context.Context, prefix string) <-chan Event {
	out := make(chan Event, watchBuffer)
	// From the revision after the store's current one: every change made
	// after Watch returns, and none before.
	r, err := e.cli.Get(ctx, e.prefix+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		close(out)
		return out
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := e.cli.Watch(wctx, e.prefix+prefix, clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
	go func() {
		defer close(out)
		defer cancel()
		for r := range wch {
			if err := r.Err(); err != nil {
				if ctx.Err() == nil {
					slog.Debug("etcd watch ended", "prefix", prefix, "err", err)
				}
				return
			}
			for _, ev := range r.Events {
				x := Event{Key: strings.TrimPrefix(string(ev.Kv.Key), e.prefix), Value: ev.Kv.Value,
					Deleted: ev.Type == clientv3.EventTypeDelete}
				select {
				case out <- x:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// Close implements Store.
func (e *Etcd) Close() error { return e.cli.Close() }

// txnOps is how many keys createAll puts in one transaction (etcd's
// default limit is 128 operations).
const txnOps = 100

// createAll creates kvs, txnOps keys a transaction, each only if absent.
func (e *Etcd) createAll(ctx context.Context, kvs []KV) error {
	for len(kvs) > 0 {
		n := min(len(kvs), txnOps)
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, kv := range kvs[:n] {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(e.prefix+kv.Key), "=", 0))
			ops = append(ops, clientv3.OpPut(e.prefix+kv.Key, string(kv.Value)))
		}
		r, err := e.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("etcd: writing keys from %s: %w", kvs[0].Key, err)
		}
		if !r.Succeeded {
			return fmt.Errorf("writing keys from %s: one exists already: %w", kvs[0].Key, ErrConflict)
		}
		kvs = kvs[n:]
	}
	return nil
}

// Member is one member of a store's cluster, as Members reports it.
type Member struct {
	Name, Addr string
	Leader, Up bool
	Err        string // why it did not answer
}

// Members lists the cluster's members, which one leads and which answer.
func (e *Etcd) Members(ctx context.Context) ([]Member, error) {
	ml, err := e.cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	var out []Member
	for _, m := range ml.Members {
		mb := Member{Name: m.Name}
		if len(m.ClientURLs) > 0 {
			mb.Addr = m.ClientURLs[0]
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := e.cli.Status(sctx, mb.Addr)
			cancel()
			if err != nil {
				mb.Err = err.Error()
			} else {
				mb.Up, mb.Leader = true, st.Leader == m.ID
			}
		}
		out = append(out, mb)
	}
	return out, nil
}

// readMany reads keys and prefixes in one transaction: one round trip, at
// one revision. A prefix's keys come whole (no pages): the controller's
// prefixes read so (users' records, ACLs, mounts, shares) are small.
func (e *Etcd) readMany(ctx context.Context, keys, prefixes []string) (Many, error) {
	var ops []clientv3.Op
	for _, k := range keys {
		ops = append(ops, clientv3.OpGet(e.prefix+k))
	}
	for _, p := range prefixes {
		ops = append(ops, clientv3.OpGet(e.prefix+p, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)))
	}
	r, err := retryRead(ctx, func() (*clientv3.TxnResponse, error) { return e.cli.Txn(ctx).Then(ops...).Commit() })
	if err != nil {
		return Many{}, fmt.Errorf("etcd read: %w", err)
	}
	out := Many{Values: map[string][]byte{}, Lists: map[string][]KV{}}
	for i, resp := range r.Responses {
		rr := resp.GetResponseRange()
		if rr == nil {
			return Many{}, fmt.Errorf("etcd read: reply %d is not a range", i)
		}
		if i < len(keys) {
			if len(rr.Kvs) > 0 {
				out.Values[keys[i]] = rr.Kvs[0].Value
			}
			continue
		}
		kvs := make([]KV, 0, len(rr.Kvs))
		for _, kv := range rr.Kvs {
			kvs = append(kvs, KV{Key: strings.TrimPrefix(string(kv.Key), e.prefix), Value: kv.Value})
		}
		out.Lists[prefixes[i-len(keys)]] = kvs
	}
	return out, nil
}

// retryRead runs a read again while the cluster is electing a leader
// ("leader changed", "no leader"): a read changes nothing, and an election
// takes about a second, which a request to a controller should not fail
// for. It gives up after 5 s, or when ctx ends.
func retryRead[R any](ctx context.Context, read func() (R, error)) (R, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := read()
		if err == nil || !electing(err) || time.Now().After(deadline) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// electing reports whether err says the cluster has no leader for now.
func electing(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrGRPCLeaderChanged) || errors.Is(err, rpctypes.ErrGRPCNoLeader) ||
		strings.Contains(err.Error(), "leader changed") || strings.Contains(err.Error(), "no leader")
}
