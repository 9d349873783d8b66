// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"pando.dev/pando/internal/store"
)

// Run runs the suite against fresh stores made by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	t.Run("GetPutDelete", func(t *testing.T) {
		s := open(t)
		if _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		if err := s.Put(ctx, "a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		v, err := s.Get(ctx, "a")
		if err != nil || string(v) != "1" {
			t.Fatalf("get: %q %v", v, err)
		}
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete missing: %v", err)
		}
	})
	t.Run("ListIsSortedAndPrefixed", func(t *testing.T) {
		s := open(t)
		for _, k := range []string{"user/b", "user/a", "users", "use", "user/c/d", "acl/x"} {
			if err := s.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		kvs, err := s.List(ctx, "user/")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, kv := range kvs {
			keys = append(keys, kv.Key)
			if string(kv.Value) != kv.Key {
				t.Errorf("value of %s = %q", kv.Key, kv.Value)
			}
		}
		if fmt.Sprint(keys) != "[user/a user/b user/c/d]" {
			t.Fatalf("list user/ = %v", keys)
		}
		if kvs, _ := s.List(ctx, "nothing/"); len(kvs) != 0 {
			t.Fatalf("list of an empty prefix: %v", kvs)
		}
	})
	t.Run("ValuesAreCopies", func(t *testing.T) {
		s := open(t)
		in := []byte("abc")
		s.Put(ctx, "k", in)
		in[0] = 'X'
		v, _ := s.Get(ctx, "k")
		if string(v) != "abc" {
			t.Fatalf("store aliases the caller's buffer: %q", v)
		}
		v[1] = 'Y'
		v2, _ := s.Get(ctx, "k")
		if string(v2) != "abc" {
			t.Fatalf("store returns aliases: %q", v2)
		}
	})
	t.Run("CompareAndSwap", func(t *testing.T) {
		s := open(t)
		if err := s.CompareAndSwap(ctx, "k", nil, []byte("1")); err != nil {
			t.Fatalf("create: %v", err)
		}
		if err := s.CompareAndSwap(ctx, "k", nil, []byte("2")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("create over existing: %v", err)
		}
		if err := s.CompareAndSwap(ctx, "k", []byte("0"), []byte("2")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("update from a wrong value: %v", err)
		}
		if err := s.CompareAndSwap(ctx, "k", []byte("1"), []byte("2")); err != nil {
			t.Fatalf("update: %v", err)
		}
		if err := s.CompareAndSwap(ctx, "k", []byte("2"), nil); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after CAS delete: %v", err)
		}
		if err := s.CompareAndSwap(ctx, "k", []byte("2"), []byte("3")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("update of a missing key: %v", err)
		}
	})
	t.Run("ConcurrentIncrements", func(t *testing.T) {
		s := open(t)
		const workers, each = 4, 25
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					for {
						old, err := s.Get(ctx, "n")
						if errors.Is(err, store.ErrNotFound) {
							old = nil
						} else if err != nil {
							t.Error(err)
							return
						}
						n, _ := strconv.Atoi(string(old))
						err = s.CompareAndSwap(ctx, "n", old, []byte(strconv.Itoa(n+1)))
						if err == nil {
							break
						}
						if !errors.Is(err, store.ErrConflict) {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		v, _ := s.Get(ctx, "n")
		if string(v) != strconv.Itoa(workers*each) {
			t.Fatalf("counter = %s, want %d", v, workers*each)
		}
	})
}
