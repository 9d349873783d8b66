package client

import (
	"bytes"
	"path"
	"testing"

	"pando.dev/pando/internal/wire"
)

func TestListingRefusesNamesOutsideTheDirectory(t *testing.T) {
	loc := Loc{Share: "data", Global: "/uva/data/dir"}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "/etc", "a\x00b"} {
		entries := []wire.DirEntry{{Name: "ok"}, {Name: bad, Attr: wire.Attr{Ino: 9, Size: 1}, Data: true}}
		err := checkListing(entries, loc)
		if wire.CodeOf(err) != wire.CodeIO {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if err := checkListing([]wire.DirEntry{{Name: "a"}, {Name: "b"}, {Name: "a"}}, loc); wire.CodeOf(err) != wire.CodeIO {
		t.Errorf("duplicate name: %v", err)
	}
	if err := checkListing([]wire.DirEntry{{Name: "a"}, {Name: "..."}, {Name: ".a"}}, loc); err != nil {
		t.Errorf("good names refused: %v", err)
	}
}

func TestPageRefusesNamesOutOfOrder(t *testing.T) {
	loc := Loc{Share: "data", Global: "/uva/data/dir"}
	for _, c := range []struct {
		after string
		names []string
		ok    bool
	}{
		{"", []string{"a", "b", "c"}, true},
		{"a", []string{"b", "c"}, true},
		{"a", []string{"a", "b"}, false},     // the cookie itself
		{"b", []string{"a", "c"}, false},     // before the cookie
		{"", []string{"a", "c", "b"}, false}, // out of order
		{"", []string{"a", "../b"}, false},   // what checkListing refuses
	} {
		entries := make([]wire.DirEntry, len(c.names))
		for i, n := range c.names {
			entries[i].Name = n
		}
		err := checkPage(entries, c.after, loc)
		if c.ok != (err == nil) || err != nil && wire.CodeOf(err) != wire.CodeIO {
			t.Errorf("after %q, %q: %v", c.after, c.names, err)
		}
	}
}

// FuzzListing: a share's reply to a listing (meta and data part, as a
// hostile share might send them). Whatever is accepted names distinct
// entries of the directory listed only, and the contents handed on are
// exactly the data part cut in the order and sizes the marked entries
// say, each within the size asked for; a data part that does not add up
// is dropped whole, with every mark.
func FuzzListing(f *testing.F) {
	good := wire.ReadDirResp{Entries: []wire.DirEntry{
		{Name: "a", Attr: wire.Attr{Ino: 2, Mode: 0o100644, Size: 3, Version: 1}, Data: true},
		{Name: "d", Attr: wire.Attr{Ino: 3, Mode: 0o40755}},
		{Name: "b", Attr: wire.Attr{Ino: 4, Mode: 0o100644, Size: 2, Version: 5}, Data: true},
	}, Dir: wire.Attr{Ino: 1, Mode: 0o40755}}
	meta, _ := wire.Marshal(good)
	f.Add(meta, []byte("abcde"), uint32(64<<10))
	f.Add(meta, []byte("abcd"), uint32(64<<10))
	f.Add(meta, []byte("abcde"), uint32(0))
	evil := good
	evil.Entries = append([]wire.DirEntry{{Name: "../../other/x", Attr: wire.Attr{Ino: 7, Size: 1}, Data: true}}, good.Entries...)
	meta2, _ := wire.Marshal(evil)
	f.Add(meta2, []byte("Xabcde"), uint32(64<<10))
	dup := good
	dup.Entries = append([]wire.DirEntry{{Name: "a", Attr: wire.Attr{Ino: 2, Size: 3, Version: 2}}}, good.Entries...)
	meta3, _ := wire.Marshal(dup)
	f.Add(meta3, []byte("abcde"), uint32(64<<10))
	const dir = "/uva/data/dir"
	f.Fuzz(func(t *testing.T, meta, raw []byte, fileMax uint32) {
		var resp wire.ReadDirResp
		if wire.Unmarshal(meta, &resp) != nil {
			return
		}
		if err := checkListing(resp.Entries, Loc{Share: "data", Global: dir}); err != nil {
			if _, ok := err.(*wire.Error); !ok {
				t.Fatalf("refusal of type %T", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range resp.Entries {
			if path.Dir(path.Join(dir, e.Name)) != dir || path.Base(path.Join(dir, e.Name)) != e.Name || seen[e.Name] {
				t.Fatalf("accepted the entry %q", e.Name)
			}
			seen[e.Name] = true
		}
		marked := 0
		for _, e := range resp.Entries {
			if e.Data {
				marked++
			}
		}
		data := splitListData(resp.Entries, raw, fileMax)
		if data == nil {
			for _, e := range resp.Entries {
				if e.Data {
					t.Fatalf("entry %q keeps its mark with no data", e.Name)
				}
			}
			return
		}
		off := 0
		for _, e := range resp.Entries {
			b, ok := data[e.Name]
			if !e.Data {
				if ok {
					t.Fatalf("contents for %q, which was not marked", e.Name)
				}
				continue
			}
			if e.Attr.Size <= 0 || e.Attr.Size > int64(fileMax) || int64(len(b)) != e.Attr.Size || cap(b) != len(b) {
				t.Fatalf("contents of %q: %d bytes (cap %d) for size %d, at most %d", e.Name, len(b), cap(b), e.Attr.Size, fileMax)
			}
			if !bytes.Equal(b, raw[off:off+len(b)]) {
				t.Fatalf("contents of %q out of order", e.Name)
			}
			off += len(b)
		}
		if off != len(raw) || len(data) != marked {
			t.Fatalf("%d of %d bytes handed on, %d contents for %d marks", off, len(raw), len(data), marked)
		}
	})
}
