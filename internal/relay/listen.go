package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Ping cadence on a server's control connection: the relay sends a ping
// every pingEvery, and a server that hears nothing for silentAfter dials
// the relay again.
const (
	pingEvery   = 15 * time.Second
	silentAfter = 3 * pingEvery
	// maxDialBacks bounds a server's dial-backs under way (not yet
	// accepted by its own server loop).
	maxDialBacks = 128
)

// ListenConfig says how a server that cannot accept connections is served
// through a relay.
type ListenConfig struct {
	// Relay is the relay's host:port.
	Relay string
	// Advertise is the relay's host:port as clients dial it, where that
	// differs (NAT, a WAN emulator in front of it); default Relay.
	Advertise string
	// Name is the server's identity as its certificate says
	// (share:data@uva): the relay registers it under that name only.
	Name string
	// TLS carries the server's certificate, presented to the relay. The
	// relay's own certificate is not checked: a relay is not trusted with
	// anything but forwarding (docs/security.md, "Relays").
	TLS *tls.Config
	Log *slog.Logger
}

// Listener is a net.Listener whose connections arrive through a relay: it
// keeps a control connection to the relay (mutual TLS, registered under
// the server's name), and for each client the relay announces it dials a
// fresh connection back with the nonce it was given. Accept returns those
// connections, over which the server runs its usual TLS.
type Listener struct {
	cfg  ListenConfig
	addr relayAddr
	// backs bounds the dial-backs under way: a relay that asks for more
	// (it is not trusted) is ignored past it.
	backs chan struct{}
	conns chan net.Conn
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu  sync.Mutex
	ctl net.Conn // the control connection now, if any
}

var _ net.Listener = (*Listener)(nil)

type relayAddr string

func (a relayAddr) Network() string { return "relay" }
func (a relayAddr) String() string  { return string(a) }

// Listen registers the server with the relay and returns its listener.
// The first registration's failure (an unreachable relay, a certificate
// it does not trust, another's name) is returned; later losses of the
// control connection are logged and retried with back-off until Close.
func Listen(ctx context.Context, cfg ListenConfig) (*Listener, error) {
	if err := ValidName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	conf := cfg.TLS.Clone()
	conf.MinVersion = tls.VersionTLS13
	conf.InsecureSkipVerify = true // the relay is not trusted (see ListenConfig.TLS)
	cfg.TLS = conf
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.Relay
	}
	l := &Listener{cfg: cfg, addr: relayAddr(Addr(cfg.Advertise, cfg.Name)), conns: make(chan net.Conn), quit: make(chan struct{}),
		backs: make(chan struct{}, maxDialBacks)}
	ctl, err := l.register(ctx)
	if err != nil {
		return nil, err
	}
	l.wg.Add(1)
	go l.run(ctl)
	return l, nil
}

// register opens a control connection and registers the server.
func (l *Listener) register(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	raw, err := DialTCP(ctx, l.cfg.Relay)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, l.cfg.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with the relay at %s: %w", l.cfg.Relay, err)
	}
	if err := ask(ctx, tc, Request{Verb: VerbRegister, Name: l.cfg.Name}); err != nil {
		tc.Close()
		return nil, fmt.Errorf("the relay at %s did not register %s: %w", l.cfg.Relay, l.cfg.Name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.quit:
		tc.Close()
		return nil, net.ErrClosed
	default:
	}
	l.ctl = tc
	return tc, nil
}

// run reads the relay's control lines, and registers again whenever the
// control connection is lost.
func (l *Listener) run(ctl net.Conn) {
	defer l.wg.Done()
	delay := 100 * time.Millisecond
	for {
		err := l.serveControl(ctl)
		ctl.Close()
		for {
			select {
			case <-l.quit:
				return
			default:
			}
			l.cfg.Log.Warn("lost the relay; registering again", "relay", l.cfg.Relay, "name", l.cfg.Name, "err", err)
			select {
			case <-l.quit:
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 10*time.Second)
			if ctl, err = l.register(context.Background()); err == nil {
				delay = 100 * time.Millisecond
				break
			}
		}
	}
}

// serveControl handles one control connection until it fails.
func (l *Listener) serveControl(ctl net.Conn) error {
	for {
		_ = ctl.SetReadDeadline(time.Now().Add(silentAfter))
		line, err := ReadLine(ctl)
		if err != nil {
			return err
		}
		nonce, dial, err := ParseControl(line)
		if err != nil {
			return err
		}
		if !dial {
			continue
		}
		select {
		case l.backs <- struct{}{}:
			l.wg.Add(1)
			go l.dialBack(nonce)
		default:
			l.cfg.Log.Warn("the relay asks for more connections at once than a server dials back; ignored", "relay", l.cfg.Relay, "limit", maxDialBacks)
		}
	}
}

// dialBack opens the connection the relay splices to a client's.
func (l *Listener) dialBack(nonce [NonceSize]byte) {
	defer l.wg.Done()
	defer func() { <-l.backs }()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	nc, err := DialTCP(ctx, l.cfg.Relay)
	if err == nil {
		err = ask(ctx, nc, Request{Verb: VerbAccept, Nonce: nonce})
		if err != nil {
			nc.Close()
		}
	}
	if err != nil {
		l.cfg.Log.Info("could not take a connection through the relay", "relay", l.cfg.Relay, "err", err)
		return
	}
	select {
	case l.conns <- nc:
	case <-l.quit:
		nc.Close()
	}
}

// Accept waits for the next connection through the relay.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.quit:
		return nil, net.ErrClosed
	}
}

// Close ends the registration; connections accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.quit)
		if l.ctl != nil {
			l.ctl.Close()
		}
		l.mu.Unlock()
	})
	l.wg.Wait()
	return nil
}

// Addr is the relay address clients dial: relay://HOST:PORT/NAME.
func (l *Listener) Addr() net.Addr { return l.addr }

// Merge returns a listener that accepts from every one of lns (a direct
// one beside one through a relay); Close closes them all; Addr is the
// first one's.
func Merge(lns ...net.Listener) net.Listener {
	if len(lns) == 1 {
		return lns[0]
	}
	m := &merged{lns: lns, conns: make(chan net.Conn), errs: make(chan error, len(lns)), quit: make(chan struct{})}
	for _, ln := range lns {
		go m.pump(ln)
	}
	return m
}

type merged struct {
	lns   []net.Listener
	conns chan net.Conn
	errs  chan error
	quit  chan struct{}
	once  sync.Once
}

func (m *merged) pump(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				m.errs <- err
			}
			return
		}
		select {
		case m.conns <- nc:
		case <-m.quit:
			nc.Close()
			return
		}
	}
}

func (m *merged) Accept() (net.Conn, error) {
	select {
	case nc := <-m.conns:
		return nc, nil
	case err := <-m.errs:
		return nil, err
	case <-m.quit:
		return nil, net.ErrClosed
	}
}

func (m *merged) Close() error {
	m.once.Do(func() {
		close(m.quit)
		for _, ln := range m.lns {
			ln.Close()
		}
	})
	return nil
}

func (m *merged) Addr() net.Addr { return m.lns[0].Addr() }
