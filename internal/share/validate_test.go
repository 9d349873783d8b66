package share

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// A validation says which listings are what a readdir gives now: a
// directory listed before and unchanged is; one with another sum, one
// gone, a file, a symlink leading out of the share, and one the principal
// may not list are not. Attributes alone are compared as getattr gives
// them. Under a callback session the share holds the
// agent as having listed every directory it could reach, so that a later
// change recalls it.
func TestValidateListings(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"d/sub", "e", "secret"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "d/a"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(root, "x"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "out"))
	s, login := serverLogin(t, root, []auth.Grant{{Path: "", Rights: auth.List | auth.Read}, {Path: "secret", Rights: 0}})
	sc := login("s1")
	if err := serveAs(t, s, sc, wire.OpGetInv, wire.GetInvReq{Tok: 1, Session: "s1", Wait: 1, Lease: int64(10 * time.Second)}, nil); err != nil {
		t.Fatal(err)
	}
	var l wire.ReadDirResp
	if err := serveAs(t, s, sc, wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: "d"}, &l); err != nil {
		t.Fatal(err)
	}
	s.inv.mu.Lock()
	s.inv.sessions["admin@fuzz/s1"].holds = nil // as if it listed d in an earlier run
	s.inv.mu.Unlock()
	var x wire.AttrResp
	if err := serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "x"}, &x); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, wire.ListingSumSize)
	req := wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{
		{Path: "d", Sum: wire.ListingSum(l.Dir, l.Entries)},
		{Path: "x", Sum: wire.AttrSum(x.Attr), Attr: true},
		{Path: "e", Sum: zero}, {Path: "gone", Sum: zero}, {Path: "x", Sum: zero},
		{Path: "out", Sum: zero}, {Path: "secret", Sum: zero}, {Path: "d", Sum: wire.AttrSum(x.Attr), Attr: true},
	}}
	var resp wire.ValidateResp
	if err := serveAs(t, s, sc, wire.OpValidate, req, &resp); err != nil {
		t.Fatal(err)
	}
	for i, d := range req.Dirs {
		if resp.Same(i) != (i <= 1) {
			t.Errorf("%d (%s): unchanged %v; want %v", i, d.Path, resp.Same(i), i <= 1)
		}
	}
	if h := holdsOf(s, "admin@fuzz/s1"); !h["d"] || !h["e"] || h["secret"] {
		t.Errorf("holds after the validation: %v; want d and e (as a readdir would), not secret", h)
	}
	// A change of d now is no longer what the agent holds.
	os.WriteFile(filepath.Join(root, "d/new"), nil, 0o644)
	if err := serveAs(t, s, sc, wire.OpValidate, wire.ValidateReq{Tok: 1, Dirs: req.Dirs[:1]}, &resp); err != nil || resp.Same(0) {
		t.Errorf("d after a file was added: %v, unchanged %v; want changed", err, resp.Same(0))
	}
}

