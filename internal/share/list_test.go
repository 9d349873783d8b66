package share

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// A listing that asks for them carries the contents of the small regular
// files the principal may read, within the budget, each with the
// attributes of the version it is; a listing that does not ask (an older
// agent's) carries none.
func TestListingCarriesSmallFiles(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d/sub"), 0o755)
	files := map[string][]byte{
		"a.c":      bytes.Repeat([]byte("a"), 3000),
		"b.h":      bytes.Repeat([]byte("b"), 5000),
		"big.o":    bytes.Repeat([]byte("o"), 9000), // above DataMax
		"secret.c": []byte("no read right"),
		"empty":    nil,
	}
	for n, b := range files {
		os.WriteFile(filepath.Join(root, "d", n), b, 0o644)
	}
	os.Symlink("a.c", filepath.Join(root, "d/link"))
	s, sc := serverWith(t, root, []auth.Grant{
		{Path: "", Rights: auth.List | auth.Read},
		{Path: "d/secret.c", Rights: auth.List},
	})
	list := func(req any) (wire.ReadDirResp, []byte) {
		t.Helper()
		meta, _ := wire.Marshal(req)
		rep, err := s.Serve(context.Background(), &rpc.Request{Op: wire.OpReadDir, Meta: meta, Conn: sc})
		if err != nil {
			t.Fatal(err)
		}
		data := append([]byte(nil), rep.Data...)
		if rep.Release != nil {
			rep.Release()
		}
		return rep.Msg.(wire.ReadDirResp), data
	}

	resp, data := list(wire.ReadDirReq{Tok: 1, Path: "d", DataMax: 8192, DataBudget: 1 << 20})
	off := int64(0)
	got := map[string]bool{}
	for _, e := range resp.Entries {
		if !e.Data {
			continue
		}
		got[e.Name] = true
		b := data[off : off+e.Attr.Size]
		off += e.Attr.Size
		if !bytes.Equal(b, files[e.Name]) {
			t.Errorf("%s: the listing's bytes differ from the file's", e.Name)
		}
		a, err := s.lstat("d/" + e.Name)
		if err != nil || a.Version != e.Attr.Version || a.Ino != e.Attr.Ino {
			t.Errorf("%s: listed as version %d, the file is at %d (%v)", e.Name, e.Attr.Version, a.Version, err)
		}
	}
	if off != int64(len(data)) {
		t.Errorf("the data part holds %d bytes, the entries marked %d", len(data), off)
	}
	if !got["a.c"] || !got["b.h"] || len(got) != 2 {
		t.Errorf("contents sent for %v; want a.c and b.h only (not too big, unreadable, empty, links, directories)", got)
	}

	// The budget bounds the whole: only one of the two fits.
	resp, data = list(wire.ReadDirReq{Tok: 1, Path: "d", DataMax: 8192, DataBudget: 6000})
	n := 0
	for _, e := range resp.Entries {
		if e.Data {
			n++
		}
	}
	if n != 1 || len(data) > 6000 {
		t.Errorf("a budget of 6000 bytes: %d files, %d bytes", n, len(data))
	}

	// Not asked (the request of an agent that does not know the fields).
	resp, data = list(wire.PathReq{Tok: 1, Path: "d"})
	for _, e := range resp.Entries {
		if e.Data {
			t.Errorf("%s: contents sent unasked", e.Name)
		}
	}
	if len(data) != 0 || len(resp.Entries) != 7 {
		t.Errorf("a plain listing: %d entries, %d bytes of data", len(resp.Entries), len(data))
	}
}

// The new request reads as the old one where its fields are absent, and
// an old share reads the new one as a plain listing.
func TestReadDirReqIsPathReq(t *testing.T) {
	a, _ := wire.Marshal(wire.ReadDirReq{Tok: 3, Path: "x/y"})
	b, _ := wire.Marshal(wire.PathReq{Tok: 3, Path: "x/y"})
	if !bytes.Equal(a, b) {
		t.Errorf("a listing asking for no data encodes as %x, a PathReq as %x", a, b)
	}
	c, _ := wire.Marshal(wire.ReadDirReq{Tok: 3, Path: "x/y", DataMax: 1, DataBudget: 2})
	var p wire.PathReq
	if err := wire.Unmarshal(c, &p); err != nil || p.Tok != 3 || p.Path != "x/y" {
		t.Errorf("a listing asking for data, read as a PathReq: %+v, %v", p, err)
	}
}
