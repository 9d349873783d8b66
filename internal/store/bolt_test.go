package store_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/store/storetest"
)

func TestBolt(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestBoltPersistsAndLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := store.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.Put(ctx, "k", []byte("v"))
	if _, err := store.OpenBolt(path); err == nil || !strings.Contains(err.Error(), "in use by another pando process") {
		t.Fatalf("second open: %v", err)
	}
	s.Close()
	s2, err := store.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v, err := s2.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("after reopen: %q %v", v, err)
	}
}
