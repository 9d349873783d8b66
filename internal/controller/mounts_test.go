package controller

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// checkStoredLocations fails t unless the stored entry m names at most
// wire.MountLocationsMax locations, each of a registered share named once,
// at a clean share path, the first the primary and the others replicas.
func checkStoredLocations(t *testing.T, c *Controller, m wire.MountEntry) {
	t.Helper()
	locs := m.Locations()
	if len(locs) > wire.MountLocationsMax {
		t.Fatalf("mount %s stored with %d locations", m.Prefix, len(locs))
	}
	seen := map[string]bool{}
	for i, l := range locs {
		if want := map[bool]wire.LocationKind{true: wire.LocPrimary, false: wire.LocReplica}[i == 0]; l.Kind != want {
			t.Fatalf("mount %s: location %d stored as %s", m.Prefix, i+1, l.Kind)
		}
		if _, err := auth.CleanRel(l.SharePath); err != nil && l.SharePath != "" {
			t.Fatalf("mount %s: share path %q: %v", m.Prefix, l.SharePath, err)
		}
		if strings.Trim(l.SharePath, "/") != l.SharePath {
			t.Fatalf("mount %s: share path %q stored with slashes", m.Prefix, l.SharePath)
		}
		if seen[l.Share] {
			t.Fatalf("mount %s names share %q twice", m.Prefix, l.Share)
		}
		seen[l.Share] = true
		if _, err := get[shareRec](context.Background(), c.st, pfxShare+l.Share); err != nil {
			t.Fatalf("mount %s names share %q, not registered: %v", m.Prefix, l.Share, err)
		}
	}
}

// storedMount is the entry of the mount table at prefix.
func storedMount(t *testing.T, c *Controller, prefix string) wire.MountEntry {
	t.Helper()
	mounts, err := loadMounts(context.Background(), c.st)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(mounts, func(m wire.MountEntry) bool { return m.Prefix == prefix })
	if i < 0 {
		t.Fatalf("no mount at %s: %+v", prefix, mounts)
	}
	return mounts[i]
}

func mountAddAs(c *Controller, sc *rpc.ServerConn, m wire.MountEntry) error {
	meta, err := wire.Marshal(m)
	if err != nil {
		return err
	}
	_, err = c.Serve(context.Background(), &rpc.Request{Op: wire.OpMountAdd, Meta: meta, Conn: sc})
	return err
}

// TestMountLocations: an entry with a replica is stored with its paths
// trimmed, listed whole, and resolved to its primary.
func TestMountLocations(t *testing.T) {
	c := fuzzController(t)
	admin := userConn("admin")
	if err := mountAddAs(c, admin, wire.MountEntry{Prefix: "/fz/two", Share: "data", SharePath: "/a/", More: []wire.Location{{Share: "copy", SharePath: "/b/c/", Kind: wire.LocReplica}}}); err != nil {
		t.Fatal(err)
	}
	m := storedMount(t, c, "/fz/two")
	want := []wire.Location{{Share: "data", SharePath: "a", Kind: wire.LocPrimary}, {Share: "copy", SharePath: "b/c", Kind: wire.LocReplica}}
	if got := m.Locations(); !slices.Equal(got, want) {
		t.Fatalf("stored locations %+v, want %+v", got, want)
	}
	checkStoredLocations(t, c, m)

	meta, _ := wire.Marshal(wire.ResolveReq{Path: "/fz/two/f"})
	rep, err := c.Serve(context.Background(), &rpc.Request{Op: wire.OpResolve, Meta: meta, Conn: admin})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Msg.(wire.ResolveResp); r.Share != "data" || r.SharePath != "a" {
		t.Fatalf("resolved to %s:%s, want the primary data:a", r.Share, r.SharePath)
	}
}

