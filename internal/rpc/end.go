package rpc

import (
	"crypto/tls"
	"net"
	"time"

	"pando.dev/pando/internal/wire"
)

// endLinger is how long an ended connection is read (and what arrives
// dropped) after its last frame, so that the peer reads that frame
// before the connection closes under it.
const endLinger = 2 * time.Second

// End sends we as the connection's last frame, an error frame with id 0
// (which a client takes as the reason the connection ended, for the
// calls in flight and every later one), then closes the connection.
// Requests in flight are cancelled and nothing is sent after the frame.
func (c *ServerConn) End(we *wire.Error) {
	c.cancel()
	meta, err := wire.Marshal(we)
	if err != nil {
		c.Close()
		return
	}
	head := wire.AppendHeader(nil, wire.TypeError, 0, 0, 0, meta, nil)
	head = append(head, meta...)
	c.wmu.Lock()
	if c.ended {
		c.wmu.Unlock()
		return
	}
	c.ended = true
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err = c.nc.Write(head)
	c.wmu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	// The peer gets the frame and then the end of the stream; reading
	// on until it closes its end (or endLinger passes) keeps the kernel
	// from resetting the connection over requests that arrive meanwhile,
	// which could discard the frame before the peer reads it.
	if tc := rawTCP(c.nc); tc != nil {
		_ = tc.CloseWrite()
	}
	by := time.Now().Add(endLinger)
	c.endBy.Store(by.UnixNano())
	_ = c.nc.SetReadDeadline(by)
}

// setReadDeadline sets the read deadline, but not past the end of an
// ended connection's linger.
func (c *ServerConn) setReadDeadline(t time.Time) {
	if by := c.endBy.Load(); by != 0 {
		t = time.Unix(0, by)
	}
	_ = c.nc.SetReadDeadline(t)
}

// rawTCP is the TCP connection under nc, if it is one.
func rawTCP(nc net.Conn) *net.TCPConn {
	for {
		switch x := nc.(type) {
		case *tls.Conn:
			nc = x.NetConn()
		case *sniffed:
			nc = x.Conn
		case *macConn:
			nc = x.Conn
		case *net.TCPConn:
			return x
		default:
			return nil
		}
	}
}
