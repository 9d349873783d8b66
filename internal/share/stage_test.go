package share

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// serveData is serveAs for a request with a data part.
func serveData(t *testing.T, s *Server, sc *rpc.ServerConn, op wire.Op, msg any, data []byte, resp any) error {
	t.Helper()
	meta, err := wire.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Serve(context.Background(), &rpc.Request{Op: op, Meta: meta, Conn: sc, Data: data})
	if err != nil {
		return err
	}
	if resp != nil {
		b, _ := wire.Marshal(rep.Msg)
		if err := wire.Unmarshal(b, resp); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

func patterned(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i/4096)
	}
	return b
}

// leftovers lists the stages and commit records in root (a share without
// a state directory keeps its record slots there: empty ones hold none).
func leftovers(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		fi, _ := e.Info()
		if strings.HasPrefix(e.Name(), stagePrefix) || strings.HasPrefix(e.Name(), journalPrefix) && fi != nil && fi.Size() > 0 {
			out = append(out, e.Name())
		}
	}
	return out
}

func inoOf(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestStageCommit: writes to a stage leave the file as it was, for
// readers through the share too; the commit applies them at once, with
// the size it names (smaller too: O_TRUNC travels so), keeping the file's
// inode; a stage closed instead is thrown away. Refusals change nothing.
func TestStageCommit(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "f")
	old := patterned(1, 3<<20+5)
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	ino := inoOf(t, p)
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	open := func(flags uint32) uint64 {
		t.Helper()
		var r wire.OpenResp
		if err := serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: flags}, &r); err != nil {
			t.Fatal(err)
		}
		return r.Handle
	}
	unchanged := func(what string) {
		t.Helper()
		if got, _ := os.ReadFile(p); !bytes.Equal(got, old) {
			t.Fatalf("%s: the file changed (%d bytes)", what, len(got))
		}
	}
	code := func(err error) wire.Code {
		var we *wire.Error
		if !errors.As(err, &we) {
			return 0
		}
		return we.Code
	}

	ro := open(wire.OpenRead)
	if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: ro}, nil); code(err) != wire.CodeBadHandle {
		t.Fatalf("a stage on a read-only handle: %v, want a refusal", err)
	}
	unchanged("refused stage")
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("a refused stage left %v", l)
	}

	w := open(wire.OpenRead | wire.OpenWrite)
	var sr wire.OpenResp
	if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: w}, &sr); err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: sr.Handle}, nil); code(err) != wire.CodeBadHandle {
		t.Fatalf("a stage of a stage: %v, want a refusal", err)
	}
	news := patterned(9, 1<<20+3)
	var wr wire.WriteResp
	if err := serveData(t, s, sc, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: sr.Handle, Offset: 1 << 20}, news, &wr); err != nil || int(wr.N) != len(news) {
		t.Fatalf("write to a stage: %d bytes, %v", wr.N, err)
	}
	unchanged("written to a stage")
	if err := serveAs(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: w, Size: 1}, nil); code(err) != wire.CodeBadHandle {
		t.Fatalf("a commit of a handle that is no stage: %v, want a refusal", err)
	}
	if err := serveAs(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: sr.Handle, Size: -1}, nil); code(err) != wire.CodeInvalid {
		t.Fatalf("a commit to a negative size: %v, want a refusal", err)
	}
	unchanged("refused commits")
	// The reader closes, so that the commit need not wait for it.
	if err := serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: ro}, nil); err != nil {
		t.Fatal(err)
	}
	size := int64(2<<20 + 3) // shorter than the old file: cut with the data
	var ar wire.AttrResp
	if err := serveAs(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: sr.Handle, Size: size, Sync: true}, &ar); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), old[:1<<20]...), news...)
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Fatalf("after the commit the file holds %d bytes, not the %d of the new version", len(got), len(want))
	}
	if ar.Attr.Size != size || ar.Attr.Ino != ino || inoOf(t, p) != ino {
		t.Fatalf("after the commit: size %d, inode %d (at the share %d); want size %d, inode %d", ar.Attr.Size, ar.Attr.Ino, inoOf(t, p), size, ino)
	}
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("a commit left %v", l)
	}
	if err := serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: sr.Handle}, nil); code(err) != wire.CodeBadHandle {
		t.Fatalf("the stage is still open after its commit (%v)", err)
	}

	// A stage closed instead of committed is thrown away.
	old = want
	if err := serveAs(t, s, sc, wire.OpStage, wire.HandleReq{Tok: 1, Handle: w}, &sr); err != nil {
		t.Fatal(err)
	}
	if err := serveData(t, s, sc, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: sr.Handle}, []byte("never"), nil); err != nil {
		t.Fatal(err)
	}
	if err := serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: sr.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	unchanged("a stage closed")
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("a stage closed left %v", l)
	}

	// Inline: the data comes with the commit.
	two := []wire.ByteRange{{Off: 10, Len: 5}, {Off: 100, Len: 3}}
	ro = open(wire.OpenRead)
	for _, bad := range []struct {
		h    uint64
		data string
		code wire.Code
	}{
		{w, "too short", wire.CodeInvalid},
		{ro, "abcdeXYZ", wire.CodeBadHandle},
	} {
		err := serveData(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: bad.h, Size: 1, Inline: true, Ranges: two}, []byte(bad.data), nil)
		if code(err) != bad.code {
			t.Fatalf("inline commit of %q: %v, want code %d", bad.data, err, bad.code)
		}
		unchanged("refused inline commit")
	}
	backwards := []wire.ByteRange{two[1], two[0]}
	if err := serveData(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: w, Size: 200, Inline: true, Ranges: backwards}, []byte("XYZabcde"), nil); code(err) != wire.CodeInvalid {
		t.Fatalf("an inline commit with ranges out of order: %v, want a refusal", err)
	}
	unchanged("refused inline commit out of order")
	if err := serveData(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: w, Size: 5, Ranges: two}, []byte("abcdeXYZ"), nil); code(err) != wire.CodeInvalid {
		t.Fatalf("a commit with data that is not inline: %v, want a refusal", err)
	}
	unchanged("refused commit with data")
	if err := serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: ro}, nil); err != nil {
		t.Fatal(err)
	}
	if err := serveData(t, s, sc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: w, Size: 200, KeepLonger: true, Inline: true, Ranges: two}, []byte("abcdeXYZ"), &ar); err != nil {
		t.Fatal(err)
	}
	// The file is longer than the writer's 200 bytes: it keeps its size.
	want = append([]byte(nil), old...)
	copy(want[10:], "abcde")
	copy(want[100:], "XYZ")
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) || ar.Attr.Size != int64(len(want)) {
		t.Fatalf("after an inline commit the file holds %d bytes (share says %d), not the %d wanted", len(got), ar.Attr.Size, len(want))
	}
	if inoOf(t, p) != ino {
		t.Fatal("an inline commit changed the file's inode")
	}
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("an inline commit left %v", l)
	}
}

