package relay

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Limits bound what each peer may hold at a relay. Zero fields take the
// defaults.
type Limits struct {
	// PerServer caps the spliced (and pending) connections to one
	// registered server (default 256: some 80 agents, at three
	// connections each).
	PerServer int
	// PerClient caps the connections one client address (IP) holds:
	// spliced, pending, or still sending its request (default 128: an
	// agent or gateway host reading some 40 shares through the relay).
	PerClient int
	// Handshake bounds a peer's request line, and a server's dial back
	// (default 10 s).
	Handshake time.Duration
	// Idle ends a splice on which no byte moved either way for this long
	// (default 5 min).
	Idle time.Duration
}

func (l Limits) orDefaults() Limits {
	if l.PerServer <= 0 {
		l.PerServer = 256
	}
	if l.PerClient <= 0 {
		l.PerClient = 128
	}
	if l.Handshake <= 0 {
		l.Handshake = handshakeTimeout
	}
	if l.Idle <= 0 {
		l.Idle = 5 * time.Minute
	}
	return l
}

// Config configures a relay.
type Config struct {
	// Verify checks a server's certificate chain (leaf first) and
	// returns the name its holder registers under, and no other (for
	// pando: auth.Foreign's Verify, each domain's CA for its own domain
	// only, and the identity's String). Its error, one sentence, is what
	// the server is told.
	Verify func(chain []*x509.Certificate) (string, error)
	Limits Limits
	Log    *slog.Logger
}

// Server is a relay: servers that cannot accept connections register with
// it, and it splices each client that asks for one of them to a fresh
// connection the server dials back. It reads nothing of the spliced
// bytes: both ends run their own TLS through it.
type Server struct {
	cfg   Config
	lim   Limits
	tls   *tls.Config
	stats stats

	mu      sync.Mutex
	servers map[string]*registered       // by name
	pending map[[NonceSize]byte]*awaited // dial-backs awaited
	clients map[string]int               // CONNECT splices per client IP
	active  map[string]int               // splices and pending ones per server name
	// handshaking counts, per IP, connections whose request is not read yet.
	handshaking map[string]int
	ln          net.Listener
	conns       map[net.Conn]struct{} // every connection open, to end at Close
	closed      bool
	quit        chan struct{} // closed by Close
	wg          sync.WaitGroup
}

// awaited is a client waiting for its server's dial-back.
type awaited struct {
	back chan *handed  // the dial-back, handed over
	gone chan struct{} // closed when the client stops waiting
}

// registered is a server's control connection and its splices.
type registered struct {
	name string
	ctl  net.Conn
	wmu  sync.Mutex // serialises control lines
}

// New returns a relay; Serve runs it.
func New(cfg Config) (*Server, error) {
	if cfg.Verify == nil {
		return nil, errors.New("a relay needs the CA certificates it trusts (--ca)")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, lim: cfg.Limits.orDefaults(), servers: map[string]*registered{},
		pending: map[[NonceSize]byte]*awaited{}, clients: map[string]int{}, active: map[string]int{}, handshaking: map[string]int{}, conns: map[net.Conn]struct{}{}, quit: make(chan struct{})}
	s.stats.init()
	// The relay asks for any certificate and has Verify check it, so that
	// a refusal is a sentence the server can print, not a TLS alert.
	s.tls = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
	return s, nil
}

// Serve accepts connections on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.ln = ln
	s.mu.Unlock()
	var delay time.Duration
	s.wg.Add(1)
	go s.ping()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, net.ErrClosed) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if !s.track(nc) {
			nc.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(nc)
			s.handle(nc)
		}()
	}
}

// Close stops accepting, ends every connection and waits for them.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.quit)
	}
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[nc] = struct{}{}
	return true
}

func (s *Server) untrack(nc net.Conn) {
	nc.Close()
	s.mu.Lock()
	delete(s.conns, nc)
	s.mu.Unlock()
}

// ping keeps every control connection (and its NAT mapping) alive, and
// finds the dead ones.
func (s *Server) ping() {
	defer s.wg.Done()
	tick := time.NewTicker(pingEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		regs := make([]*registered, 0, len(s.servers))
		for _, r := range s.servers {
			regs = append(regs, r)
		}
		s.mu.Unlock()
		for _, r := range regs {
			if err := r.send(ctlPing, s.lim.Handshake); err != nil {
				r.ctl.Close()
			}
		}
	}
}

