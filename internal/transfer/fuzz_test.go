package transfer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzJournal: a transfer journal read back from disk (torn by a crash,
// or written by someone else) never makes a resume misbehave. Arbitrary
// bytes never panic; a journal accepted for a transfer has one bit and
// one sum for each of its blocks, so that every lookup a resume makes is
// in range, counts no more bytes committed than the file has, and saves
// and loads again unchanged.
func FuzzJournal(f *testing.F) {
	in := Info{Size: 3<<16 + 5, Mtime: 1e18, Version: 4}
	j := newJournal("", "/src/f", "pando://d/data/f", in, 1<<16)
	j.mark(0, 0xdeadbeef)
	j.mark(3, 7)
	good, _ := json.Marshal(j)
	f.Add(good)
	j.Unsynced = true
	unsynced, _ := json.Marshal(j)
	f.Add(unsynced)
	f.Add([]byte(`{"source":"a","dest":"b","size":-1,"block":0,"done":[],"sums":[]}`))
	f.Add([]byte(`{"source":"a","dest":"b","size":100,"block":1,"done":[1],"sums":[1]}`))
	f.Add(good[:len(good)/2])
	p := filepath.Join(f.TempDir(), "j.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var claim journal
		decodes := json.Unmarshal(b, &claim) == nil
		if _, _, committed, err := ReadJournal(p); err == nil && (committed < 0 || committed > max(claim.Size, 0)) {
			t.Fatalf("ReadJournal: %d bytes committed of a file of %d", committed, claim.Size)
		}
		// Load it for the transfer it claims to describe.
		if !decodes || claim.Block <= 0 || claim.Size < 0 {
			return
		}
		in := Info{Size: claim.Size, Mtime: claim.Mtime, Version: claim.Version}
		jr, err := loadJournal(p, claim.Source, claim.Dest, in, claim.Block)
		if err != nil {
			t.Fatal(err)
		}
		if jr == nil {
			return
		}
		n := blocksOf(in.Size, claim.Block)
		for i := 0; i < n; i++ {
			_ = jr.done(i) // in range for every block
			_ = jr.Sums[i]
		}
		if c := jr.committed(); c < 0 || c > in.Size {
			t.Fatalf("%d bytes committed of a file of %d", c, in.Size)
		}
		if err := jr.save(); err != nil {
			t.Fatal(err)
		}
		again, err := loadJournal(p, claim.Source, claim.Dest, in, claim.Block)
		if err != nil || again == nil {
			t.Fatalf("a saved journal does not load: %v", err)
		}
		if !reflect.DeepEqual(again, jr) {
			t.Fatalf("journal changed in a save and load:\n%+v\n%+v", jr, again)
		}
	})
}
