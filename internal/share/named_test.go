package share

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// namedServer is a share over root with limits lim, and a function that
// opens a connection of a user (a principal of its own) holding a token
// with every right (slot 1).
func namedServer(t *testing.T, root string, lim Limits) (*Server, func(user string) *rpc.ServerConn) {
	t.Helper()
	pub, priv, err := auth.NewTokenKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Name: "fz", Domain: "fuzz", Root: root, TokenKey: pub, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, func(user string) *rpc.ServerConn {
		now := time.Now()
		signed, err := auth.SignToken(priv, &auth.Token{ID: "t-" + user, Principal: user + "@fuzz", Share: "fz",
			Grants: []auth.Grant{{Path: "", Rights: auth.All}}, Issued: now, Expires: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		sc := &rpc.ServerConn{State: &session{peer: auth.Identity{Domain: "fuzz", Role: auth.RoleUser, Name: user}}}
		meta, _ := wire.Marshal(wire.AuthReq{Token: signed})
		if _, err := s.Serve(context.Background(), &rpc.Request{Op: wire.OpAuth, Meta: meta, Conn: sc}); err != nil {
			t.Fatal(err)
		}
		return sc
	}
}

func codeOf(err error) wire.Code {
	var we *wire.Error
	if !errors.As(err, &we) {
		return 0
	}
	return we.Code
}

// TestNamedStage: a named stage outlives its handle and its connection,
// and is found again with what it holds; the file is unchanged until the
// commit. Names are hostile input: bad ones, a stage of another file,
// another principal's stage, and a principal's count and bytes past the
// limits are refused, and nothing changes.
func TestNamedStage(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "f")
	old := patterned(1, 200)
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "g"), []byte("g"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, login := namedServer(t, root, Limits{Stages: 2, StageBytes: 64, StageIdle: time.Hour})
	alice := login("alice")
	open := func(sc *rpc.ServerConn, path string) uint64 {
		t.Helper()
		var r wire.OpenResp
		if err := serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: path, Flags: wire.OpenRead | wire.OpenWrite}, &r); err != nil {
			t.Fatal(err)
		}
		return r.Handle
	}
	attach := func(sc *rpc.ServerConn, h uint64, name string) (wire.OpenResp, error) {
		var r wire.OpenResp
		err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: h, Name: name}, &r)
		return r, err
	}
	write := func(sc *rpc.ServerConn, h uint64, off int64, data string) error {
		return serveData(t, s, sc, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: h, Offset: off}, []byte(data), nil)
	}
	unchanged := func(what string, stages int) {
		t.Helper()
		if got, _ := os.ReadFile(p); !bytes.Equal(got, old) {
			t.Fatalf("%s: the file changed", what)
		}
		if l := leftovers(t, root); len(l) != stages {
			t.Fatalf("%s: %d stages at the share (%v), want %d", what, len(l), l, stages)
		}
	}

	w := open(alice, "f")
	st, err := attach(alice, w, "big.1")
	if err != nil || len(st.Ranges) != 0 {
		t.Fatalf("a new named stage: %+v, %v", st, err)
	}
	if err := write(alice, st.Handle, 10, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, s, alice, wire.OpClose, wire.HandleReq{Handle: st.Handle, Keep: true}, nil); err != nil {
		t.Fatal(err)
	}
	unchanged("a stage closed with keep", 1)

	// The connection goes (the agent was killed); a new one finds the stage.
	s.Closed(alice)
	alice = login("alice")
	w = open(alice, "f")
	st, err = attach(alice, w, "big.1")
	if err != nil || !slices.Equal(st.Ranges, []wire.ByteRange{{Off: 10, Len: 5}}) {
		t.Fatalf("the stage attached again: ranges %v, %v; want [10+5]", st.Ranges, err)
	}
	if err := write(alice, st.Handle, 15, "world"); err != nil {
		t.Fatal(err)
	}
	s.Closed(alice) // lost with the handle attached: kept
	alice = login("alice")
	w = open(alice, "f")
	unchanged("a stage whose connection was lost", 1)

	// Bad names.
	for _, name := range []string{"../f", "a/b", "a\x00b", "é", strings.Repeat("x", wire.MaxStageName+1)} {
		if _, err := attach(alice, w, name); codeOf(err) != wire.CodeInvalid {
			t.Errorf("stage name %q: %v, want a refusal (EINVAL)", name, err)
		}
	}
	unchanged("bad names", 1)
	// Attached through a handle of another file.
	if _, err := attach(alice, open(alice, "g"), "big.1"); codeOf(err) != wire.CodeInvalid || !strings.Contains(err.Error(), "another file") {
		t.Fatalf("a stage attached through another file's handle: %v, want a refusal", err)
	}
	unchanged("a stage of another file", 1)

	// Another principal: the same name is another stage; alice's handles
	// are not bob's.
	bob := login("bob")
	bw := open(bob, "f")
	bst, err := attach(bob, bw, "big.1")
	if err != nil || len(bst.Ranges) != 0 {
		t.Fatalf("bob's stage of alice's name: ranges %v, %v; want a new, empty stage", bst.Ranges, err)
	}
	ast, err := attach(alice, w, "big.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(bob, ast.Handle, 0, "bob was here"); codeOf(err) != wire.CodeBadHandle {
		t.Fatalf("bob writes to alice's stage: %v, want a refusal", err)
	}
	if err := serveAs(t, s, bob, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: ast.Handle, Size: 200}, nil); codeOf(err) != wire.CodeBadHandle {
		t.Fatalf("bob commits alice's stage: %v, want a refusal", err)
	}
	if err := serveAs(t, s, bob, wire.OpClose, wire.HandleReq{Handle: ast.Handle}, nil); codeOf(err) != wire.CodeBadHandle {
		t.Fatalf("bob closes alice's stage: %v, want a refusal", err)
	}
	if err := serveAs(t, s, bob, wire.OpClose, wire.HandleReq{Handle: bst.Handle}, nil); err != nil {
		t.Fatal(err) // bob throws his away
	}
	unchanged("bob's requests", 1)

	// Limits: alice's bytes (10 of 64 used), then her count (1 of 2).
	if err := write(alice, ast.Handle, 100, strings.Repeat("z", 60)); codeOf(err) != wire.CodeQuota {
		t.Fatalf("a write past the bytes of stages: %v, want a refusal (EDQUOT)", err)
	}
	if err := write(alice, ast.Handle, 10, "HELLO"); err != nil {
		t.Fatalf("a write over what the stage holds adds nothing: %v", err)
	}
	if _, err := attach(alice, w, "two"); err != nil {
		t.Fatal(err)
	}
	if _, err := attach(alice, w, "three"); codeOf(err) != wire.CodeAgain {
		t.Fatalf("a stage past the count: %v, want a refusal (EAGAIN)", err)
	}
	unchanged("refusals past the limits", 2)
	ast2, err := attach(alice, w, "big.1")
	if err != nil || !slices.Equal(ast2.Ranges, []wire.ByteRange{{Off: 10, Len: 10}}) {
		t.Fatalf("after the refusals the stage holds %v (%v), want [10+10]", ast2.Ranges, err)
	}

	// The commit applies it, and the name is free again.
	var ar wire.AttrResp
	if err := serveAs(t, s, alice, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: ast.Handle, Size: 200}, &ar); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), old...)
	copy(want[10:], "HELLOworld")
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Fatalf("after the commit the file holds %q, want %q", got[:24], want[:24])
	}
	if err := serveAs(t, s, alice, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: ast2.Handle, Size: 200}, nil); codeOf(err) != wire.CodeBadHandle {
		t.Fatalf("a second commit of a committed stage: %v, want a refusal", err)
	}
	if err := serveAs(t, s, alice, wire.OpClose, wire.HandleReq{Handle: ast2.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t, root); len(l) != 1 { // "two"
		t.Fatalf("after the commit: stages %v, want only the other one", l)
	}
	if st, err := attach(alice, w, "big.1"); err != nil || len(st.Ranges) != 0 {
		t.Fatalf("the name after its commit: %v, %v; want a new, empty stage", st.Ranges, err)
	}
}

