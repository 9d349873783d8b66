package relay_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/relay"
)

// domain is a CA and the certificates it issues.
type domain struct {
	t  *testing.T
	ca *auth.CA
}

func newDomain(t *testing.T, name string) *domain {
	ca, err := auth.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, ca: ca}
}

func (d *domain) cert(id auth.Identity) tls.Certificate {
	d.t.Helper()
	key, keyPEM, _ := auth.NewKey()
	certPEM, _, err := d.ca.Issue(id, key.Public(), time.Hour, []string{"127.0.0.1"})
	if err != nil {
		d.t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

func shareID(domain, name string) auth.Identity {
	return auth.Identity{Domain: domain, Role: auth.RoleShare, Name: name}
}

// verifier trusts the CAs of doms, each for its own domain.
func verifier(t *testing.T, doms ...*domain) func([]*x509.Certificate) (string, error) {
	var pems [][]byte
	for _, d := range doms {
		pems = append(pems, d.ca.CertPEM())
	}
	f, err := auth.NewForeign(pems)
	if err != nil {
		t.Fatal(err)
	}
	return func(chain []*x509.Certificate) (string, error) {
		id, err := f.Verify(chain)
		return id.String(), err
	}
}

// startRelay runs a relay trusting the CAs of doms.
func startRelay(t *testing.T, lim relay.Limits, doms ...*domain) (*relay.Server, string) {
	t.Helper()
	srv, err := relay.New(relay.Config{Limits: lim, Verify: verifier(t, doms...)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, ln.Addr().String()
}

// serve registers server id of d at the relay and answers, over mutual
// TLS end to end, each line a client sends with the server's name and the
// line.
func serve(t *testing.T, d *domain, id auth.Identity, relayAddr string) *relay.Listener {
	t.Helper()
	ln, err := listen(d, id, id.String(), relayAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	echoOn(d, id, ln)
	return ln
}

// echoOn answers each line a client sends on ln, over mutual TLS as id,
// with the server's name and the line.
func echoOn(d *domain, id auth.Identity, ln net.Listener) {
	conf := auth.ServerConfig(d.cert(id), d.ca.Pool())
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(nc, conf)
				defer tc.Close()
				br := bufio.NewReader(tc)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(tc, "%s: %s", id, line)
				}
			}()
		}
	}()
}

func listen(d *domain, id auth.Identity, name, relayAddr string) (*relay.Listener, error) {
	return relay.Listen(context.Background(), relay.ListenConfig{Relay: relayAddr, Name: name,
		TLS: &tls.Config{Certificates: []tls.Certificate{d.cert(id)}}})
}

// client dials the server at addr through its relay and runs TLS to it as
// alice of d, checking the server is want.
func client(d *domain, addr string, want auth.Identity) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := relay.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	conf := auth.ClientConfig(d.cert(auth.Identity{Domain: d.ca.Domain(), Role: auth.RoleUser, Name: "alice"}), d.ca.Pool(),
		func(id auth.Identity) error {
			if id != want {
				return fmt.Errorf("expected %s, but the server is %s", want, id)
			}
			return nil
		})
	tc := tls.Client(nc, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return tc, nil
}

// echo sends a line and returns the answer.
func echo(t *testing.T, c net.Conn, line string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(got, "\n")
}

func mustRefuse(t *testing.T, err error, fragment string) {
	t.Helper()
	var ref *relay.Refused
	if !errors.As(err, &ref) || !strings.Contains(err.Error(), fragment) {
		t.Fatalf("want a refusal saying %q, got %v", fragment, err)
	}
}

// TestThroughRelay: a client reaches a registered server through the
// relay with TLS end to end; the relay counts the connection and the
// bytes each way.
func TestThroughRelay(t *testing.T) {
	uva := newDomain(t, "uva")
	srv, addr := startRelay(t, relay.Limits{}, uva)
	id := shareID("uva", "data")
	ln := serve(t, uva, id, addr)
	if want := "relay://" + addr + "/share:data@uva"; ln.Addr().String() != want {
		t.Fatalf("address %s, want %s", ln.Addr(), want)
	}
	for i := range 3 {
		c, err := client(uva, ln.Addr().String(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := echo(t, c, fmt.Sprint("hello ", i)), fmt.Sprintf("share:data@uva: hello %d", i); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := srv.Stats()["share:data@uva"]
		if st.Conns == 3 && st.Active == 0 && st.ToServer > 0 && st.ToClient > 0 && st.Registered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: want 3 connections ended, bytes both ways", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnknownName: a client asking for a name nobody registered is told
// so in one sentence.
func TestUnknownName(t *testing.T) {
	uva := newDomain(t, "uva")
	srv, addr := startRelay(t, relay.Limits{}, uva)
	_, err := client(uva, relay.Addr(addr, "share:nobody@uva"), shareID("uva", "nobody"))
	mustRefuse(t, err, "no server named share:nobody@uva is registered at this relay")
	if n := srv.Stats()[""].Refused["unknown-server"]; n != 1 {
		t.Errorf("%d unknown-server refusals counted, want 1", n)
	}
}

// TestUntrustedCA: a server whose certificate another CA issued is
// refused registration, and the relay keeps serving the others.
func TestUntrustedCA(t *testing.T) {
	uva, evil, fake := newDomain(t, "uva"), newDomain(t, "evil"), newDomain(t, "uva")
	_, addr := startRelay(t, relay.Limits{}, uva)
	id := shareID("uva", "data")
	ln := serve(t, uva, id, addr)
	_, err := listen(evil, shareID("evil", "data"), "share:data@evil", addr)
	mustRefuse(t, err, "this relay does not accept your certificate: share:data@evil is of domain evil, which is not among the domains trusted here (uva)")
	// Nor can a CA that calls itself uva's pass for it.
	_, err = listen(fake, shareID("uva", "data"), "share:data@uva", addr)
	mustRefuse(t, err, "this relay does not accept your certificate: the certificate of share:data@uva was not issued by domain uva's CA")
	c, err := client(uva, ln.Addr().String(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := echo(t, c, "still here"); got != "share:data@uva: still here" {
		t.Errorf("got %q", got)
	}
}

// TestOthersName: a server of a trusted CA cannot register under another
// server's name; clients of that name still reach the real one.
func TestOthersName(t *testing.T) {
	uva := newDomain(t, "uva")
	_, addr := startRelay(t, relay.Limits{}, uva)
	data := shareID("uva", "data")
	ln := serve(t, uva, data, addr)
	_, err := listen(uva, shareID("uva", "evil"), "share:data@uva", addr)
	mustRefuse(t, err, "your certificate is share:evil@uva's: a server registers only under its own name")
	c, err := client(uva, ln.Addr().String(), data)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := echo(t, c, "who"); got != "share:data@uva: who" {
		t.Errorf("got %q", got)
	}
}

// rawConnect asks the relay for name from a given local address, and
// returns the connection and the relay's answer.
func rawConnect(t *testing.T, relayAddr, from, name string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", relayAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(nc, "%s CONNECT %s\n", relay.Magic, name)
	line, err := relay.ReadLine(nc)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return nc, line
}

// TestLimits: over its limit per server or per client address, a request
// is refused in one sentence while the others are served.
func TestLimits(t *testing.T) {
	uva := newDomain(t, "uva")
	srv, addr := startRelay(t, relay.Limits{PerServer: 2, PerClient: 3}, uva)
	serve(t, uva, shareID("uva", "data"), addr)
	serve(t, uva, shareID("uva", "other"), addr)
	for range 2 {
		if _, line := rawConnect(t, addr, "127.0.0.1", "share:data@uva"); line != "OK" {
			t.Fatalf("answer %q, want OK", line)
		}
	}
	_, line := rawConnect(t, addr, "127.0.0.2", "share:data@uva")
	if line != "ERR share:data@uva has 2 connections through this relay, its limit; try again later" {
		t.Errorf("over the server's limit: %q", line)
	}
	// 127.0.0.1 holds 2; one more is its third and last.
	if _, line := rawConnect(t, addr, "127.0.0.1", "share:other@uva"); line != "OK" {
		t.Fatalf("answer %q, want OK", line)
	}
	_, line = rawConnect(t, addr, "127.0.0.1", "share:other@uva")
	if line != "ERR 127.0.0.1 holds 3 connections through this relay, its limit; close some and try again" {
		t.Errorf("over the client's limit: %q", line)
	}
	// Another address is still served, end to end.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintf(nc, "%s CONNECT share:other@uva\n", relay.Magic)
	if line, err := relay.ReadLine(nc); err != nil || line != "OK" {
		t.Fatalf("answer %q, %v", line, err)
	}
	other := shareID("uva", "other")
	conf := auth.ClientConfig(uva.cert(auth.Identity{Domain: "uva", Role: auth.RoleUser, Name: "bob"}), uva.ca.Pool(), nil)
	tc := tls.Client(nc, conf)
	if got := echo(t, tc, "hi"); got != other.String()+": hi" {
		t.Errorf("got %q", got)
	}
	st := srv.Stats()
	if st["share:data@uva"].Refused["server-limit"] != 1 || st[""].Refused["client-limit"] != 1 {
		t.Errorf("refusals counted: %+v, %+v", st["share:data@uva"].Refused, st[""].Refused)
	}
}

// TestBoundedRequests: a peer that sends no request, or one too long, or
// one the relay cannot read, is answered or cut within the handshake
// bound; a nonce nobody was given opens nothing.
func TestBoundedRequests(t *testing.T) {
	uva := newDomain(t, "uva")
	_, addr := startRelay(t, relay.Limits{Handshake: 300 * time.Millisecond}, uva)
	id := shareID("uva", "data")
	ln := serve(t, uva, id, addr)

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, tc := range []struct{ send, want string }{
		{strings.Repeat("x", 300) + "\n", "ERR the relay expected a request line: malformed relay line: a line is at most 256 bytes"},
		{"GET / HTTP/1.1\n", "ERR the relay cannot read your request: malformed relay line: a request is \"PANDO-RELAY/1\" VERB ARGUMENT"},
		{relay.Magic + " ACCEPT " + strings.Repeat("ab", relay.NonceSize) + "\n", "ERR no client awaits this nonce: it was used, or it expired"},
		{relay.Magic + " REGISTER share:data@uva\n", "ERR register over TLS, not in the clear"},
	} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(nc, tc.send)
		line, _ := relay.ReadLine(nc)
		if line != tc.want {
			t.Errorf("sent %.40q: got %q, want %q", tc.send, line, tc.want)
		}
		nc.Close()
	}
	// Served meanwhile, and the silent peer was cut.
	c, err := client(uva, ln.Addr().String(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := echo(t, c, "ok"); got != "share:data@uva: ok" {
		t.Errorf("got %q", got)
	}
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a silent peer: %v, want the relay to close it", err)
	}
}

// TestIdle: a splice on which nothing moves is ended after the idle bound.
func TestIdle(t *testing.T) {
	uva := newDomain(t, "uva")
	srv, addr := startRelay(t, relay.Limits{Idle: 300 * time.Millisecond}, uva)
	id := shareID("uva", "data")
	ln := serve(t, uva, id, addr)
	c, err := client(uva, ln.Addr().String(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c, "once")
	t0 := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data nobody sent")
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("an idle splice lasted %s", d)
	}
	for srv.Stats()["share:data@uva"].Active != 0 {
		if time.Since(t0) > 5*time.Second {
			t.Fatal("the idle splice is still counted as active")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReregister: a server whose control connection the relay lost
// registers again by itself.
func TestReregister(t *testing.T) {
	uva := newDomain(t, "uva")
	srv, addr := startRelay(t, relay.Limits{}, uva)
	id := shareID("uva", "data")
	ln := serve(t, uva, id, addr)
	srv.Close()
	// A new relay at the same address: the server comes back to it.
	srv2, err := relay.New(relay.Config{Verify: verifier(t, uva)})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv2.Serve(l2)
	defer srv2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !srv2.Stats()["share:data@uva"].Registered {
		if time.Now().After(deadline) {
			t.Fatal("the server did not register again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := client(uva, ln.Addr().String(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := echo(t, c, "back"); got != "share:data@uva: back" {
		t.Errorf("got %q", got)
	}
}

// TestRelaySeesOnlyTLS: every byte that crosses the relay's port on a
// client's connection is TLS; what the client and the server say to each
// other is not among them.
func TestRelaySeesOnlyTLS(t *testing.T) {
	uva := newDomain(t, "uva")
	_, addr := startRelay(t, relay.Limits{}, uva)
	id := shareID("uva", "data")
	serve(t, uva, id, addr)
	// A tap in front of the relay records what the client's side carries.
	tap, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	var up, down bytes.Buffer // client to relay, relay to client
	var mu sync.Mutex
	tapped := make(chan struct{})
	go func() {
		defer close(tapped)
		c, err := tap.Accept()
		if err != nil {
			return
		}
		r, err := net.Dial("tcp", addr)
		if err != nil {
			c.Close()
			return
		}
		rec := func(dst, src net.Conn, seen *bytes.Buffer) {
			buf := make([]byte, 4096)
			for {
				n, err := src.Read(buf)
				mu.Lock()
				seen.Write(buf[:n])
				mu.Unlock()
				if n > 0 {
					dst.Write(buf[:n])
				}
				if err != nil {
					dst.Close()
					return
				}
			}
		}
		upDone := make(chan struct{})
		go func() { rec(r, c, &up); close(upDone) }()
		rec(c, r, &down)
		<-upDone
	}()
	c, err := client(uva, relay.Addr(tap.Addr().String(), id.String()), id)
	if err != nil {
		t.Fatal(err)
	}
	secret := "the secret payload, 0123456789"
	if got := echo(t, c, secret); got != "share:data@uva: "+secret {
		t.Fatalf("got %q", got)
	}
	c.Close()
	select {
	case <-tapped:
	case <-time.After(10 * time.Second):
		t.Fatal("the splice did not end after the client closed")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, way := range []struct {
		name string
		b    []byte
	}{{"to the relay", up.Bytes()}, {"from the relay", down.Bytes()}} {
		if bytes.Contains(way.b, []byte("secret payload")) {
			t.Fatalf("the relay's port carried the payload in the clear %s", way.name)
		}
		// After the request line or its OK: TLS records only (content
		// types 20..23, version 3.x).
		rest := way.b[bytes.IndexByte(way.b, '\n')+1:]
		if len(rest) == 0 {
			t.Fatalf("nothing recorded %s after the relay's lines", way.name)
		}
		for len(rest) > 0 {
			if len(rest) < 5 || rest[0] < 20 || rest[0] > 23 || rest[1] != 3 {
				t.Fatalf("%s: bytes that are not a TLS record: % x", way.name, rest[:min(len(rest), 5)])
			}
			rest = rest[min(len(rest), 5+(int(rest[3])<<8|int(rest[4]))):]
		}
	}
}

// TestMerge: a server that listens and is served through a relay answers
// on both, with one loop; closing the merged listener closes both.
func TestMerge(t *testing.T) {
	uva := newDomain(t, "uva")
	_, addr := startRelay(t, relay.Limits{}, uva)
	id := shareID("uva", "data")
	via, err := listen(uva, id, id.String(), addr)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	both := relay.Merge(direct, via)
	echoOn(uva, id, both)
	c, err := client(uva, via.Addr().String(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := echo(t, c, "via"); got != "share:data@uva: via" {
		t.Errorf("through the relay: %q", got)
	}
	raw, err := net.Dial("tcp", direct.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dc := tls.Client(raw, auth.ClientConfig(uva.cert(auth.Identity{Domain: "uva", Role: auth.RoleUser, Name: "bob"}), uva.ca.Pool(), nil))
	defer dc.Close()
	if got := echo(t, dc, "direct"); got != "share:data@uva: direct" {
		t.Errorf("directly: %q", got)
	}
	both.Close()
	if _, err := net.DialTimeout("tcp", direct.Addr().String(), time.Second); err == nil {
		t.Error("the direct listener still accepts after Close")
	}
	if _, err := both.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
}
