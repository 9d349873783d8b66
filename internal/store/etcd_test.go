package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/store/etcdtest"
	"pando.dev/pando/internal/store/storetest"
)

// TestEtcd runs the conformance suite on a real 3-member etcd cluster,
// each case in a prefix of its own.
func TestEtcd(t *testing.T) {
	c := etcdtest.Start(t, 3)
	var n atomic.Int64
	open := func(t *testing.T) store.Store {
		s, err := store.OpenEtcd(context.Background(), fmt.Sprintf("%s/case%d", c.URL(), n.Add(1)), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Run(t, open)
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		url := fmt.Sprintf("%s/case%d", c.URL(), n.Add(1))
		var out [2]store.Store
		for i := range out {
			s, err := store.OpenEtcd(context.Background(), url, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			out[i] = s
		}
		return out[0], out[1]
	})
}

func TestParseEtcdURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"etcd://a:2379,b:2379", "[a:2379 b:2379] /pando/"},
		{"etcd://a:2379/dom/x/", "[a:2379] /dom/x/"},
	} {
		u, err := store.ParseEtcdURL(tc.in)
		if got := fmt.Sprint(u.Endpoints, " ", u.Prefix); err != nil || got != tc.want {
			t.Errorf("%s: %s %v, want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"a:2379", "etcd://", "etcd://a", "bbolt:/x"} {
		if _, err := store.ParseEtcdURL(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestMigrateAndRestore: a domain's keys (10,000 users and ACL entries)
// copied from bbolt to etcd are all there, byte for byte; a snapshot of
// the etcd store restored into a fresh bbolt file likewise; and neither
// writes into a store that holds keys already (which stays as it was).
func TestMigrateAndRestore(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.Start(t, 3)
	src, err := store.OpenBolt(filepath.Join(t.TempDir(), "controller.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var kvs []store.KV
	for i := range 5000 {
		kvs = append(kvs, store.KV{Key: fmt.Sprintf("user/u%05d", i), Value: []byte(fmt.Sprintf("user record %d \x00\xff", i))},
			store.KV{Key: fmt.Sprintf("acl//uva/d%05d", i), Value: []byte(fmt.Sprintf("acl %d", i))})
	}
	if _, err := store.Copy(ctx, src, sliceStore(kvs)); err != nil {
		t.Fatal(err)
	}
	dst, err := store.OpenEtcd(ctx, c.URL()+"/migrated", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if n, err := store.Copy(ctx, dst, src); err != nil || n != len(kvs) {
		t.Fatalf("migrated %d of %d: %v", n, len(kvs), err)
	}
	same(t, dst, src)

	var buf bytes.Buffer
	if n, err := store.Snapshot(ctx, dst, &buf); err != nil || n != len(kvs) {
		t.Fatalf("snapshot of %d of %d: %v", n, len(kvs), err)
	}
	restored, err := store.OpenBolt(filepath.Join(t.TempDir(), "controller.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	snap := buf.Bytes()
	if n, err := store.Restore(ctx, restored, bytes.NewReader(snap)); err != nil || n != len(kvs) {
		t.Fatalf("restored %d of %d: %v", n, len(kvs), err)
	}
	same(t, restored, src)

	// Into a store that holds keys: refused, and it is unchanged.
	if _, err := store.Restore(ctx, dst, bytes.NewReader(snap)); !errors.Is(err, store.ErrNotEmpty) {
		t.Fatalf("restore into a store with keys: %v", err)
	}
	if _, err := store.Copy(ctx, restored, src); !errors.Is(err, store.ErrNotEmpty) {
		t.Fatalf("migration into a store with keys: %v", err)
	}
	same(t, dst, src)
	same(t, restored, src)
	if _, err := store.Restore(ctx, restored, strings.NewReader(`{"format":"something else"}`)); err == nil || !strings.Contains(err.Error(), "not a pando store snapshot") {
		t.Fatalf("restore of a foreign file: %v", err)
	}
}

// same fails the test unless a and b hold the same keys and values.
func same(t *testing.T, a, b store.Store) {
	t.Helper()
	ka, err := a.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ka) != len(kb) {
		t.Fatalf("%d keys and %d keys", len(ka), len(kb))
	}
	for i := range ka {
		if ka[i].Key != kb[i].Key || !bytes.Equal(ka[i].Value, kb[i].Value) {
			t.Fatalf("key %d: %s=%q and %s=%q", i, ka[i].Key, ka[i].Value, kb[i].Key, kb[i].Value)
		}
	}
}

// sliceStore is a read-only source of keys for Copy.
type sliceStore []store.KV

func (s sliceStore) List(ctx context.Context, prefix string) ([]store.KV, error) {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b store.KV) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
func (sliceStore) Get(context.Context, string) ([]byte, error)      { return nil, store.ErrNotFound }
func (sliceStore) Put(context.Context, string, []byte) error        { return errors.ErrUnsupported }
func (sliceStore) Delete(context.Context, string) error             { return errors.ErrUnsupported }
func (sliceStore) Close() error                                     { return nil }
func (sliceStore) Watch(context.Context, string) <-chan store.Event { return nil }
func (sliceStore) CompareAndSwap(context.Context, string, []byte, []byte) error {
	return errors.ErrUnsupported
}