// TestMountLocationsRefused: a malformed or hostile list of locations is
// refused with one sentence naming the fault, and nothing is stored.
func TestMountLocationsRefused(t *testing.T) {
	c := fuzzController(t)
	admin := userConn("admin")
	before := snapshot(t, c)
	rep := func(n int) []wire.Location {
		out := make([]wire.Location, n)
		for i := range out {
			out[i] = wire.Location{Share: "copy", SharePath: strings.Repeat("x/", i+1), Kind: wire.LocReplica}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		more []wire.Location
		code wire.Code
		msg  string
	}{
		{"too many", rep(wire.MountLocationsMax), wire.CodeInvalid, "at most 16"},
		{"share twice", []wire.Location{{Share: "copy", Kind: wire.LocReplica}, {Share: "copy", SharePath: "z", Kind: wire.LocReplica}}, wire.CodeInvalid, `"copy" a second time`},
		{"the primary again", []wire.Location{{Share: "data", SharePath: "other", Kind: wire.LocReplica}}, wire.CodeInvalid, `"data" a second time`},
		{"unknown share", []wire.Location{{Share: "nosuch", Kind: wire.LocReplica}}, wire.CodeNotRegistered, `"nosuch" is not registered`},
		{"empty share", []wire.Location{{Kind: wire.LocReplica}}, wire.CodeNotRegistered, "is not registered"},
		{"path out", []wire.Location{{Share: "copy", SharePath: "a/../../etc", Kind: wire.LocReplica}}, wire.CodeInvalid, "share path"},
		{"second primary", []wire.Location{{Share: "copy", Kind: wire.LocPrimary}}, wire.CodeInvalid, "second primary"},
		{"no kind", []wire.Location{{Share: "copy"}}, wire.CodeInvalid, "kind 0"},
		{"unknown kind", []wire.Location{{Share: "copy", Kind: 200}}, wire.CodeInvalid, "kind 200"},
		{"a domain", []wire.Location{{Share: "other", Kind: wire.LocDomain}}, wire.CodeInvalid, "not through a mount entry"},
		{"good then bad", []wire.Location{{Share: "copy", Kind: wire.LocReplica}, {Share: "nosuch", Kind: wire.LocReplica}}, wire.CodeNotRegistered, "nosuch"},
	} {
		err := mountAddAs(c, admin, wire.MountEntry{Prefix: "/fz/new", Share: "data", More: tc.more})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != tc.code || !strings.Contains(we.Message, tc.msg) {
			t.Errorf("%s: got %v, want code %d and %q", tc.name, err, tc.code, tc.msg)
		}
	}
	if after := snapshot(t, c); after != before {
		t.Fatal("refused mounts changed the state")
	}
	// The most a mount may name, each a share of its own, is accepted.
	most := make([]wire.Location, wire.MountLocationsMax-1)
	for i := range most {
		name := fmt.Sprintf("r%d", i)
		if err := put(context.Background(), c.st, pfxShare+name, shareRec{Name: name}); err != nil {
			t.Fatal(err)
		}
		most[i] = wire.Location{Share: name, Kind: wire.LocReplica}
	}
	if err := mountAddAs(c, admin, wire.MountEntry{Prefix: "/fz/new", Share: "data", More: most}); err != nil {
		t.Fatal(err)
	}
	mounts, err := loadMounts(context.Background(), c.st)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		checkStoredLocations(t, c, m)
	}
}

// TestMountRecordOfOldController: a record an older controller stored
// (keys 1 to 3 only; these bytes are one) is read with its one location.
func TestMountRecordOfOldController(t *testing.T) {
	c := fuzzController(t)
	old, _ := hex.DecodeString("a30168" + hex.EncodeToString([]byte("/fz/olds")) + "0264" + hex.EncodeToString([]byte("data")) + "0361" + hex.EncodeToString([]byte("p")))
	if err := c.st.Put(context.Background(), pfxMount+"/fz/olds", old); err != nil {
		t.Fatal(err)
	}
	if got, want := storedMount(t, c, "/fz/olds").Locations(), []wire.Location{{Share: "data", SharePath: "p", Kind: wire.LocPrimary}}; !slices.Equal(got, want) {
		t.Fatalf("old record read as %+v, want %+v", got, want)
	}
}