func (r *registered) send(line string, within time.Duration) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.ctl.SetWriteDeadline(time.Now().Add(within))
	return writeLine(r.ctl, line)
}

func clientIP(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return nc.RemoteAddr().String()
}

// handle reads a connection's first request: a TLS handshake is a server
// registering; a plain line is a client (CONNECT) or a server dialling
// back (ACCEPT).
func (s *Server) handle(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	ip := clientIP(nc)
	// Until its request is read, a connection holds one of its address's
	// handshake slots; a client's CONNECT then holds one of its client
	// slots for as long as it lasts. A server's dial-backs and control
	// connection are bounded by its name, not by its address (a site
	// behind one NAT address may hold both servers and clients).
	if !s.hold(s.handshaking, ip) {
		s.refuse(nc, "", reasonClientBusy, fmt.Sprintf("%s has %d connections opening at this relay, its limit; try again later", ip, s.lim.PerClient))
		return
	}
	held := true
	release := func() {
		if held {
			held = false
			s.drop(s.handshaking, ip)
		}
	}
	defer release()
	_ = nc.SetDeadline(time.Now().Add(s.lim.Handshake))
	var first [1]byte
	if _, err := io.ReadFull(nc, first[:]); err != nil {
		return
	}
	pre := &prefixed{Conn: nc, b: first[:]}
	if first[0] == 0x16 { // a TLS handshake record: a server registering
		s.register(tls.Server(pre, s.tls), ip, release)
		return
	}
	line, err := ReadLine(pre)
	if err != nil {
		s.refuse(nc, "", reasonBadRequest, "the relay expected a request line: "+err.Error())
		return
	}
	req, err := ParseRequest(line)
	if err != nil {
		s.refuse(nc, "", reasonBadRequest, "the relay cannot read your request: "+err.Error())
		return
	}
	release()
	switch req.Verb {
	case VerbConnect:
		if !s.hold(s.clients, ip) {
			s.refuse(nc, "", reasonClientBusy, fmt.Sprintf("%s holds %d connections through this relay, its limit; close some and try again", ip, s.lim.PerClient))
			return
		}
		defer s.drop(s.clients, ip)
		s.connect(nc, req.Name)
	case VerbAccept:
		s.accept(nc, req.Nonce)
	default:
		s.refuse(nc, "", reasonBadRequest, "register over TLS, not in the clear")
	}
}

// hold counts a connection of ip in m, if ip has room there.
func (s *Server) hold(m map[string]int, ip string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m[ip] >= s.lim.PerClient {
		return false
	}
	m[ip]++
	return true
}

func (s *Server) drop(m map[string]int, ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m[ip]--; m[ip] <= 0 {
		delete(m, ip)
	}
}

// refuse answers a request with one sentence, counts and logs it. Its
// count goes to server only when server is registered (the metrics of
// names peers merely claim would grow without bound), else to "".
func (s *Server) refuse(nc net.Conn, server, reason, sentence string) {
	s.stats.refused(server, reason)
	s.cfg.Log.Info("relay refused", "peer", nc.RemoteAddr().String(), "server", server, "reason", reason, "why", sentence)
	_ = nc.SetWriteDeadline(time.Now().Add(s.lim.Handshake))
	_ = writeLine(nc, refusal(sentence))
}

// register checks a server's certificate and name and keeps its control
// connection until it closes.
// Its address's hold is released once it is registered: a control
// connection is bounded by its name, not by its address.
func (s *Server) register(tc *tls.Conn, ip string, release func()) {
	if err := tc.Handshake(); err != nil {
		s.stats.refused("", reasonBadRequest)
		s.cfg.Log.Info("relay: TLS handshake failed", "peer", ip, "err", err)
		return
	}
	line, err := ReadLine(tc)
	if err != nil {
		return
	}
	req, err := ParseRequest(line)
	if err != nil || req.Verb != VerbRegister {
		s.refuse(tc, "", reasonBadRequest, "a server's first line over TLS is a REGISTER request")
		return
	}
	id, err := s.cfg.Verify(tc.ConnectionState().PeerCertificates)
	if err != nil {
		s.refuse(tc, "", reasonUntrusted, "this relay does not accept your certificate: "+oneLine(err))
		return
	}
	if id != req.Name {
		s.refuse(tc, "", reasonWrongName, fmt.Sprintf("your certificate is %s's: a server registers only under its own name, not %s", id, req.Name))
		return
	}
	r := &registered{name: id, ctl: tc}
	s.mu.Lock()
	if old := s.servers[id]; old != nil {
		old.ctl.Close() // the newest registration wins: the same certificate, reconnected
	}
	s.servers[id] = r
	s.mu.Unlock()
	s.stats.server(id).registered.Store(true)
	// Registered before it hears OK: a client it tells at once finds it.
	err = r.send("OK", s.lim.Handshake)
	_ = tc.SetDeadline(time.Time{})
	release()
	if err == nil {
		s.cfg.Log.Info("relay: server registered", "server", id, "from", ip)
		// A server sends nothing more; a read returns when it goes.
		var b [1]byte
		_, err = tc.Read(b[:])
	}
	s.mu.Lock()
	if s.servers[id] == r {
		delete(s.servers, id)
		s.stats.server(id).registered.Store(false)
	}
	s.mu.Unlock()
	s.cfg.Log.Info("relay: server left", "server", id, "err", err)
}

