package wire

import (
	"slices"
	"testing"
)

// mountEntryV1 is MountEntry as agents before multi-location entries
// define it, to check what they read of a newer entry.
type mountEntryV1 struct {
	Prefix    string `cbor:"1,keyasint"`
	Share     string `cbor:"2,keyasint"`
	SharePath string `cbor:"3,keyasint"`
}

// mountListV1 is MountListResp as those agents define it.
type mountListV1 struct {
	Domain      string         `cbor:"1,keyasint"`
	Entries     []mountEntryV1 `cbor:"2,keyasint"`
	Controllers []string       `cbor:"3,keyasint,omitempty"`
}

// TestMountEntryOldReader: an agent that knows one location per entry
// reads a newer entry (and table) as its primary alone, without error.
func TestMountEntryOldReader(t *testing.T) {
	e := MountEntry{Prefix: "/uva/data", Share: "data", SharePath: "exp", More: []Location{
		{Share: "copy", SharePath: "mirror/exp", Kind: LocReplica},
		{Share: "far", Kind: LocReplica},
	}}
	var old mountEntryV1
	if err := Unmarshal(mustMarshal(e), &old); err != nil {
		t.Fatalf("an old agent cannot decode a new entry: %v", err)
	}
	if want := (mountEntryV1{"/uva/data", "data", "exp"}); old != want {
		t.Fatalf("an old agent reads %+v, want %+v", old, want)
	}
	var list mountListV1
	if err := Unmarshal(mustMarshal(MountListResp{Domain: "uva", Entries: []MountEntry{e}, Controllers: []string{"c:1"}}), &list); err != nil {
		t.Fatalf("an old agent cannot decode a new table: %v", err)
	}
	if len(list.Entries) != 1 || list.Entries[0] != old || list.Domain != "uva" || !slices.Equal(list.Controllers, []string{"c:1"}) {
		t.Fatalf("an old agent reads the table as %+v", list)
	}
}

// TestMountEntryFromOld: an entry an old controller or client encoded is
// read as one primary location, and a new entry of one location encodes
// to the same bytes an old one did.
func TestMountEntryFromOld(t *testing.T) {
	b := mustMarshal(mountEntryV1{"/uva/data", "data", "exp"})
	var e MountEntry
	if err := Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if want := []Location{{Share: "data", SharePath: "exp", Kind: LocPrimary}}; !slices.Equal(e.Locations(), want) || e.More != nil {
		t.Fatalf("read as %+v (locations %+v)", e, e.Locations())
	}
	if got := mustMarshal(MountEntry{Prefix: "/uva/data", Share: "data", SharePath: "exp"}); string(got) != string(b) {
		t.Fatalf("a one-location entry encodes to %x, an old one to %x", got, b)
	}
}
