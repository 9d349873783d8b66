package share

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Config is what a share server needs to serve; Run fills it from the
// controller.
type Config struct {
	Name   string
	Domain string
	Root   string // the exported directory
	TLS    *tls.Config
	// Trust, if set, is the CAs the TLS configuration accepts client
	// certificates from (auth.ServerConfigTrust): the home domain's and
	// the linked domains' the controller names (Revocation.TrustSet).
	Trust    *auth.Trust
	TokenKey ed25519.PublicKey
	Log      *slog.Logger
	// Now is the clock (tests move it); nil means time.Now.
	Now func() time.Time
	// Identity is the share's own credentials, with which it reaches
	// other shares for third-party transfers (nil: it cannot push).
	Identity *config.Config
	// Protection lists the data channel protections clients may ask for:
	// "private" (TLS), "safe", "clear". Empty means private and safe.
	Protection []string
	// DelegFile lists the write delegations held, so that their holders
	// can reclaim them after a restart ("": no list, no grace period).
	DelegFile string
	// CommitDir keeps the records of commits under way, so that a share
	// that stopped completes them ("": the share's root; see recordStore).
	CommitDir string
	// Owner is the account ("USER[:GROUP]") that owns what clients create,
	// for a share that runs as root ("": see ownerFor).
	Owner string
	// AllowSetID lets clients make setuid and setgid files.
	AllowSetID bool
	// Limits bound what each principal may hold (see Limits).
	Limits Limits
	// IDRules is the file of rules choosing who owns, on the share's
	// host, what principals of other domains create ("": the share's
	// owner account; see idrules.go). Only a share run as root takes one.
	IDRules string
	// Audit receives the share's refusals (see audit.go; nil: none). The
	// share does not close it.
	Audit *audit.Log
}

// Server serves one exported directory.
type Server struct {
	cfg   Config
	tree  *tree
	owner *owner // who owns what clients create (nil: the share's account)
	// idRules choose the owner of what remote principals create (nil:
	// owner); replaced whole by ReloadIDRules.
	idRules atomic.Pointer[idRules]
	audit   *audit.Log
	rpc     rpc.Server
	log     *slog.Logger

	mu      sync.Mutex
	handles map[uint64]*handle
	revoked revocations
	inv     *invTable
	watch   *watcher
	peers   peers // delegated clients for third-party pushes
	tickets map[string]*ticket
	limits  Limits
	use     map[string]*usage // by principal
	// openHandles counts the handles of everyone, and reserved ones.
	openHandles int

	names   dirNames // sorted names of large directories listed in pages
	commits commitGate
	records *recordStore
	named   map[string]*namedStage // by namedKey; guarded by mu

	counts [256]atomic.Uint64 // requests by op (share ops are < 256)
}

type handle struct {
	f       *os.File
	owner   string // principal
	session string // the agent's invalidation session, if any
	conn    *rpc.ServerConn
	rel     string
	flags   uint32
	writing bool
	stage   *stage // a stage of rel's file (OpStage), if set
	gate    func() // unregisters a read-only handle from s.commits
}

// session is the per-connection state.
type session struct {
	peer   auth.Identity
	serial string
	inv    string // the agent's invalidation session, from AuthReq
	mu     sync.Mutex
	tokens []*auth.Token // slot i+1
}

type revocations struct {
	before  map[string]time.Time // principal -> tokens issued before are void
	all     time.Time            // every token issued before is void
	serials map[string]bool
	domains map[string]time.Time // linked domain -> tokens of its principals issued before are void
}

