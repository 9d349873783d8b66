package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Dial connects to the server named in a relay address (see Addr) through
// its relay and returns the spliced connection: the caller then runs its
// own TLS handshake over it, end to end with the server. A refusal is a
// *Refused wrapped in a sentence that names the relay.
func Dial(ctx context.Context, addr string) (net.Conn, error) {
	relayAddr, name, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	nc, err := DialTCP(ctx, relayAddr)
	if err != nil {
		return nil, fmt.Errorf("the relay of %s: %w", name, err)
	}
	if err := ask(ctx, nc, Request{Verb: VerbConnect, Name: name}); err != nil {
		nc.Close()
		var ref *Refused
		if errors.As(err, &ref) {
			return nil, fmt.Errorf("the relay at %s refused: %w", relayAddr, err)
		}
		return nil, fmt.Errorf("the relay at %s: %w", relayAddr, err)
	}
	return nc, nil
}

// DialTCP connects to host:port addr with keep-alives and without Nagle's
// delay, as every pando connection is made (rpc dials with it too).
func DialTCP(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot reach %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return nc, nil
}

// ask sends a request and reads the relay's answer, within ctx's deadline
// (or handshakeTimeout).
func ask(ctx context.Context, nc net.Conn, req Request) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(handshakeTimeout)
	}
	_ = nc.SetDeadline(dl)
	if err := writeLine(nc, req.String()); err != nil {
		return err
	}
	line, err := ReadLine(nc)
	if err != nil {
		return fmt.Errorf("no answer to %s: %w", req.Verb, err)
	}
	if err := ParseReply(line); err != nil {
		return err
	}
	return nc.SetDeadline(time.Time{})
}

// handshakeTimeout bounds a request and its answer when the caller set no
// deadline, and a peer's request at the relay.
const handshakeTimeout = 10 * time.Second
