package cache

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/fxamacker/cbor/v2"
	bolt "go.etcd.io/bbolt"
)

// fuzzData is the remote content of the file the index fuzzing caches.
var fuzzData = func() []byte {
	b := make([]byte, 3*4096+100)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}()

// fillCache fills a cache in dir with fuzzData under key "f" and returns
// the index record it wrote for it.
func fillCache(tb testing.TB, dir string) []byte {
	c, err := Open(Options{Dir: dir, BlockSize: 4096, MemoryBytes: -1})
	if err != nil {
		tb.Fatal(err)
	}
	r := &remote{Data: fuzzData}
	c.Validate("f", 1, int64(len(fuzzData)), "/d/f")
	buf := make([]byte, len(fuzzData))
	if _, err := c.ReadAt(context.Background(), "f", buf, 0, r.Fetch); err != nil && err != io.EOF {
		tb.Fatal(err)
	}
	c.Sync()
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
	return setRecord(tb, dir, nil)
}

// setRecord replaces the index record of "f" in the cache in dir with rec
// (nil: leaves it) and returns the record that was there.
func setRecord(tb testing.TB, dir string, rec []byte) []byte {
	db, err := bolt.Open(filepath.Join(dir, "index.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var was []byte
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex)
		was = bytes.Clone(b.Get([]byte("f")))
		if rec != nil {
			return b.Put([]byte("f"), rec)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return was
}

// FuzzCacheIndex: a damaged index record (a torn write, a disk error)
// never makes the cache panic or serve bytes the remote does not hold:
// whatever the record claims of blocks, lengths and checksums, a read
// gives the remote's data, but for the ranges the record holds as
// written locally and not yet sent (dirty), which are the cache's own.
func FuzzCacheIndex(f *testing.F) {
	base := f.TempDir()
	good := fillCache(f, base)
	f.Add(good)
	var rec record
	if err := cbor.Unmarshal(good, &rec); err != nil {
		f.Fatal(err)
	}
	for _, change := range []func(r *record){
		func(r *record) { r.Blocks[1] = blockInfo{Len: r.Blocks[1].Len, CRC: r.Blocks[1].CRC ^ 1} },
		func(r *record) { r.Blocks[0] = blockInfo{Len: 1 << 20, CRC: r.Blocks[0].CRC} },
		func(r *record) { r.Blocks[-1] = blockInfo{Len: 4096}; r.Blocks[1<<50] = blockInfo{Len: 4096} },
		func(r *record) { r.Dirty = []Range{{Off: 5, Len: -3}, {Off: 1 << 62, Len: 1 << 62}} },
		func(r *record) { r.Size = -1 },
		func(r *record) { r.Size = 1 << 62; r.Version = 2 },
	} {
		r := rec
		r.Blocks = make(map[int64]blockInfo)
		for k, v := range rec.Blocks {
			r.Blocks[k] = v
		}
		change(&r)
		b, err := cbor.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xa1, 0x03, 0xa1, 0x20, 0xa2, 0x01, 0x19, 0x10, 0x00, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return // bolt keeps no empty values apart from absent ones
		}
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		setRecord(t, dir, b)
		var claimed record
		decodes := cbor.Unmarshal(b, &claimed) == nil
		c, err := Open(Options{Dir: dir, BlockSize: 4096, MemoryBytes: -1})
		if err != nil {
			t.Fatalf("a damaged record keeps the cache from opening: %v", err)
		}
		defer c.Close()
		c.Validate("f", 1, int64(len(fuzzData)), "/d/f")
		got := make([]byte, len(fuzzData))
		n, err := c.ReadAt(context.Background(), "f", got, 0, (&remote{Data: fuzzData}).Fetch)
		if err != nil && err != io.EOF {
			return // a refusal is fine; wrong bytes are not
		}
		for i := 0; i < n; i++ {
			if got[i] == fuzzData[i] {
				continue
			}
			own := false
			if decodes {
				for _, r := range claimed.Dirty {
					own = own || int64(i) >= r.Off && int64(i) < r.End()
				}
			}
			if !own {
				t.Fatalf("byte %d served as %#x, the remote holds %#x", i, got[i], fuzzData[i])
			}
		}
		_ = c.Dirty("f")
		_ = c.List()
		_ = c.Stats()
	})
}