// New opens the root and prepares a server.
func New(cfg Config) (*Server, error) {
	root, err := openTree(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("cannot export %s: %w", cfg.Root, err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	own, warning, err := ownerFor(cfg.Owner, cfg.Root, os.Geteuid())
	if err != nil {
		root.close()
		return nil, fmt.Errorf("share %s: %w", cfg.Name, err)
	}
	var rules *idRules
	if cfg.IDRules != "" {
		if os.Geteuid() != 0 {
			err = fmt.Errorf("--id-rules gives what clients create to other accounts, which only a share run as root can do; run it as root or leave the rules out")
		} else {
			rules, err = loadIDRules(cfg.IDRules, cfg.Domain)
		}
		if err != nil {
			root.close()
			return nil, fmt.Errorf("share %s: %w", cfg.Name, err)
		}
	}
	if warning != "" {
		cfg.Log.Warn(warning, "share", cfg.Name)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		cfg:     cfg,
		tree:    root,
		owner:   own,
		audit:   cfg.Audit,
		log:     cfg.Log,
		handles: make(map[uint64]*handle),
		limits:  cfg.Limits.withDefaults(raiseNoFile()),
		use:     make(map[string]*usage),
		named:   make(map[string]*namedStage),
		revoked: revocations{before: make(map[string]time.Time), serials: make(map[string]bool), domains: make(map[string]time.Time)},
	}
	s.idRules.Store(rules)
	s.records = &recordStore{dir: cfg.CommitDir, tree: root}
	if cfg.CommitDir != "" {
		if err := os.MkdirAll(cfg.CommitDir, 0o700); err != nil {
			root.close()
			return nil, fmt.Errorf("share %s: the directory of commit records: %w", cfg.Name, err)
		}
	}
	s.recoverCommits()
	s.sweepStages()
	s.inv = newInvTable(cfg.Now)
	s.inv.log = cfg.Log
	s.inv.loadDelegs(cfg.DelegFile)
	tlsConf := cfg.TLS
	if tlsConf != nil && tlsConf.VerifyConnection != nil && s.audit != nil {
		tlsConf = s.auditHandshakes(tlsConf)
	}
	s.rpc = rpc.Server{Handler: rpc.HandlerFunc(s.serveLimited), Hooks: s, TLS: tlsConf, Log: cfg.Log, MaxInFlight: 64, Sniff: true}
	if w, err := watchTree(cfg.Root, s.changedLocally, cfg.Log); err != nil {
		cfg.Log.Warn("changes made directly in the exported directory will be noticed only by revalidation", "err", err)
	} else {
		s.watch = w
	}
	return s, nil
}

// ServeConns accepts connections on ln until Close: TLS connections, and
// data channels without TLS that present a ticket (see protect.go). ln may
// also be a TLS listener, which admits TLS only.
func (s *Server) ServeConns(ln net.Listener) error { return s.rpc.Serve(ln) }

// Close stops serving, closes every handle and the root.
func (s *Server) Close() error {
	if s.watch != nil {
		s.watch.close()
	}
	err := s.rpc.Close()
	s.closePeers()
	s.mu.Lock()
	var hs []*handle
	for id, h := range s.handles {
		hs = append(hs, h)
		s.forgetHandleLocked(id, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		_ = h.release(s)
	}
	s.stopStageTimers()
	s.records.close()
	s.tree.close()
	return err
}

// SetTokenKey replaces the key tokens are verified with (after re-registering).
func (s *Server) SetTokenKey(k ed25519.PublicKey) {
	s.mu.Lock()
	s.cfg.TokenKey = k
	s.mu.Unlock()
}

// Counts returns the number of requests served, by op.
func (s *Server) Counts() map[string]uint64 {
	m := make(map[string]uint64)
	for i := range s.counts {
		if n := s.counts[i].Load(); n > 0 {
			m[wire.Op(i).String()] = n
		}
	}
	return m
}

// Opened identifies the peer of a new connection and counts it against
// the peer's limit.
// A refusal is recorded in the audit log.
func (s *Server) Opened(c *rpc.ServerConn) error {
	err := s.identify(c)
	if err == nil {
		err = s.admitConn(c)
	}
	if err != nil {
		s.connRefused(c, err)
	}
	return err
}

func (s *Server) identify(c *rpc.ServerConn) error {
	if rpc.IsPlain(c.Channel) {
		return s.openPlain(c)
	}
	id, cert, err := auth.PeerIdentity(c.TLSState())
	if err != nil {
		return wire.Errorf(wire.CodeTokenInvalid, "the share cannot identify your certificate: %v", err)
	}
	if id.Domain != s.cfg.Domain && (s.cfg.Trust == nil || !s.cfg.Trust.Linked(id.Domain)) {
		return wire.Errorf(wire.CodeTokenInvalid, "certificate of domain %q presented to a share of domain %q, which has not linked it", id.Domain, s.cfg.Domain)
	}
	sn := cert.SerialNumber.Text(16)
	if s.serialRevoked(sn) {
		return s.revokedError(id)
	}
	c.State = &session{peer: id, serial: sn}
	return nil
}

// Closed releases the handles a connection opened.
func (s *Server) Closed(c *rpc.ServerConn) {
	s.mu.Lock()
	var hs []*handle
	for id, h := range s.handles {
		if h.conn == c {
			hs = append(hs, h)
			s.forgetHandleLocked(id, h)
		}
	}
	s.mu.Unlock()
	s.leaveConn(c)
	for _, h := range hs {
		_ = h.release(s)
	}
}

// token returns the valid token in slot tok of the request's session.
func (s *Server) token(req *rpc.Request, tok uint32) (*auth.Token, error) {
	ss := req.Conn.State.(*session)
	ss.mu.Lock()
	var t *auth.Token
	if tok >= 1 && int(tok) <= len(ss.tokens) {
		t = ss.tokens[tok-1]
	}
	ss.mu.Unlock()
	if t == nil {
		return nil, wire.Errorf(wire.CodeNoToken, "no token is installed in slot %d of this session; authenticate first", tok)
	}
	if err := s.checkToken(t); err != nil {
		return nil, err
	}
	return t, nil
}

func (s *Server) authenticate(req *rpc.Request) (rpc.Reply, error) {
	var r wire.AuthReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	s.mu.Lock()
	key := s.cfg.TokenKey
	s.mu.Unlock()
	t, err := auth.VerifyToken(key, r.Token, s.cfg.Now())
	if err != nil {
		code := wire.CodeTokenInvalid
		if isExpired(err) {
			code = wire.CodeTokenExpired
		}
		return rpc.Reply{}, &wire.Error{Code: code, Message: fmt.Sprintf("share %s refused your access token: %v", s.cfg.Name, err)}
	}
	ss := req.Conn.State.(*session)
	if r.Session != "" {
		ss.mu.Lock()
		ss.inv = ss.peer.String() + "/" + r.Session
		ss.mu.Unlock()
	}
	if t.SignIn {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenInvalid, "a sign-in token is for gateways; a share takes the tokens the controller gives for it (pando resolves them)")
	}
	if t.Share != s.cfg.Name {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenInvalid, "the token is for share %q, not %q", t.Share, s.cfg.Name)
	}
	if t.Principal != ss.peer.String() && (t.Proxy == "" || t.Proxy != ss.peer.String()) {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenInvalid, "the token belongs to %s, but this connection is %s", t.Principal, ss.peer)
	}
	if err := s.checkToken(t); err != nil {
		return rpc.Reply{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// Reuse the slot of an older token for the same root, so that a
	// long-lived session renewing its tokens does not grow without bound.
	for i, old := range ss.tokens {
		if old.Root == t.Root {
			ss.tokens[i] = t
			return rpc.Reply{Msg: wire.AuthResp{Tok: uint32(i + 1), Expires: t.Expires.UnixNano()}}, nil
		}
	}
	if len(ss.tokens) >= 1024 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "too many tokens in one session")
	}
	ss.tokens = append(ss.tokens, t)
	return rpc.Reply{Msg: wire.AuthResp{Tok: uint32(len(ss.tokens)), Expires: t.Expires.UnixNano()}}, nil
}

