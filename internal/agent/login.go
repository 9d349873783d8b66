package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/private"
	"pando.dev/pando/internal/wire"
)

// Logins (pando login): on an agent mounted with --logins, a local user
// hands the agent their own credential over the agent's login socket,
// which any local user may reach. The agent learns who they are from the
// socket alone (SO_PEERCRED), never from what they send; it checks that
// the certificate is of this domain's CA and in date, that the key is
// the certificate's, and that the controller accepts it (one real
// request), and from then on serves that uid with a vfs of its own (see
// mount/logins.go). The credential is kept in memory only; the uid's
// cache, below the agent's, is removed at logout.

// LoginRequest is what pando login sends. Uid is read only from root
// (pando login --uid N, for another local user); from anyone else it
// changes nothing (the socket says who it is).
type LoginRequest struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
	Uid  *int   `json:"uid,omitempty"`
}

// Login is one uid logged in.
type Login struct {
	Uid       uint32 `json:"uid"`
	Principal string `json:"principal"`
	Since     string `json:"since"`
}

// maxLoginBody bounds a login request.
const maxLoginBody = 64 << 10

// LoginSocketDir is where an agent run by uid keeps its login sockets.
func LoginSocketDir(uid int) string {
	if uid == 0 {
		return "/run/pando/login"
	}
	return filepath.Join(os.TempDir(), "pando-login-"+strconv.Itoa(uid))
}

// LoginSocket is the login socket of the agent mounted at dir.
func LoginSocket(sockDir, mountPoint string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(mountPoint)))
	return filepath.Join(sockDir, hex.EncodeToString(sum[:8])+".sock")
}

type loginState struct {
	mu    sync.Mutex
	users map[uint32]*userLogin
	srv   *http.Server
	sock  string
	pool  *x509.CertPool
	stop  chan struct{} // ends recheckLogins
}

type userLogin struct {
	p         *private.Private
	principal string
	since     time.Time
	dir       string // its cache
}

type peerKey struct{}

// serveLogins opens the login socket (readable and writable by all: the
// kernel names each caller).
func (a *Agent) serveLogins() error {
	pool, err := auth.PoolFromPEM([]byte(a.cfg.Client.CA))
	if err != nil {
		return fmt.Errorf("the domain's CA: %w", err)
	}
	dir := LoginSocketDir(os.Geteuid())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The directory must be the agent's own (in a shared /tmp another
	// user could have made it first); clients check the socket's server.
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("the login socket's directory %s is not this user's own directory: remove it and start again", dir)
	}
	_ = os.Chmod(dir, 0o755)
	sock := LoginSocket(dir, a.m.Dir())
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return err
	}
	a.logins = loginState{users: make(map[uint32]*userLogin), sock: sock, pool: pool, stop: make(chan struct{})}
	go a.recheckLogins(a.logins.stop)
	a.logins.srv = a.loginServer()
	go a.logins.srv.Serve(ln)
	return nil
}

// loginServer answers on the login socket (Client's calls), each request
// with the uid of the process that connected.
func (a *Agent) loginServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", a.handleLogin)
	mux.HandleFunc("POST /logout", a.handleLogout)
	mux.HandleFunc("GET /logins", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.Logins()) })
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			uid, ok := peerUid(c)
			if !ok {
				return ctx
			}
			return context.WithValue(ctx, peerKey{}, uid)
		}}
}

// peerUid is the uid of the process at the other end of c (SO_PEERCRED).
func peerUid(c net.Conn) (uint32, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return cred.Uid, true
}

func callerUid(w http.ResponseWriter, r *http.Request) (uint32, bool) {
	uid, ok := r.Context().Value(peerKey{}).(uint32)
	if !ok {
		http.Error(w, "the agent cannot tell which local user is asking", http.StatusForbidden)
	}
	return uid, ok
}

