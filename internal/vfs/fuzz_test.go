package vfs

import (
	"bytes"
	"testing"

	"pando.dev/pando/internal/wire"
)

// FuzzPersistedListing: what the agent reads back of the listings and
// attributes it persisted (from its cache's index on disk) never panics;
// what decodes encodes again to the same bytes it stores, and answers
// lookups by the names it holds.
func FuzzPersistedListing(f *testing.F) {
	l := listing{Dir: wire.Attr{Ino: 1, Mode: 0o40755, Version: 3}, Entries: []wire.DirEntry{
		{Name: "a.c", Attr: wire.Attr{Ino: 2, Mode: 0o100644, Size: 10, Version: 1}},
		{Name: "sub", Attr: wire.Attr{Ino: 3, Mode: 0o40755}},
	}}
	b, _ := wire.Marshal(l)
	f.Add(b)
	a, _ := wire.Marshal(wire.Attr{Ino: 9, Mode: 0o120777, Size: 4, Mtime: 1e18})
	f.Add(a)
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l listing
		if wire.Unmarshal(b, &l) == nil {
			enc, err := wire.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			var again listing
			if err := wire.Unmarshal(enc, &again); err != nil {
				t.Fatal(err)
			}
			if enc2, _ := wire.Marshal(again); !bytes.Equal(enc, enc2) {
				t.Fatal("a persisted listing changes in a round trip")
			}
			d := dirEntry{entries: l.Entries}
			for _, e := range l.Entries {
				if !d.has(e.Name) {
					t.Fatalf("listing holds %q but does not have it", e.Name)
				}
			}
		}
		var at wire.Attr
		if wire.Unmarshal(b, &at) == nil {
			enc, _ := wire.Marshal(at)
			var again wire.Attr
			if wire.Unmarshal(enc, &again) != nil || again != at {
				t.Fatalf("persisted attributes change in a round trip: %+v, %+v", at, again)
			}
			_ = wire.FileMode(at.Mode)
		}
	})
}