// connect splices a client to a fresh connection from the server it names.
func (s *Server) connect(nc net.Conn, name string) {
	s.mu.Lock()
	r := s.servers[name]
	switch {
	case r == nil:
		s.mu.Unlock()
		s.refuse(nc, "", reasonUnknown, fmt.Sprintf("no server named %s is registered at this relay", name))
		return
	case s.active[name] >= s.lim.PerServer:
		s.mu.Unlock()
		s.refuse(nc, name, reasonServerBusy, fmt.Sprintf("%s has %d connections through this relay, its limit; try again later", name, s.lim.PerServer))
		return
	}
	s.active[name]++
	var nonce [NonceSize]byte
	_, _ = rand.Read(nonce[:])
	w := &awaited{back: make(chan *handed), gone: make(chan struct{})}
	s.pending[nonce] = w
	s.mu.Unlock()
	defer func() {
		close(w.gone)
		s.mu.Lock()
		delete(s.pending, nonce)
		if s.active[name]--; s.active[name] <= 0 {
			delete(s.active, name)
		}
		s.mu.Unlock()
	}()
	st := s.stats.server(name)
	if err := r.send(ctlDial+" "+fmt.Sprintf("%x", nonce), s.lim.Handshake); err != nil {
		r.ctl.Close()
		s.refuse(nc, name, reasonNoAnswer, name+" is not answering the relay; try again later")
		return
	}
	var h *handed
	select {
	case h = <-w.back:
	case <-time.After(s.lim.Handshake):
		s.refuse(nc, name, reasonNoAnswer, fmt.Sprintf("%s did not answer through the relay within %s", name, s.lim.Handshake))
		return
	}
	defer h.release()
	sc := h.Conn
	_ = sc.SetDeadline(time.Now().Add(s.lim.Handshake))
	if writeLine(sc, "OK") != nil || writeLine(nc, "OK") != nil {
		return
	}
	_ = sc.SetDeadline(time.Time{})
	_ = nc.SetDeadline(time.Time{})
	st.conns.Add(1)
	st.active.Add(1)
	defer st.active.Add(-1)
	up, down := splice(nc, sc, s.lim.Idle, &st.up, &st.down)
	s.cfg.Log.Info("relay: splice ended", "server", name, "client", nc.RemoteAddr().String(), "to_server", up, "to_client", down)
}

// accept hands a server's dial-back to the client waiting for it.
func (s *Server) accept(nc net.Conn, nonce [NonceSize]byte) {
	s.mu.Lock()
	w := s.pending[nonce]
	delete(s.pending, nonce) // one use
	s.mu.Unlock()
	if w == nil {
		s.refuse(nc, "", reasonBadRequest, "no client awaits this nonce: it was used, or it expired")
		return
	}
	h := &handed{Conn: nc, done: make(chan struct{})}
	select {
	case w.back <- h:
		<-h.done // the splice owns nc until then
	case <-w.gone:
		s.refuse(nc, "", reasonBadRequest, "the client stopped waiting for this connection")
	}
}

// handed is a server's connection lent to a splice; release gives it back
// to its handler, which closes it.
type handed struct {
	net.Conn
	done chan struct{}
}

func (h *handed) release() { close(h.done) }

// prefixed is a connection whose first bytes were read already.
type prefixed struct {
	net.Conn
	b []byte
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.b) > 0 {
		n := copy(b, p.b)
		p.b = p.b[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

func oneLine(err error) string { return refusal(err.Error())[4:] }