// TestCommitRecovery: a share that stopped in the middle of a commit
// completes it from the stage and its record when it starts, unless the
// name leads to another file by then; either way nothing is left behind.
func TestCommitRecovery(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "f")
	old := patterned(3, 2<<20)
	news := patterned(5, 3<<20)
	// The copy got half way: the first MiB is new, the rest old.
	torn := append(append([]byte(nil), news[:1<<20]...), old[1<<20:]...)
	if err := os.WriteFile(p, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	stage := stagePrefix + "0123456789abcdef"
	if err := os.WriteFile(filepath.Join(root, stage), news, 0o600); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(commitRecord{Stage: stage, Target: "f", Ino: inoOf(t, p), Ranges: []wire.ByteRange{{Off: 0, Len: int64(len(news))}},
		Upto: int64(len(news)), Size: int64(len(news))})
	if err := os.WriteFile(filepath.Join(root, journalPrefix+"a"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	// A record whose name leads to another file now is not applied.
	other := filepath.Join(root, "g")
	if err := os.WriteFile(other, old, 0o644); err != nil {
		t.Fatal(err)
	}
	stage2 := stagePrefix + "fedcba9876543210"
	os.WriteFile(filepath.Join(root, stage2), news, 0o600)
	rec2, _ := json.Marshal(commitRecord{Stage: stage2, Target: "g", Ino: inoOf(t, other) + 1, Ranges: []wire.ByteRange{{Off: 0, Len: 4096}}, Upto: 4096, Size: 4096})
	os.WriteFile(filepath.Join(root, journalPrefix+"b"), rec2, 0o600)
	// An inline commit carries its bytes in its record; it was cut
	// before its first byte reached the file.
	h := filepath.Join(root, "h")
	if err := os.WriteFile(h, old, 0o644); err != nil {
		t.Fatal(err)
	}
	two := []wire.ByteRange{{Off: 5, Len: 3}, {Off: 1 << 20, Len: 4}}
	rec3, _ := json.Marshal(commitRecord{Inline: true, Target: "h", Ino: inoOf(t, h), Ranges: two, Upto: 3 << 20, Size: 3 << 20})
	os.WriteFile(filepath.Join(root, journalPrefix+"inline"), append(append(rec3, '\n'), "abcWXYZ"...), 0o600)
	wantH := append(append([]byte(nil), old...), make([]byte, 1<<20)...)
	copy(wantH[5:], "abc")
	copy(wantH[1<<20:], "WXYZ")

	serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	if got, _ := os.ReadFile(p); !bytes.Equal(got, news) {
		t.Fatalf("after the restart the file holds %d bytes that are not the new version", len(got))
	}
	if got, _ := os.ReadFile(other); !bytes.Equal(got, old) {
		t.Fatalf("a record for another file was applied")
	}
	if got, _ := os.ReadFile(h); !bytes.Equal(got, wantH) {
		t.Fatalf("after the restart the file of an inline commit holds %d bytes, not the new version's %d", len(got), len(wantH))
	}
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("the restart left %v", l)
	}
}

// TestStageUnreachable: no client reaches a stage or a commit record by
// name, directly or through a symlink, nor sees one in a listing; the
// refusals change nothing.
func TestStageUnreachable(t *testing.T) {
	root := t.TempDir()
	stage := stagePrefix + "00112233aabbccdd"
	data := []byte("another client's data on its way")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	// Made after the share started (which sweeps stages left over).
	if err := os.WriteFile(filepath.Join(root, stage), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stage, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op  wire.Op
		msg any
	}{
		{wire.OpOpen, wire.OpenReq{Tok: 1, Path: stage, Flags: wire.OpenWrite}},
		{wire.OpOpen, wire.OpenReq{Tok: 1, Path: "link", Flags: wire.OpenWrite | wire.OpenFollow}},
		{wire.OpCreate, wire.OpenReq{Tok: 1, Path: journalPrefix + "x", Flags: wire.OpenWrite, Mode: 0o644}},
		{wire.OpGetFile, wire.GetFileReq{Tok: 1, Path: stage, Max: 100}},
		{wire.OpUnlink, wire.PathReq{Tok: 1, Path: stage}},
		{wire.OpRename, wire.RenameReq{Tok: 1, Old: "f", New: stage}},
	} {
		err := serveAs(t, s, sc, c.op, c.msg, nil)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeAccess || !strings.Contains(we.Message, "the share's own") {
			t.Errorf("%s %+v: %v, want a refusal", c.op, c.msg, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(root, stage)); !bytes.Equal(got, data) {
		t.Fatal("a refused request changed the stage")
	}
	if _, err := os.Stat(filepath.Join(root, journalPrefix+"x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused create made a commit record")
	}
	var ls wire.ReadDirResp
	if err := serveAs(t, s, sc, wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: ""}, &ls); err != nil {
		t.Fatal(err)
	}
	for _, e := range ls.Entries {
		if isStaging(e.Name) {
			t.Errorf("the root's listing shows %s", e.Name)
		}
	}
}

// TestCommitWaitsForReaders: a commit waits for the read-only handle
// another agent holds on the file, whose reads still see the old version
// meanwhile, and goes ahead once it is closed.
func TestCommitWaitsForReaders(t *testing.T) {
	defer func(w time.Duration) { readerWait = w }(readerWait)
	readerWait = 30 * time.Second // far beyond the test's waits: only the close can end it
	root := t.TempDir()
	p := filepath.Join(root, "f")
	old := patterned(2, 64<<10)
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	s, login := serverLogin(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	wc, rc := login("writer"), login("reader")
	open := func(sc *rpc.ServerConn, flags uint32) uint64 {
		t.Helper()
		var r wire.OpenResp
		if err := serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: flags}, &r); err != nil {
			t.Fatal(err)
		}
		return r.Handle
	}
	rh := open(rc, wire.OpenRead)
	wh := open(wc, wire.OpenRead|wire.OpenWrite)
	news := patterned(7, 64<<10)
	done := make(chan error, 1)
	go func() {
		done <- serveData(t, s, wc, wire.OpCommit, wire.CommitReq{Tok: 1, Handle: wh, Size: int64(len(news)), Inline: true,
			Ranges: []wire.ByteRange{{Off: 0, Len: int64(len(news))}}}, news, nil)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the commit went ahead (%v) while another agent had the file open for reading", err)
	default:
	}
	meta, _ := wire.Marshal(wire.ReadReq{Tok: 1, Handle: rh, Offset: 0, Length: uint32(len(old))})
	rep, err := s.Serve(context.Background(), &rpc.Request{Op: wire.OpRead, Meta: meta, Conn: rc})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rep.Data, old) {
		t.Fatal("a reader whose handle a commit waits for read something else than the old version")
	}
	if rep.Release != nil {
		rep.Release()
	}
	if err := serveAs(t, s, rc, wire.OpClose, wire.HandleReq{Handle: rh}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the commit did not go ahead once the reader closed")
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, news) {
		t.Fatal("the commit did not apply")
	}
}
