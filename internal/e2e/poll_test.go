package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func rpcCount(t *testing.T, a *agentProc, op string) float64 {
	t.Helper()
	n, _ := a.stats(t)["rpcs"].(map[string]any)[op].(float64)
	return n
}

// eventually retries check until it passes or limit runs out, and says how
// long it took.
func eventually(t *testing.T, limit time.Duration, what string, check func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !check() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not seen within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestPollMode: under poll=D an agent answers from its cache between
// polls, and sees changes made through another agent, or directly at the
// share, within D plus one poll.
func TestPollMode(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("version 1"), 0o644)
	const period = 500 * time.Millisecond
	a := mountAgent(t, d.admin, "--consistency", "poll=500ms")
	b := mountAgent(t, d.admin, "--consistency", "poll=500ms")
	fa := filepath.Join(a.dir, "uva", "alpha", "f")
	fb := filepath.Join(b.dir, "uva", "alpha", "f")
	read := func(p string) string { s, _ := os.ReadFile(p); return string(s) }
	if got := read(fb); got != "version 1" {
		t.Fatalf("b reads %q", got)
	}
	time.Sleep(2 * period) // the first poll sets up b's session

	// Between polls, stats cost no getattr.
	before := rpcCount(t, b, "getattr")
	for range 50 {
		if _, err := os.Stat(fb); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := rpcCount(t, b, "getattr") - before; n > 2 {
		t.Errorf("50 stats of an unchanged file cost %v getattr requests under poll", n)
	}
	if rpcCount(t, b, "getinv") == 0 {
		t.Error("no invalidation polls were sent")
	}

	// A change through another agent.
	if err := os.WriteFile(fa, []byte("version 2 from a"), 0o644); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 2*period+time.Second, "a change made through another agent", func() bool { return read(fb) == "version 2 from a" })
	t.Logf("a change through another agent showed after %v", took)

	// A change made directly in the exported directory.
	os.WriteFile(filepath.Join(root, "f"), []byte("version 3 at the share"), 0o644)
	took = eventually(t, 2*period+time.Second, "a change made at the share", func() bool { return read(fb) == "version 3 at the share" })
	t.Logf("a change at the share showed after %v", took)

	// A new file appears in listings.
	os.WriteFile(filepath.Join(a.dir, "uva", "alpha", "new"), []byte("n"), 0o644)
	eventually(t, 2*period+time.Second, "a new file in a listing", func() bool {
		ents, _ := os.ReadDir(filepath.Join(b.dir, "uva", "alpha"))
		return slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "new" })
	})
	st := b.stats(t)
	if s, _ := st["staleness"].(map[string]any)["alpha"].(string); s == "" {
		t.Errorf("stats do not show how stale the poll-mode cache may be: %v", st["staleness"])
	}
	// The same as metrics, for a monitoring system.
	m := runPando(t, "", d.admin, "stats", "--metrics", "--cache-dir", b.cacheDir).ok().stdout
	for _, want := range []string{`pando_share_confirmed_age_seconds{share="alpha"} `, "pando_stale_bound_seconds 0.5\n",
		`pando_rpcs_total{op="getinv"} `, `pando_agent_info{consistency="poll=500ms",`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	// And over TCP for a Prometheus server to scrape (--metrics ADDR).
	c := mountAgent(t, d.admin, "--consistency", "poll=500ms", "--metrics", "127.0.0.1:0")
	var addr string
	eventually(t, 10*time.Second, "the metrics address is printed", func() bool {
		if m := regexp.MustCompile(`metrics at (http://\S+/metrics)`).FindStringSubmatch(c.output()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	resp, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "pando_cache_hits_total ") {
		t.Errorf("metrics over TCP: %s", body)
	}
}
