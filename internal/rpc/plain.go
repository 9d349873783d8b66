package rpc

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"pando.dev/pando/internal/wire"
)

// Data channels without TLS, as GridFTP offers: "safe" (every byte
// authenticated and integrity-checked, not encrypted) and "clear"
// (authenticated set-up only; frames keep their CRC32C against accidents).
// The client obtains a one-time ticket on its TLS control channel; both
// ends derive a key from that TLS session (RFC 8446 exported keying
// material), so only the peer of the control channel can open the data
// channel, and only it and the share know the MAC keys.

// TicketSize and ProofSize are the lengths of the opening message of a
// plain data channel: the ticket, then HMAC-SHA256(key, ticket || "open").
const (
	TicketSize = 16
	ProofSize  = 32
)

// ChannelKey derives the key of a plain data channel from the TLS session
// of the control channel that issued ticket.
func ChannelKey(st tlsExporter, ticket []byte) ([]byte, error) {
	return st.ExportKeyingMaterial("pando data channel", ticket, 32)
}

type tlsExporter interface {
	ExportKeyingMaterial(label string, context []byte, length int) ([]byte, error)
}

// Proof is what the client sends to show it holds key.
func Proof(key, ticket []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(ticket)
	m.Write([]byte("open"))
	return m.Sum(nil)
}

// IsPlain reports whether channel is a data channel without TLS.
func IsPlain(channel byte) bool {
	return channel == wire.ChannelDataSafe || channel == wire.ChannelDataClear
}

// DialPlain opens a data channel without TLS to addr with a ticket and its
// key; on a safe channel every record is authenticated from then on.
func DialPlain(ctx context.Context, addr string, channel byte, ticket, key []byte) (*Conn, error) {
	if !IsPlain(channel) {
		return nil, fmt.Errorf("channel %d is not a plain data channel", channel)
	}
	ctx, cancel := dialContext(ctx)
	defer cancel()
	raw, err := dialTCP(ctx, addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	open := append(wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: channel}), ticket...)
	open = append(open, Proof(key, ticket)...)
	if _, err := raw.Write(open); err != nil {
		raw.Close()
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if _, err := wire.ReadPreface(raw); err != nil {
		raw.Close()
		return nil, &HandshakeError{Addr: addr, Err: fmt.Errorf("the share refused the data channel: %w", err)}
	}
	_ = raw.SetDeadline(time.Time{})
	var nc net.Conn = raw
	if channel == wire.ChannelDataSafe {
		if nc, err = newMACConn(raw, key, true); err != nil {
			raw.Close()
			return nil, err
		}
	}
	c := &Conn{nc: nc, addr: addr, pending: make(map[uint32]*call), done: make(chan struct{})}
	c.lastRecv.Store(time.Now().UnixNano())
	go c.readLoop()
	return c, nil
}

// Protect turns on record authentication for a safe channel (server side,
// after the ticket was accepted).
func (c *ServerConn) Protect(key []byte) error {
	mc, err := newMACConn(c.nc, key, false)
	if err != nil {
		return err
	}
	c.nc = mc
	return nil
}

// sniffed is a raw connection whose first byte was read to tell TLS from
// a plain data channel.
type sniffed struct {
	net.Conn
	r *bufio.Reader
}

func (s *sniffed) Read(p []byte) (int, error) { return s.r.Read(p) }

// macConn frames a byte stream into records, each authenticated with
// AES-GMAC under a per-direction key and a per-direction sequence number,
// so that nothing can be changed, dropped, replayed or reordered unseen.
// Record: length (4 bytes) | payload | tag (16 bytes).
type macConn struct {
	net.Conn
	wmu   sync.Mutex
	wseal cipher.AEAD
	wseq  uint64
	wbuf  []byte

	ropen cipher.AEAD
	rseq  uint64
	rbuf  []byte // payload not yet read
	hdr   [4]byte
	rec   []byte
	br    *bufio.Reader
}

const maxRecord = 64 << 10

// ErrTampered: a record of a safe channel failed authentication.
var ErrTampered = errors.New("a data record failed authentication (damaged or tampered with on the way)")

func gmac(key []byte, label string) (cipher.AEAD, error) {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	b, err := aes.NewCipher(m.Sum(nil)[:16])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func newMACConn(nc net.Conn, key []byte, client bool) (*macConn, error) {
	up, err := gmac(key, "client to share")
	if err != nil {
		return nil, err
	}
	down, err := gmac(key, "share to client")
	if err != nil {
		return nil, err
	}
	c := &macConn{Conn: nc, br: bufio.NewReaderSize(nc, 256<<10)}
	if client {
		c.wseal, c.ropen = up, down
	} else {
		c.wseal, c.ropen = down, up
	}
	return c, nil
}

func nonce(seq uint64) []byte {
	var n [12]byte
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

func (c *macConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for len(p) > 0 {
		k := min(len(p), maxRecord)
		need := 4 + k + 16
		if cap(c.wbuf) < need {
			c.wbuf = make([]byte, 0, 4+maxRecord+16)
		}
		b := c.wbuf[:4]
		binary.BigEndian.PutUint32(b, uint32(k))
		b = append(b, p[:k]...)
		// The tag covers the length and the payload, under this record's
		// sequence number.
		b = c.wseal.Seal(b, nonce(c.wseq), nil, b[:4+k])
		c.wseq++
		if _, err := c.Conn.Write(b); err != nil {
			return total, err
		}
		total += k
		p = p[k:]
	}
	return total, nil
}

func (c *macConn) Read(p []byte) (int, error) {
	for len(c.rbuf) == 0 {
		if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
			return 0, err
		}
		n := int(binary.BigEndian.Uint32(c.hdr[:]))
		if n > maxRecord {
			return 0, ErrTampered
		}
		if cap(c.rec) < 4+n+16 {
			c.rec = make([]byte, 4+maxRecord+16)
		}
		rec := c.rec[:4+n+16]
		copy(rec, c.hdr[:])
		if _, err := io.ReadFull(c.br, rec[4:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if _, err := c.ropen.Open(nil, nonce(c.rseq), rec[4+n:], rec[:4+n]); err != nil {
			return 0, ErrTampered
		}
		c.rseq++
		c.rbuf = rec[4 : 4+n]
	}
	k := copy(p, c.rbuf)
	c.rbuf = c.rbuf[k:]
	return k, nil
}
