package federation

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/remote/memory"
	"pando.dev/pando/internal/remote/remotetest"
	"pando.dev/pando/internal/wire"
)

// grid is a home domain uva and the domains it may link, all in memory:
// each has a share named data (the names repeat across domains).
type grid struct {
	home  *memory.Tree
	peers map[string]remote.Namespace // what Peer hands out, by domain

	mu     sync.Mutex
	links  []wire.DomainLink
	fail   error // what Links fails with
	reads  atomic.Int32
	made   map[string]int
	closed map[string]int
}

func newGrid(domains ...string) *grid {
	g := &grid{home: memory.New("alice@uva", wire.MountEntry{Prefix: "/uva/data", Share: "data"}),
		peers: map[string]remote.Namespace{}, made: map[string]int{}, closed: map[string]int{}}
	for _, d := range domains {
		g.peers[d] = memory.New("alice@uva", wire.MountEntry{Prefix: "/" + d + "/data", Share: "data"})
		g.links = append(g.links, wire.DomainLink{Name: d, Controllers: []string{d + ":1"}, CA: []byte(d)})
	}
	return g
}

func (g *grid) router(t *testing.T, cfg Config) *Router {
	cfg.Home = "uva"
	cfg.HomeNS = Domain{NS: g.home, Data: g.home}
	cfg.Links = func(ctx context.Context) ([]wire.DomainLink, error) {
		g.reads.Add(1)
		g.mu.Lock()
		defer g.mu.Unlock()
		return slices.Clone(g.links), g.fail
	}
	cfg.Peer = func(l wire.DomainLink) (Domain, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.made[l.Name]++
		ns := g.peers[l.Name]
		return Domain{NS: ns, Data: ns.(remote.Data), Close: func() error {
			g.mu.Lock()
			g.closed[l.Name]++
			g.mu.Unlock()
			return nil
		}}, nil
	}
	r := New(cfg)
	t.Cleanup(func() { r.Close() })
	return r
}

func (g *grid) unlink(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.links = slices.DeleteFunc(g.links, func(l wire.DomainLink) bool { return l.Name == name })
}