// A validation that is malformed as a whole is refused with one clear
// error before anything is looked at (no hold granted), and the share
// goes on serving.
func TestValidateRefusals(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	s, login := serverLogin(t, root, []auth.Grant{{Path: "", Rights: auth.List | auth.Read}})
	sc := login("s1")
	if err := serveAs(t, s, sc, wire.OpGetInv, wire.GetInvReq{Tok: 1, Session: "s1", Wait: 1, Lease: int64(10 * time.Second)}, nil); err != nil {
		t.Fatal(err)
	}
	sum := make([]byte, wire.ListingSumSize)
	many := make([]wire.DirCheck, wire.ValidateMax+1)
	for i := range many {
		many[i] = wire.DirCheck{Path: "d", Sum: sum}
	}
	for _, c := range []struct {
		name string
		req  wire.ValidateReq
		code wire.Code
	}{
		{"too many directories", wire.ValidateReq{Tok: 1, Dirs: many}, wire.CodeInvalid},
		{"a path out of the share", wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{{Path: "d", Sum: sum}, {Path: "../etc", Sum: sum}}}, wire.CodeEscape},
		{"an absolute path", wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{{Path: "d", Sum: sum}, {Path: "/etc", Sum: sum}}}, wire.CodeEscape},
		{"a short sum", wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{{Path: "d", Sum: sum}, {Path: "d", Sum: sum[:3]}}}, wire.CodeInvalid},
		{"no token", wire.ValidateReq{Tok: 9, Dirs: []wire.DirCheck{{Path: "d", Sum: sum}}}, 0},
	} {
		err := serveAs(t, s, sc, wire.OpValidate, c.req, nil)
		if err == nil || c.code != 0 && wire.CodeOf(err) != c.code {
			t.Errorf("%s: %v; want a refusal (code %d)", c.name, err, c.code)
		} else if len(err.Error()) > 300 {
			t.Errorf("%s: a refusal of %d bytes: %.300s", c.name, len(err.Error()), err)
		}
		if h := holdsOf(s, "admin@fuzz/s1"); len(h) != 0 {
			t.Errorf("%s: holds %v after the refusal; want none", c.name, h)
		}
	}
	var resp wire.ValidateResp
	if err := serveAs(t, s, sc, wire.OpValidate, wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{{Path: "d", Sum: sum}}}, &resp); err != nil || len(resp.Unchanged) != 1 {
		t.Errorf("a validation after the refusals: %v, %v", err, resp)
	}
}

// holdsOf returns the paths session id holds.
func holdsOf(s *Server, id string) map[string]bool {
	s.inv.mu.Lock()
	defer s.inv.mu.Unlock()
	out := make(map[string]bool)
	if ss := s.inv.sessions[id]; ss != nil {
		for p := range ss.holds {
			out[p] = true
		}
	}
	return out
}

// FuzzValidate sends validations of arbitrary paths (one a line) and
// flags: the share answers each with a bit a path or a *wire.Error, never
// a panic; never says a path is unchanged but for the one sum that is
// right; and changes nothing, inside its root or out.
func FuzzValidate(f *testing.F) {
	f.Add([]byte("d\nd/e\n../x\nout\nup/sub\n/etc\nd//e\n"), uint64(0b1010))
	f.Add([]byte("\n.\netc\nd/f"), uint64(0xffff))
	s, sc := fuzzServer(f)
	outside := filepath.Join(filepath.Dir(s.cfg.Root), "outside")
	before, inside := treeState(f, outside), treeState(f, s.cfg.Root)
	var l wire.ReadDirResp
	if err := serveAs(f, s, sc, wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: "d"}, &l); err != nil {
		f.Fatal(err)
	}
	right := wire.ListingSum(l.Dir, l.Entries)
	f.Fuzz(func(t *testing.T, paths []byte, flags uint64) {
		var req wire.ValidateReq
		req.Tok = 1
		for i, p := range bytes.Split(paths, []byte("\n")) {
			c := wire.DirCheck{Path: string(p), Sum: make([]byte, wire.ListingSumSize), Attr: flags&(1<<(i%64)) != 0}
			if i == 0 {
				c.Sum = right
			}
			req.Dirs = append(req.Dirs, c)
		}
		var resp wire.ValidateResp
		if err := serveAs(t, s, sc, wire.OpValidate, req, &resp); err == nil {
			if len(resp.Unchanged) != (len(req.Dirs)+7)/8 {
				t.Fatalf("%d directories, %d bytes of answer", len(req.Dirs), len(resp.Unchanged))
			}
			for i, c := range req.Dirs {
				if resp.Same(i) && (i != 0 || c.Attr || c.Path != "d") {
					t.Fatalf("%q (attr %v) unchanged with a sum that is not its own", c.Path, c.Attr)
				}
			}
		}
		if treeState(t, outside) != before || treeState(t, s.cfg.Root) != inside {
			t.Fatal("a validation changed files")
		}
	})
}