// TestNamedStageExpires: a named stage nobody attaches is removed after
// Limits.StageIdle; one attached is not.
func TestNamedStageExpires(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, login := namedServer(t, root, Limits{StageIdle: 100 * time.Millisecond})
	sc := login("alice")
	var o, st wire.OpenResp
	if err := serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite}, &o); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept", "left"} {
		if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: o.Handle, Name: name}, &st); err != nil {
			t.Fatal(err)
		}
	}
	// "left" is released, "kept" stays attached.
	if err := serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: st.Handle, Keep: true}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(leftovers(t, root)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stages left: %v, want the attached one only", leftovers(t, root))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if l := leftovers(t, root); len(l) != 1 {
		t.Fatalf("the attached stage was removed: %v", l)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "old" {
		t.Fatalf("the file changed: %q", got)
	}
}

// TestStageHandlesCounted: a stage's handle counts against its
// principal's open files; past the limit a stage is refused (EMFILE) and
// nothing is made.
func TestStageHandlesCounted(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, login := namedServer(t, root, Limits{Handles: 2})
	sc := login("alice")
	var o, st wire.OpenResp
	if err := serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite}, &o); err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: o.Handle, Name: "one"}, &st); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"two", ""} {
		if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: o.Handle, Name: name}, nil); codeOf(err) != wire.CodeTooManyOpen {
			t.Fatalf("stage %q past the open files: %v, want a refusal (EMFILE)", name, err)
		}
	}
	if l := leftovers(t, root); len(l) != 1 {
		t.Fatalf("stages at the share after the refusals: %v, want the first only", l)
	}
	if err := serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: st.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: o.Handle, Name: "two"}, nil); err != nil {
		t.Fatalf("a stage once one was closed: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "old" {
		t.Fatalf("the file changed: %q", got)
	}
}

// TestNamedStageBytesFull: a principal whose stages hold their bytes'
// limit gets no new stage (EDQUOT), and nothing is made; another
// principal does.
func TestNamedStageBytesFull(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, login := namedServer(t, root, Limits{StageBytes: 16})
	stage := func(sc *rpc.ServerConn, name string) (wire.OpenResp, error) {
		var o, st wire.OpenResp
		if err := serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite}, &o); err != nil {
			t.Fatal(err)
		}
		err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: o.Handle, Name: name}, &st)
		return st, err
	}
	alice := login("alice")
	st, err := stage(alice, "full")
	if err != nil {
		t.Fatal(err)
	}
	if err := serveData(t, s, alice, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: st.Handle}, []byte("sixteen bytes..."), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := stage(alice, "more"); codeOf(err) != wire.CodeQuota {
		t.Fatalf("a new stage with the bytes of stages spent: %v, want a refusal (EDQUOT)", err)
	}
	if l := leftovers(t, root); len(l) != 1 {
		t.Fatalf("stages after the refusal: %v, want the first only", l)
	}
	if _, err := stage(login("bob"), "more"); err != nil {
		t.Fatalf("another principal's stage: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "old" {
		t.Fatalf("the file changed: %q", got)
	}
}