func newHandleID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1
}

func (s *Server) addHandle(h *handle) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		id := newHandleID()
		if _, dup := s.handles[id]; !dup {
			s.handles[id] = h
			return id
		}
	}
}

// tokenHandle checks the request's token and finds its handle.
func (s *Server) tokenHandle(req *rpc.Request, tok uint32, id uint64) (*handle, error) {
	if _, err := s.token(req, tok); err != nil {
		return nil, err
	}
	h, err := s.handle(req, id)
	if err == nil {
		want := firstBlock
		if req.Op == wire.OpRead {
			want = wire.ByteRange{} // read checks its own range
		}
		// As in allow: replies carry the file's attributes.
		if err := s.touch(req, h.rel, want); err != nil {
			return nil, err
		}
	}
	return h, err
}

// handle finds an open handle owned by the request's principal.
func (s *Server) handle(req *rpc.Request, id uint64) (*handle, error) {
	ss := req.Conn.State.(*session)
	s.mu.Lock()
	h := s.handles[id]
	s.mu.Unlock()
	if h == nil || h.owner != ss.peer.String() {
		return nil, wire.Errorf(wire.CodeBadHandle, "file handle %#x is not open (it was closed, or its session ended)", id)
	}
	return h, nil
}

func (s *Server) dropHandle(req *rpc.Request, id uint64) (*handle, error) {
	h, err := s.handle(req, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.handles[id] == h {
		s.forgetHandleLocked(id, h)
	}
	s.mu.Unlock()
	return h, nil
}

func isExpired(err error) bool { return errors.Is(err, auth.ErrTokenExpired) }

// changed records paths changed through the share by the request's agent.
func (s *Server) changed(req *rpc.Request, paths ...string) {
	src := invSessionOf(req)
	stamp, recalled := s.inv.record(src, paths...)
	// Callback sessions must have dropped what they cached of these
	// paths before the change is acknowledged to its maker.
	s.inv.waitAcked(stamp, recalled)
}

// changedData is changed for writes and truncates: those of the holder of
// a write delegation being returned are recorded once, when the return is
// done (readers that went ahead read only bytes already final, and would
// otherwise drop what they cached at every write of the return).
func (s *Server) changedData(req *rpc.Request, rel string) {
	if s.inv.delegCount.Load() > 0 && s.inv.returningBy(invSessionOf(req), rel) {
		return
	}
	s.changed(req, rel)
}

// invSessionOf names the invalidation session of the request's agent
// ("" for clients without one).
func invSessionOf(req *rpc.Request) string {
	ss, ok := req.Conn.State.(*session)
	if !ok {
		return ""
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.inv
}

// touch is called before a request uses rel: it waits for another
// agent's write delegation on rel (or, for a listing, on its entries) to
// be returned as far as the request needs (want: the bytes it reads
// first), then grants the request's session a read delegation on rel.
// It fails when a holder answered that it cannot write its data back.
func (s *Server) touch(req *rpc.Request, rel string, want wire.ByteRange) error {
	id := invSessionOf(req)
	await := func() error {
		for _, p := range s.inv.delegsNear(rel, req.Op == wire.OpReadDir) {
			if err := s.inv.awaitDeleg(id, p, want, mutates(req.Op)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := await(); err != nil {
		return err
	}
	s.holds(req, rel)
	// A delegation granted since the wait recalls the read holds taken
	// before it was recorded; one taken after must wait for it here.
	return await()
}

// mutates reports whether requests of op change what they name (and so
// must wait for a recalled write delegation to be returned completely).
func mutates(op wire.Op) bool {
	switch op {
	case wire.OpGetAttr, wire.OpReadDir, wire.OpReadlink, wire.OpStatFS, wire.OpOpen, wire.OpRead,
		wire.OpFGetAttr, wire.OpSum, wire.OpGetFile, wire.OpFsync, wire.OpClose, wire.OpGetXattr, wire.OpListXattr:
		return false
	}
	return true
}

// holds grants the request's session read delegations on paths, before
// the request reads them (see invTable.hold).
func (s *Server) holds(req *rpc.Request, paths ...string) {
	id := invSessionOf(req)
	if id == "" {
		return
	}
	for _, p := range paths {
		s.inv.hold(id, p)
	}
}

// changedLocally records a change a local program made in the exported
// directory.
func (s *Server) changedLocally(paths ...string) { s.inv.recordLocal(paths...) }
