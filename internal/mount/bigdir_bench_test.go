package mount_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
)

// BenchmarkBigDir: ls -f and ls -l of a directory of PANDO_BENCH_ENTRIES
// entries (default 100,000) through a fresh in-process agent each time,
// with the requests it sent and the heap left after (the share's too: it
// runs in this process), for profiling (-cpuprofile, -memprofile); `pando
// bench bigdir` measures the agent as a process of its own.
func BenchmarkBigDir(b *testing.B) {
	n := envInt("PANDO_BENCH_ENTRIES", 100_000)
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	dir := filepath.Join(root, "big")
	os.Mkdir(dir, 0o755)
	pad := strings.Repeat("x", 26)
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("entry-%07d-%s", i, pad)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	for _, flag := range []string{"-f", "-l"} {
		b.Run("ls"+flag, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				a := startAgent(b, d, vfs.Options{}, cache.Options{})
				p := filepath.Join(a.Mount().Dir(), "bench", "data", "big")
				c0 := a.Client().Counts()
				b.StartTimer()
				out, err := exec.Command("ls", flag, p).Output()
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if got := strings.Count(string(out), "\n"); got < n {
					b.Fatalf("listed %d of %d", got, n)
				}
				c := a.Client().Counts()
				b.ReportMetric(float64(c["readdir"]-c0["readdir"]), "readdirs")
				b.ReportMetric(float64(c["getattr"]-c0["getattr"]), "getattrs")
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapAlloc)/float64(n), "heap-B/entry")
				a.Close()
				b.StartTimer()
			}
		})
	}
}
