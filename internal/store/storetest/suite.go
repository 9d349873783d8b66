// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

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
	t.Run("ReadMany", func(t *testing.T) {
		s := open(t)
		for _, k := range []string{"user/a", "acl/x", "acl/y", "mount/m", "aclz"} {
			s.Put(ctx, k, []byte("v-"+k))
		}
		m, err := store.ReadMany(ctx, s, []string{"user/a", "user/missing"}, []string{"acl/", "mount/", "none/"})
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Values["user/a"]) != "v-user/a" || len(m.Values) != 1 {
			t.Fatalf("values %v", m.Values)
		}
		if got := fmt.Sprint(m.Lists["acl/"]); got != "[{acl/x [118 45 97 99 108 47 120]} {acl/y [118 45 97 99 108 47 121]}]" {
			t.Fatalf("acl/ lists %s", got)
		}
		if len(m.Lists["mount/"]) != 1 || len(m.Lists["none/"]) != 0 {
			t.Fatalf("lists %v", m.Lists)
		}
	})
	t.Run("Watch", func(t *testing.T) {
		s := open(t)
		s.Put(ctx, "acl/before", []byte("0"))
		wctx, cancel := context.WithCancel(ctx)
		ch := s.Watch(wctx, "acl/")
		s.Put(ctx, "acl/a", []byte("1"))
		s.Put(ctx, "user/x", []byte("not watched"))
		s.CompareAndSwap(ctx, "acl/a", []byte("1"), []byte("2"))
		s.Delete(ctx, "acl/before")
		s.CompareAndSwap(ctx, "acl/a", []byte("2"), nil)
		want := []store.Event{{Key: "acl/a", Value: []byte("1")}, {Key: "acl/a", Value: []byte("2")},
			{Key: "acl/before", Deleted: true}, {Key: "acl/a", Deleted: true}}
		for i, w := range want {
			got, ok := next(t, ch)
			if !ok {
				t.Fatalf("the watch ended after %d of %d changes", i, len(want))
			}
			if got.Key != w.Key || got.Deleted != w.Deleted || (!w.Deleted && string(got.Value) != string(w.Value)) {
				t.Fatalf("change %d: %+v, want %+v", i, got, w)
			}
		}
		cancel()
		for range ch { // closed once its context ends
		}
	})
}

// next waits (up to 10 s) for the next change on ch.
func next(t *testing.T, ch <-chan store.Event) (store.Event, bool) {
	t.Helper()
	select {
	case e, ok := <-ch:
		return e, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no change came through the watch in 10 s")
		return store.Event{}, false
	}
}

// RunShared runs what holds for engines that several processes share (etcd):
// open returns two handles on one fresh store, as two controllers hold.
func RunShared(t *testing.T, open func(t *testing.T) (a, b store.Store)) {
	ctx := context.Background()
	t.Run("OneWinnerAcrossHandles", func(t *testing.T) {
		a, b := open(t)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []store.Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.CompareAndSwap(ctx, "mount/x", nil, []byte(strconv.Itoa(i)))
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else if !errors.Is(err, store.ErrConflict) {
				t.Fatal(err)
			}
		}
		va, _ := a.Get(ctx, "mount/x")
		vb, _ := b.Get(ctx, "mount/x")
		if won != 1 || string(va) != string(vb) {
			t.Fatalf("%d winners; the handles read %q and %q", won, va, vb)
		}
	})
	t.Run("WatchSeesTheOtherHandle", func(t *testing.T) {
		a, b := open(t)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := a.Watch(wctx, "revoked/")
		time.Sleep(100 * time.Millisecond) // the watch is registered with the server
		b.Put(ctx, "revoked/bob", []byte("r"))
		e, ok := next(t, ch)
		if !ok || e.Key != "revoked/bob" || string(e.Value) != "r" {
			t.Fatalf("watch through one handle saw %+v (%v) for a put through the other", e, ok)
		}
	})
	t.Run("ListManyIsOneSnapshot", func(t *testing.T) {
		a, _ := open(t)
		const n = 1500 // more than one page
		for i := range n {
			if err := a.Put(ctx, fmt.Sprintf("user/u%05d", i), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		kvs, err := a.List(ctx, "user/")
		if err != nil || len(kvs) != n {
			t.Fatalf("listed %d of %d (%v)", len(kvs), n, err)
		}
		for i, kv := range kvs {
			if kv.Key != fmt.Sprintf("user/u%05d", i) {
				t.Fatalf("key %d is %s", i, kv.Key)
			}
		}
	})
}
