package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/mount"
)

// serveOn serves srv on a Unix socket at sock, open to all, until the
// test ends, counting the requests it is sent.
func serveOn(t *testing.T, sock string, srv *http.Server) *atomic.Int64 {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o666)
	var reqs atomic.Int64
	h := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		h.ServeHTTP(w, r)
	})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &reqs
}

// loginAgent is an agent with only its login state, for the login
// socket's server: nobody logged in but a record for uid 4242.
func loginAgent(t *testing.T) *Agent {
	ca, err := auth.NewCA("uva")
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{Client: &config.Config{Domain: "uva", CA: string(ca.CertPEM())}, Log: slog.New(slog.DiscardHandler)}}
	a.logins = loginState{users: map[uint32]*userLogin{4242: {principal: "alice@uva", since: time.Unix(1_700_000_000, 0)}}, pool: ca.Pool()}
	return a
}

// TestFindLogin: a login socket is used only when the process serving it
// is of the uid that mounted the file system, as the kernel's mount table
// says; a socket of another uid is refused before a byte is sent, and
// every other case gets its own sentence.
func TestFindLogin(t *testing.T) {
	me := uint32(os.Geteuid())
	other := me + 1000
	dir := t.TempDir()
	sockDir := func(uid uint32) []string { return []string{filepath.Join(dir, fmt.Sprint(uid))} }
	// The real agent's login server, by this process's uid, at the
	// places the agents of /m/mine (ours) and /m/planted (another uid's)
	// would keep their sockets.
	reqs := serveOn(t, LoginSocket(sockDir(me)[0], "/m/mine"), loginAgent(t).loginServer())
	planted := serveOn(t, LoginSocket(sockDir(other)[0], "/m/planted"), loginAgent(t).loginServer())
	agents := []mount.Agent{{Dir: "/m/mine", Owner: me}, {Dir: "/m/planted", Owner: other}, {Dir: "/m/plain", Owner: me}}
	notMounted := func(string) bool { return false }
	ctx := context.Background()

	c, err := findLogin("/m/mine", agents, notMounted, sockDir)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.Logins(ctx)
	if err != nil || len(ls) != 1 || ls[0].Principal != "alice@uva" || ls[0].Uid != 4242 {
		t.Fatalf("logins through the agent's socket: %v, %v", ls, err)
	}
	if _, err := c.Logout(ctx, nil); err == nil || err.Error() != fmt.Sprintf("uid %d is not logged in at this mount", me) {
		t.Errorf("a logout of a uid not logged in: %v, want the agent's sentence", err)
	}
	if _, err := c.Login(ctx, LoginRequest{Cert: "junk"}); err == nil || !strings.Contains(err.Error(), "no certificate was sent") {
		t.Errorf("a login with no certificate: %v, want the agent's refusal", err)
	}
	if reqs.Load() != 3 {
		t.Errorf("the agent's socket saw %d requests, want 3", reqs.Load())
	}

	if _, err := findLogin("/m/planted", agents, notMounted, sockDir); err == nil || !strings.Contains(err.Error(), "not served by the mount's agent") {
		t.Errorf("a socket another uid serves: %v, want a refusal", err)
	}
	// Trusted once, the socket is checked again at each connection: one
	// served by another uid by then gets no request.
	hc := loginHTTP(LoginSocket(sockDir(other)[0], "/m/planted"), other, 5*time.Second)
	body := strings.NewReader(`{"cert":"secret"}`)
	if err := (&Client{hc: hc, unreachable: "x"}).call(ctx, "POST", "/login", body, new(Login)); err == nil || !strings.Contains(err.Error(), "not served by the mount's agent") {
		t.Errorf("a request to a socket of another uid: %v", err)
	}
	if n := planted.Load(); n != 0 {
		t.Errorf("the planted socket was sent %d requests", n)
	}
	if body.Len() == 0 {
		t.Error("the credential was read for sending to a socket of another uid")
	}

	for _, c := range []struct {
		dir     string
		mounted bool
		want    string
	}{
		{"/m/plain", false, "the mount at /m/plain does not accept logins"},
		{"/elsewhere", true, "/elsewhere is not a pando mount"},
		{"/elsewhere", false, "no pando agent is mounted at /elsewhere"},
	} {
		_, err := findLogin(c.dir, agents, func(string) bool { return c.mounted }, sockDir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.dir, err, c.want)
		}
	}
	if c, err := findLogin("", agents, notMounted, sockDir); err != nil {
		t.Errorf("the only mount that accepts logins, not named: %v", err)
	} else if _, err := c.Logins(ctx); err != nil {
		t.Error(err)
	}
	if _, err := findLogin("", agents[2:], notMounted, sockDir); err == nil || !strings.Contains(err.Error(), "no pando agent on this host accepts logins") {
		t.Errorf("no mount that accepts logins: %v", err)
	}
	serveOn(t, LoginSocket(sockDir(me)[0], "/m/plain"), loginAgent(t).loginServer())
	if _, err := findLogin("", agents, notMounted, sockDir); !errors.Is(err, ErrSeveralLogins) || !strings.HasPrefix(err.Error(), "2 pando mounts") {
		t.Errorf("two mounts that accept logins: %v", err)
	}
}

// TestControlClient: pando stats' and pando cache's calls through the
// control socket, against the agent's own handler over a real cache.
func TestControlClient(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dial(dir); err == nil || !strings.Contains(err.Error(), "no pando agent runs with the cache in "+dir) {
		t.Fatalf("no socket: %v", err)
	}
	ch, err := cache.Open(cache.Options{Dir: filepath.Join(dir, "cache")})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if !ch.Fill("k1", 1, []byte("one"), "/uva/a/one") || !ch.Fill("k2", 1, []byte("two"), "/uva/b/two") {
		t.Fatal("the cache took no files")
	}
	a := &Agent{cache: ch}
	srv := &http.Server{Handler: a.controlHandler(http.NotFoundHandler())}
	serveOn(t, filepath.Join(dir, SocketName), srv)
	c, err := Dial(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	es, err := c.Cache(ctx)
	if err != nil || len(es) != 2 {
		t.Fatalf("cache list: %v, %v", es, err)
	}
	if n, err := c.Drop(ctx, "/uva/a"); err != nil || n != 1 {
		t.Fatalf("drop /uva/a: %d, %v", n, err)
	}
	if es, err := c.Cache(ctx); err != nil || len(es) != 1 || es[0].Name != "/uva/b/two" {
		t.Fatalf("cache list after the drop: %+v, %v", es, err)
	}
	if _, err := c.Drop(ctx, "https://uva/b"); err == nil || !strings.HasPrefix(err.Error(), `"https://uva/b": only pando:// URLs`) {
		t.Errorf("a URL: %v, want the agent's sentence", err)
	}
	srv.Close()
	if _, err := c.Cache(ctx); err == nil || !strings.HasPrefix(err.Error(), "the agent with the cache in "+dir+" does not answer") {
		t.Errorf("an agent gone: %v", err)
	}
}
