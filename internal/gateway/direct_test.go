package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"pando.dev/pando/internal/testenv"
)

// TestDirectReads: a file the cache holds whole is served from the
// cache's data file (sendfile on a clear connection, plain reads over
// TLS), through HTTP, HTTP in clear and S3, whole and ranged, with the
// right bytes; a file the cache holds only in part, and a file changed at
// the share since it was cached, are served through the vfs, with the
// right bytes too.
func TestDirectReads(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, false)
	e.startS3(t)
	clear := e.serveClear(t, false)

	const size = 5<<20 + 7
	testenv.MakeFile(t, filepath.Join(e.root, "f.bin"), size)
	want, _ := os.ReadFile(filepath.Join(e.root, "f.bin"))
	get := func(what, url string, rng string, from, to int, s3 bool) {
		t.Helper()
		args := []string{url}
		if rng != "" {
			args = []string{"-r", rng, url}
		}
		var code int
		var body string
		if s3 {
			code, body, _ = e.curlS3(t, "alice", args...)
		} else {
			code, body, _ = e.curl(t, "pw:alice", args...)
		}
		wantCode := 200
		if rng != "" {
			wantCode = 206
		}
		if code != wantCode || body != string(want[from:to]) {
			t.Fatalf("%s: %d, %d bytes, want %d and bytes [%d, %d) of the file", what, code, len(body), wantCode, from, to)
		}
	}
	direct := func() int64 { return e.g.Stats().Direct }

	// The first read fetches the file; it ends with the cache holding it
	// whole, on disk, for the reads after it.
	get("cold GET", e.url+"/d/data/f.bin", "", 0, size, false)
	if n := direct(); n != 0 {
		t.Fatalf("a cold read was counted as read from the cache file (%d)", n)
	}
	cases := []struct {
		what, url, rng string
		from, to       int
		s3             bool
	}{
		{"warm GET over TLS", e.url + "/d/data/f.bin", "", 0, size, false},
		{"warm ranged GET over TLS across a block boundary", e.url + "/d/data/f.bin", "1048570-1048589", 1048570, 1048590, false},
		{"warm GET in clear (sendfile)", clear + "/d/data/f.bin", "", 0, size, false},
		{"warm ranged GET in clear, the tail", clear + "/d/data/f.bin", "5242880-", 5242880, size, false},
		{"warm S3 GetObject", e.s3url + "/data/f.bin", "", 0, size, true},
		{"warm ranged S3 GetObject", e.s3url + "/data/f.bin", "3-4194310", 3, 4194311, true},
	}
	for i, c := range cases {
		get(c.what, c.url, c.rng, c.from, c.to, c.s3)
		if n := direct(); n != int64(i+1) {
			t.Fatalf("%s: %d reads from the cache file, want %d", c.what, n, i+1)
		}
	}

	// Changed at the share (another size, then the same size with other
	// bytes): once the consistency window (1 s) has passed, the new
	// bytes are served, never the cached ones.
	for _, sz := range []int64{size + 4096, size + 4096} {
		time.Sleep(1100 * time.Millisecond)
		if len(want) == int(sz) {
			for i := range want {
				want[i] ^= 0x5a
			}
		} else {
			want = make([]byte, sz)
			for i := range want {
				want[i] = byte(i * 7)
			}
		}
		if err := os.WriteFile(filepath.Join(e.root, "f.bin"), want, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		before := direct()
		get("GET in clear after a change at the share", clear+"/d/data/f.bin", "", 0, int(sz), false)
		if n := direct(); n != before {
			t.Fatalf("the first read after a change was counted as read from the cache file")
		}
		get("ranged S3 GetObject after a change", e.s3url+"/data/f.bin", "100-200", 100, 201, true)
		get("warm GET of the new version over TLS", e.url+"/d/data/f.bin", "", 0, int(sz), false)
	}

	// Held in part: a ranged read of a file not read before leaves the
	// cache with some of its blocks only; the reads after it go through
	// the vfs, which fetches the rest.
	testenv.MakeFile(t, filepath.Join(e.root, "g.bin"), size)
	want, _ = os.ReadFile(filepath.Join(e.root, "g.bin"))
	// A name made at the share is seen once the window has passed over
	// the directory's attributes, which S3's bucket check has just read.
	time.Sleep(1100 * time.Millisecond)
	before := direct()
	get("cold ranged GET in clear", clear+"/d/data/g.bin", "2097152-2097251", 2097152, 2097252, false)
	get("ranged GET of a file held in part", clear+"/d/data/g.bin", "4194304-4194403", 4194304, 4194404, false)
	get("GET of a file held in part", clear+"/d/data/g.bin", "", 0, size, false)
	if n := direct(); n != before {
		t.Fatalf("a file the cache held in part was read from the cache file (%d reads, %d before)", n, before)
	}
	get("GET once held whole", clear+"/d/data/g.bin", "", 0, size, false)
	if n := direct(); n != before+1 {
		t.Fatalf("a file held whole was not read from the cache file (%d reads, %d before)", n, before)
	}
}
