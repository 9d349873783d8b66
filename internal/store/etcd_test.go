package store_test

import (
	"context"
	"fmt"
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