func (a *Agent) handleLogin(w http.ResponseWriter, r *http.Request) {
	uid, ok := callerUid(w, r)
	if !ok {
		return
	}
	var req LoginRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody)).Decode(&req); err != nil {
		http.Error(w, "the login request is not valid JSON", http.StatusBadRequest)
		return
	}
	if req.Uid != nil && uid == 0 {
		if *req.Uid < 0 || *req.Uid >= 1<<32-1 {
			http.Error(w, "--uid must be a local uid", http.StatusBadRequest)
			return
		}
		uid = uint32(*req.Uid) // root logs another local user in
	}
	principal, err := a.login(r.Context(), uid, req)
	if err != nil {
		a.cfg.Log.Warn("refused a local user's login", "uid", uid, "err", err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	a.cfg.Log.Info("a local user logged in", "uid", uid, "principal", principal)
	writeJSON(w, Login{Uid: uid, Principal: principal, Since: time.Now().UTC().Format(time.RFC3339)})
}

func (a *Agent) handleLogout(w http.ResponseWriter, r *http.Request) {
	uid, ok := callerUid(w, r)
	if !ok {
		return
	}
	if q := r.URL.Query().Get("uid"); q != "" && uid == 0 {
		n, err := strconv.ParseUint(q, 10, 32)
		if err != nil || n == 1<<32-1 {
			http.Error(w, "--uid must be a local uid", http.StatusBadRequest)
			return
		}
		uid = uint32(n) // root logs another local user out
	}
	principal, in := a.logout(uid)
	if !in {
		http.Error(w, fmt.Sprintf("uid %d is not logged in at this mount", uid), http.StatusNotFound)
		return
	}
	a.cfg.Log.Info("a local user logged out", "uid", uid, "principal", principal)
	writeJSON(w, Login{Uid: uid, Principal: principal})
}

// ErrLogin is wrapped by every refused login.
var ErrLogin = errors.New("login refused")

// checkCredential checks a credential handed in for a login: of this
// domain's CA, in date, a user's, with its key.
func (a *Agent) checkCredential(req LoginRequest) (auth.Identity, error) {
	blk, _ := pem.Decode([]byte(req.Cert))
	if blk == nil || blk.Type != "CERTIFICATE" {
		return auth.Identity{}, fmt.Errorf("%w: no certificate was sent (is it a pando configuration made by pando user add?)", ErrLogin)
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return auth.Identity{}, fmt.Errorf("%w: the certificate is damaged: %w", ErrLogin, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: a.logins.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			return auth.Identity{}, fmt.Errorf("%w: the credential has expired; ask the administrator for a new one", ErrLogin)
		}
		return auth.Identity{}, fmt.Errorf("%w: the credential is not one of domain %s (its CA did not issue it)", ErrLogin, a.cfg.Client.Domain)
	}
	id, err := auth.IdentityFromCert(leaf)
	if err != nil {
		return auth.Identity{}, fmt.Errorf("%w: %w", ErrLogin, err)
	}
	if id.Domain != a.cfg.Client.Domain || id.Role != auth.RoleUser {
		return auth.Identity{}, fmt.Errorf("%w: the credential is %s's, not a user's of domain %s", ErrLogin, id, a.cfg.Client.Domain)
	}
	if _, err := tls.X509KeyPair([]byte(req.Cert), []byte(req.Key)); err != nil {
		return auth.Identity{}, fmt.Errorf("%w: the private key sent is not the certificate's", ErrLogin)
	}
	return id, nil
}

// login checks req and serves uid with its credential.
func (a *Agent) login(ctx context.Context, uid uint32, req LoginRequest) (string, error) {
	id, err := a.checkCredential(req)
	if err != nil {
		return "", err
	}
	// The agent's own configuration says where the controller is; only
	// the credential is the user's.
	cfg := *a.cfg.Client
	cfg.User, cfg.Cert, cfg.Key = id.Name, req.Cert, req.Key
	copts := a.cfg.Cache
	// Each login has a cache of its own, empty at first (one of the
	// uid's that is closing may still hold its own).
	copts.Dir = filepath.Join(a.cfg.Cache.Dir, "logins", strconv.FormatUint(uint64(uid), 10)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.MkdirAll(copts.Dir, 0o700); err != nil {
		return "", fmt.Errorf("the login's cache: %w", err)
	}
	ch, err := cache.Open(copts)
	if err != nil {
		os.RemoveAll(copts.Dir)
		return "", fmt.Errorf("%w: %w", ErrLogin, err)
	}
	p, err := private.Open(&cfg, client.Options{Streams: a.cfg.Streams, KeepFresh: true, Log: a.cfg.Log}, ch, a.cfg.VFS, a.cfg.Log)
	if err != nil {
		os.RemoveAll(copts.Dir)
		return "", fmt.Errorf("%w: %w", ErrLogin, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	who, err := p.Client().Admin().WhoAmI(wctx)
	cancel()
	if err != nil {
		p.Close()
		os.RemoveAll(copts.Dir)
		return "", fmt.Errorf("%w: the controller refuses the credential of %s (revoked, or the controller is away): %w", ErrLogin, id, err)
	}
	_ = who
	principal := id.String()
	a.logout(uid) // an earlier login of the uid
	a.logins.mu.Lock()
	a.logins.users[uid] = &userLogin{p: p, principal: principal, since: time.Now(), dir: copts.Dir}
	a.m.Login(uid, principal, p.FS)
	a.logins.mu.Unlock()
	return principal, nil
}

// logout ends uid's login: its vfs is closed and its cache removed.
func (a *Agent) logout(uid uint32) (string, bool) { return a.logoutIf(uid, nil, false, false) }

// logoutIf ends uid's login if it is only (any if only is nil). The
// uid's new requests are at once those of a uid with no login; the vfs
// is closed (sending what it holds) once no request and no open file
// uses it, and its cache removed then, or at once if revoked (nothing
// of it can be sent; a file open keeps what it reads, as on Unix).
// With force (the agent closing, its mount gone), it is closed at once.
func (a *Agent) logoutIf(uid uint32, only *userLogin, revoked, force bool) (string, bool) {
	a.logins.mu.Lock()
	u := a.logins.users[uid]
	if u == nil || only != nil && u != only {
		a.logins.mu.Unlock()
		return "", false
	}
	delete(a.logins.users, uid)
	v, idle := a.m.Logout(uid)
	if force {
		idle = nil
	}
	dir := u.dir
	if revoked {
		os.RemoveAll(dir)
	}
	a.logins.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for idle != nil && !idle() {
			time.Sleep(50 * time.Millisecond)
		}
		a.m.Forget(uid, v)
		u.p.Close()
		os.RemoveAll(dir)
	}()
	select { // a logout returns once the login is closed, or soon
	case <-done:
	case <-time.After(5 * time.Second):
		a.cfg.Log.Info("a login ended while files opened through it are open; it is closed when they are", "uid", uid, "principal", u.principal)
	}
	return u.principal, true
}

// Logins lists the uids logged in.
func (a *Agent) Logins() []Login {
	a.logins.mu.Lock()
	defer a.logins.mu.Unlock()
	out := []Login{}
	for uid, u := range a.logins.users {
		out = append(out, Login{Uid: uid, Principal: u.principal, Since: u.since.UTC().Format(time.RFC3339)})
	}
	return out
}

// loginRecheck is how often the agent asks the controller whether each
// login's credential still holds. The controller tells only shares and
// gateways of revocations as they happen; shares refuse a revoked
// credential at once, and this drops what the agent cached for it.
const loginRecheck = 10 * time.Second

// recheckLogins logs out, every loginRecheck until stop is closed, each
// uid whose credential the controller says is revoked or unknown: its
// vfs is closed and its cache removed, so that nothing cached for it is
// served to it again. A controller that does not answer changes nothing.
func (a *Agent) recheckLogins(stop <-chan struct{}) {
	t := time.NewTicker(loginRecheck)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		a.logins.mu.Lock()
		users := make(map[uint32]*userLogin, len(a.logins.users))
		maps.Copy(users, a.logins.users)
		a.logins.mu.Unlock()
		for uid, u := range users {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := u.p.Client().Admin().WhoAmI(ctx)
			cancel()
			if c := wire.CodeOf(err); c == wire.CodeTokenRevoked || c == wire.CodeNotRegistered {
				a.cfg.Log.Info("a logged-in user was revoked; their login and cache are removed", "uid", uid, "principal", u.principal, "err", err)
				a.logoutIf(uid, u, true, false)
			}
		}
	}
}

// closeLogins stops the login socket and logs everyone out.
func (a *Agent) closeLogins() {
	if a.logins.srv == nil {
		return
	}
	a.logins.srv.Close()
	close(a.logins.stop)
	os.Remove(a.logins.sock)
	for _, l := range a.Logins() {
		a.logoutIf(l.Uid, nil, false, true)
	}
}
