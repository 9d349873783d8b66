package layers

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "pando.dev/pando/"

// rank orders the packages: a package imports only packages of a lower
// rank, and utilities (rank -1), which import no ranked package.
var rank = map[string]int{
	"internal/dio": -1, "internal/fault": -1, "internal/procs": -1, "internal/pattern": -1, "internal/wan": -1,
	"internal/testenv/snap": -1, "internal/holder": -1, "internal/metricsrv": -1, "internal/store/etcdrun": -1, "internal/manpage": -1,
	"internal/wire": 0, "internal/relay": 0, "internal/auth": 0, "internal/audit": 0, "internal/store": 0, "internal/blockcache": 0,
	"internal/remote": 1, // the namespace and data-path interfaces the vfs holds
	"internal/config": 1, "internal/rpc": 1, "internal/store/storetest": 1, "internal/blockcache/cachetest": 1, "internal/store/etcdtest": 1,
	"internal/client": 2, "internal/cache": 2,
	"internal/remote/memory": 2, "internal/remote/remotetest": 2, // an implementation, and the suite every one passes
	"internal/transfer": 3, "internal/share": 3, "internal/controller": 3,
	"internal/consistency": 3, // freshness rules the vfs asks; edges ask through the vfs
	"internal/federation":  3, // one namespace over the home client and linked domains' clients
	"internal/vfs":         4,
	"internal/mount":       5, "internal/web": 5, "internal/nfs": 5, // edges
	"internal/private": 5,                        // a vfs of its own (client, cache) for one user of an edge
	"internal/agent":   6, "internal/gateway": 6, // each runs an edge over its vfs
	"internal/cli": 7, "internal/testenv": 7, "internal/bench": 8, "internal/doctor": 8,
	"cmd/pando": 9, "internal/e2e": 9, "internal/layers": 9,
}

// edges may import, of the ranked packages, only these: the vfs, and
// wire for the types of the vfs's API.
var edges = map[string]bool{"internal/mount": true, "internal/web": true, "internal/nfs": true}

// TestLayers fails when a package imports one above or beside it, when an
// edge imports below the vfs, or when a package has no rank yet.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], mod)
		if !ok {
			continue
		}
		n++
		r, known := rank[pkg]
		if !known {
			t.Errorf("%s has no rank in layers_test.go; give it one", pkg)
			continue
		}
		for _, imp := range f[1:] {
			dep, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			dr, known := rank[dep]
			switch {
			case !known:
				// reported as a package of its own
			case dr == -1:
				if r == -1 {
					t.Errorf("utility %s imports %s", pkg, dep)
				}
			case r == -1:
				t.Errorf("utility %s imports %s, a layer", pkg, dep)
			case edges[pkg] && !slices.Contains([]string{"internal/vfs", "internal/wire"}, dep):
				t.Errorf("edge %s imports %s, below the vfs; go through the vfs", pkg, dep)
			case dr >= r:
				t.Errorf("%s (rank %d) imports %s (rank %d), which is not below it", pkg, r, dep, dr)
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list named %d packages of the module; the test reads its output wrong", n)
	}
}

// heldThrough names, per package, the packages below it that it must not
// depend on even indirectly: it holds them through interfaces, and its
// callers wire the implementations in (the vfs holds the block cache as a
// blockcache.Cache, and the shares as a remote.Namespace and a
// remote.Data, opened by the agent or the gateway).
var heldThrough = map[string][]string{
	"internal/vfs": {"internal/cache", "internal/client"},
}

// TestHeldThrough fails when a package depends, by any path, on one it
// must hold only through an interface.
func TestHeldThrough(t *testing.T) {
	for pkg, banned := range heldThrough {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, mod+pkg) {
			t.Fatalf("go list -deps %s does not name the package itself; the test reads its output wrong", pkg)
		}
		for _, b := range banned {
			if slices.Contains(deps, mod+b) {
				t.Errorf("%s depends on %s; it must hold it only through an interface its callers wire in", pkg, b)
			}
		}
	}
}