func names(es []wire.DirEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// TestContract runs the contract suite on a router, in a linked domain's
// share (the home one is the memory tree's own suite).
func TestContract(t *testing.T) {
	remotetest.Run(t, func(t *testing.T) remotetest.Impl {
		g := newGrid("tacc")
		r := g.router(t, Config{})
		return remotetest.Impl{NS: r, Data: r, Dir: "/tacc/data", Other: g.peers["tacc"].(remote.Data)}
	})
}

// TestRouting: each call reaches the domain the path names, the root
// lists every domain, and a linked domain's shares are named share@domain.
func TestRouting(t *testing.T) {
	ctx := context.Background()
	g := newGrid("tacc", "ncsa")
	r := g.router(t, Config{})
	root, _, _, err := r.ReadDirData(ctx, "/", 0, 0)
	if err != nil || !slices.Equal(names(root), []string{"ncsa", "tacc", "uva"}) {
		t.Fatalf("the root lists %v, %v; want ncsa, tacc, uva", names(root), err)
	}
	page, more, err := r.ReadDirPage(ctx, "/", "ncsa", 1)
	if err != nil || !slices.Equal(names(page), []string{"tacc"}) || !more {
		t.Fatalf("a page of the root after ncsa: %v, %v, %v", names(page), more, err)
	}
	f, err := r.Create(ctx, "/tacc/data/x", wire.OpenWrite, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("tacc's"), 0); err != nil {
		t.Fatal(err)
	}
	if loc := f.Loc(); loc.Share != "data@tacc" || loc.Rel != "x" {
		t.Errorf("a linked domain's file is at %+v; want share data@tacc", loc)
	}
	f.Close(ctx)
	if _, err := g.home.Stat(ctx, "/uva/data/x"); wire.CodeOf(err) != wire.CodeNotExist {
		t.Errorf("the file made in /tacc shows at home: %v", err)
	}
	if _, err := g.peers["tacc"].Stat(ctx, "/tacc/data/x"); err != nil {
		t.Errorf("the file made in /tacc is not at tacc: %v", err)
	}
	if _, err := r.Mkdir(ctx, "/uva/data/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := g.home.Stat(ctx, "/uva/data/d"); err != nil {
		t.Errorf("a directory made in /uva is not at home: %v", err)
	}
	loc, err := r.Locate(ctx, "/tacc/data/x")
	if err != nil || loc.Share != "data@tacc" {
		t.Errorf("Locate(/tacc/data/x) = %+v, %v; want share data@tacc", loc, err)
	}
	if loc, _ := r.Locate(ctx, "/uva/data/x"); loc.Share != "data" {
		t.Errorf("Locate(/uva/data/x) = %+v; want the home share data as it is", loc)
	}
	mt, err := r.MountTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var shares []string
	for _, m := range mt {
		shares = append(shares, m.Prefix+"="+m.Share)
	}
	slices.Sort(shares)
	if want := []string{"/tacc/data=data@tacc", "/uva/data=data"}; !slices.Equal(shares, want) {
		t.Errorf("the mount table is %v; want %v (ncsa is not in use)", shares, want)
	}
	if _, err := r.Stat(ctx, "/nowhere/x"); wire.CodeOf(err) != wire.CodeNotExist {
		t.Errorf("a domain nobody links: %v, want not found", err)
	}
	g.peers["tacc"].(*memory.Tree).SetDown("data", errors.New("cable cut"))
	if err := r.DownErr("data@tacc"); !errors.Is(err, remote.ErrUnreachable) {
		t.Errorf("DownErr(data@tacc) = %v with tacc's data down", err)
	}
	if err := r.DownErr("data"); err != nil {
		t.Errorf("DownErr(data) = %v: the home share data is up", err)
	}
	if err := r.Reachable(ctx, "/uva/data/x"); err != nil {
		t.Errorf("Reachable(/uva/data/x) = %v", err)
	}
	if err := r.Reachable(ctx, "/tacc/data/x"); !errors.Is(err, remote.ErrUnreachable) {
		t.Errorf("Reachable(/tacc/data/x) = %v with tacc's data down", err)
	}
}

// TestNoLinks: with no linked domain, the router is the home namespace:
// the same root, table and answers, and the links read only for the root
// and names nobody links, at most once per LinkTTL.
func TestNoLinks(t *testing.T) {
	ctx := context.Background()
	g := newGrid()
	r := g.router(t, Config{LinkTTL: time.Hour})
	for range 3 {
		if _, err := r.Stat(ctx, "/uva/data"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.MountTable(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.reads.Load(); n != 0 {
		t.Errorf("calls in the home domain read the links %d times", n)
	}
	root, _, _, err := r.ReadDirData(ctx, "/", 0, 0)
	if err != nil || !slices.Equal(names(root), []string{"uva"}) {
		t.Fatalf("the root lists %v, %v; want uva", names(root), err)
	}
	r.Stat(ctx, "/tacc")
	if n := g.reads.Load(); n != 1 {
		t.Errorf("the links were read %d times within their TTL; want once", n)
	}
	mt, _ := r.MountTable(ctx)
	home, _ := g.home.MountTable(ctx)
	if !slices.EqualFunc(mt, home, wire.MountEntry.Equal) {
		t.Errorf("the table is %v; want the home one, %v", mt, home)
	}
}

// TestXDev: a rename or a hard link across domains fails with EXDEV and
// changes nothing.
func TestXDev(t *testing.T) {
	ctx := context.Background()
	g := newGrid("tacc")
	r := g.router(t, Config{})
	f, err := r.Create(ctx, "/uva/data/a", wire.OpenWrite, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	if err := r.Rename(ctx, "/uva/data/a", "/tacc/data/a", false); wire.CodeOf(err) != wire.CodeXDev {
		t.Errorf("a rename from uva to tacc: %v, want EXDEV", err)
	}
	if _, err := r.Link(ctx, "/uva/data/a", "/tacc/data/b"); wire.CodeOf(err) != wire.CodeXDev {
		t.Errorf("a hard link from uva to tacc: %v, want EXDEV", err)
	}
	if _, err := r.Stat(ctx, "/uva/data/a"); err != nil {
		t.Errorf("the file is gone after refused moves: %v", err)
	}
	if _, err := r.Stat(ctx, "/tacc/data/a"); wire.CodeOf(err) != wire.CodeNotExist {
		t.Errorf("the refused rename made /tacc/data/a: %v", err)
	}
	if err := r.Rename(ctx, "/uva/data/a", "/uva/data/c", false); err != nil {
		t.Errorf("a rename within uva: %v", err)
	}
}

// TestUnlinked: a link that goes away takes its domain out of the
// namespace at the next read of the links, and its client is closed; a
// failed read of the links keeps those held.
func TestUnlinked(t *testing.T) {
	ctx := context.Background()
	g := newGrid("tacc")
	r := g.router(t, Config{LinkTTL: 50 * time.Millisecond})
	if _, err := r.Stat(ctx, "/tacc/data"); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.fail = errors.New("controller away")
	g.mu.Unlock()
	time.Sleep(60 * time.Millisecond)
	r.ReadDirData(ctx, "/", 0, 0)
	if _, err := r.Stat(ctx, "/tacc/data"); err != nil {
		t.Errorf("tacc after a failed read of the links: %v; the links held should serve", err)
	}
	g.mu.Lock()
	g.fail = nil
	g.mu.Unlock()
	g.unlink("tacc")
	time.Sleep(60 * time.Millisecond)
	root, _, _, _ := r.ReadDirData(ctx, "/", 0, 0)
	if !slices.Equal(names(root), []string{"uva"}) {
		t.Errorf("the root lists %v after the unlink; want uva", names(root))
	}
	if _, err := r.Stat(ctx, "/tacc/data"); wire.CodeOf(err) != wire.CodeNotExist {
		t.Errorf("/tacc/data after the unlink: %v, want not found", err)
	}
	g.mu.Lock()
	made, closed := g.made["tacc"], g.closed["tacc"]
	g.mu.Unlock()
	if made != 1 || closed != 1 {
		t.Errorf("tacc's namespace was made %d times and closed %d; want once each", made, closed)
	}
	if mt, _ := r.MountTable(ctx); len(mt) != 1 {
		t.Errorf("the table after the unlink: %v", mt)
	}
}

// hanging is a namespace that stops answering (every call waits for its
// context) once hang is set.
type hanging struct {
	*memory.Tree
	hang atomic.Bool
}

func (h *hanging) wait(ctx context.Context) error {
	if !h.hang.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (h *hanging) MountTable(ctx context.Context) ([]wire.MountEntry, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return h.Tree.MountTable(ctx)
}

func (h *hanging) Locate(ctx context.Context, g string) (remote.Loc, error) {
	if err := h.wait(ctx); err != nil {
		return remote.Loc{}, err
	}
	return h.Tree.Locate(ctx, g)
}

// Stat answers for a directory above the shares without waiting, as a
// client makes it up.
func (h *hanging) Stat(ctx context.Context, g string) (wire.Attr, error) {
	if loc, _ := h.Tree.Locate(ctx, g); loc.Share == "" {
		return h.Tree.Stat(ctx, g)
	}
	if err := h.wait(ctx); err != nil {
		return wire.Attr{}, err
	}
	return h.Tree.Stat(ctx, g)
}

// TestHangingPeer: a linked domain that stops answering costs the home
// namespace nothing beyond TableBound on the mount table; its calls fail
// with ErrUnreachable within Bound, then at once while it is down, its
// shares show down, and it comes back when it answers again.
func TestHangingPeer(t *testing.T) {
	ctx := context.Background()
	g := newGrid("tacc")
	h := &hanging{Tree: g.peers["tacc"].(*memory.Tree)}
	g.peers["tacc"] = h
	r := g.router(t, Config{Bound: 300 * time.Millisecond, TableBound: 100 * time.Millisecond, Retry: 50 * time.Millisecond})
	var mu sync.Mutex
	var events []remote.HealthEvent
	r.SetHealthHook(func(ev remote.HealthEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	if _, err := r.Stat(ctx, "/tacc/data"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.MountTable(ctx); err != nil {
		t.Fatal(err)
	}
	h.hang.Store(true)

	start := time.Now()
	mt, err := r.MountTable(ctx)
	if took := time.Since(start); took > time.Second || err != nil || len(mt) != 2 {
		t.Errorf("the mount table with tacc hanging: %v entries, %v, in %v; want the home and tacc's last within the table's bound", len(mt), err, took)
	}
	start = time.Now()
	if _, err := r.Stat(ctx, "/uva/data"); err != nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("a home call with tacc hanging: %v in %v", err, time.Since(start))
	}
	start = time.Now()
	_, err = r.Stat(ctx, "/tacc/data")
	if !errors.Is(err, remote.ErrUnreachable) || time.Since(start) > time.Second {
		t.Errorf("a call to tacc hanging: %v in %v; want unreachable within its bound", err, time.Since(start))
	}
	start = time.Now()
	if _, err := r.Stat(ctx, "/tacc/data"); !errors.Is(err, remote.ErrUnreachable) || time.Since(start) > 50*time.Millisecond {
		t.Errorf("a call to tacc once it is down: %v in %v; want unreachable at once", err, time.Since(start))
	}
	if err := r.DownErr("data@tacc"); !errors.Is(err, remote.ErrUnreachable) {
		t.Errorf("DownErr(data@tacc) = %v with tacc down", err)
	}
	if loc, err := r.Locate(ctx, "/tacc/data/f"); err != nil || loc.Share != "data@tacc" || loc.Rel != "f" {
		t.Errorf("Locate while tacc is down: %+v, %v; want its last table's answer", loc, err)
	}
	down := false
	for _, s := range r.Health() {
		if s.Share == "data@tacc" && !s.Up {
			down = true
		}
	}
	if !down {
		t.Errorf("Health does not show data@tacc down: %+v", r.Health())
	}
	// A probe asks at a share, not a directory made up above them.
	r.Stat(ctx, "/tacc")
	time.Sleep(3*50*time.Millisecond + 300*time.Millisecond)
	if err := r.DownErr("data@tacc"); err == nil {
		t.Errorf("tacc, still hanging, was marked up after a call about /tacc")
	}
	h.hang.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for r.DownErr("data@tacc") != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := r.Stat(ctx, "/tacc/data"); err != nil {
		t.Errorf("tacc once it answers again: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Share != "data@tacc" || events[0].Up || !events[1].Up {
		t.Errorf("health events %+v; want data@tacc down, then up", events)
	}
}

// garbage is a namespace whose mount table names what it may not: the
// home domain's paths, bad share names.
type garbage struct{ *memory.Tree }

func (garbage) MountTable(context.Context) ([]wire.MountEntry, error) {
	return []wire.MountEntry{{Prefix: "/uva/data", Share: "evil"}, {Prefix: "/tacc/x", Share: "Bad Name"}, {Prefix: "/tacc", Share: "all"},
		{Prefix: "/tacc/data", Share: "data"}}, nil
}

// TestGarbageTable: a linked domain's table cannot place anything outside
// its own /<domain>, nor name a share the vfs could confuse.
func TestGarbageTable(t *testing.T) {
	ctx := context.Background()
	g := newGrid("tacc")
	g.peers["tacc"] = garbage{g.peers["tacc"].(*memory.Tree)}
	r := g.router(t, Config{})
	r.Stat(ctx, "/tacc/data")
	mt, err := r.MountTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mt {
		got = append(got, m.Prefix+"="+m.Share)
	}
	if want := []string{"/uva/data=data", "/tacc/data=data@tacc"}; !slices.Equal(got, want) {
		t.Errorf("the table is %v; want %v", got, want)
	}
	if loc, _ := r.Locate(ctx, "/uva/data/x"); loc.Share != "data" {
		t.Errorf("a home path is placed at %+v", loc)
	}
}

// TestLinksSlow: a home controller slow to list the links holds the root
// up at most TableBound; the links read meanwhile show next time.
func TestLinksSlow(t *testing.T) {
	ctx := context.Background()
	g := newGrid("tacc")
	release := make(chan struct{})
	r := g.router(t, Config{TableBound: 100 * time.Millisecond})
	links := r.cfg.Links
	r.cfg.Links = func(ctx context.Context) ([]wire.DomainLink, error) {
		<-release
		return links(ctx)
	}
	start := time.Now()
	root, _, _, err := r.ReadDirData(ctx, "/", 0, 0)
	if took := time.Since(start); err != nil || took > time.Second || !slices.Equal(names(root), []string{"uva"}) {
		t.Errorf("the root with the links slow: %v, %v in %v; want uva within the bound", names(root), err, took)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for len(r.Domains()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if root, _, _, _ := r.ReadDirData(ctx, "/", 0, 0); !slices.Equal(names(root), []string{"tacc", "uva"}) {
		t.Errorf("the root once the links came: %v", names(root))
	}
}
