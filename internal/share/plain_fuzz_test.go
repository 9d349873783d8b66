package share

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// plainOpening is what a client sends to open a data channel without TLS:
// its preface, the ticket, and the proof that it holds the ticket's key.
func plainOpening(channel byte, ticket, key []byte) []byte {
	b := wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: channel})
	b = append(b, ticket...)
	return append(b, rpc.Proof(key, ticket)...)
}

// FuzzPlainOpen: a client with no certificate sends arbitrary bytes to
// open a data channel without TLS. The share admits the channel (answers
// with its preface) exactly when the bytes are a preface for the channel
// a ticket was issued for, that ticket, and the proof made with its key;
// and a ticket opens one channel only. (A TLS handshake is crypto/tls's
// to decode and is left out.)
func FuzzPlainOpen(f *testing.F) {
	s, _ := fuzzServer(f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go s.ServeConns(ln)
	key := bytes.Repeat([]byte{0x33}, 32)
	clear := bytes.Repeat([]byte{0x5a}, rpc.TicketSize)
	safe := bytes.Repeat([]byte{0xa5}, rpc.TicketSize)
	f.Add(plainOpening(wire.ChannelDataClear, clear, key))
	f.Add(plainOpening(wire.ChannelDataSafe, safe, key))
	f.Add(plainOpening(wire.ChannelDataSafe, clear, key))                          // another channel than issued for
	f.Add(plainOpening(wire.ChannelDataClear, clear, bytes.Repeat([]byte{1}, 32))) // proof with another key
	f.Add(plainOpening(wire.ChannelDataClear, bytes.Repeat([]byte{9}, rpc.TicketSize), key))
	f.Add(plainOpening(wire.ChannelControl, clear, key))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	const size = wire.PrefaceSize + rpc.TicketSize + rpc.ProofSize
	// admitted sends the opening and reports whether the share answered
	// with its preface.
	admitted := func(t *testing.T, b []byte) bool {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		nc.Write(b)
		nc.(*net.TCPConn).CloseWrite()
		var p [wire.PrefaceSize]byte
		if _, err := io.ReadFull(nc, p[:]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the share neither answered nor closed")
			}
			return false
		}
		_, err = wire.ReadPreface(bytes.NewReader(p[:]))
		return err == nil
	}
	peer := &session{peer: auth.Identity{Domain: "fuzz", Role: auth.RoleUser, Name: "admin"}}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 && b[0] == 0x16 {
			return
		}
		b = b[:min(len(b), size)] // what follows the opening is the channel's, fuzzed elsewhere
		exp := time.Now().Add(time.Minute)
		s.mu.Lock()
		s.tickets = map[string]*ticket{
			string(clear): {peer: peer, key: key, channel: wire.ChannelDataClear, expires: exp},
			string(safe):  {peer: peer, key: key, channel: wire.ChannelDataSafe, expires: exp},
		}
		s.mu.Unlock()
		valid := false
		if len(b) == size {
			_, perr := wire.ReadPreface(bytes.NewReader(b))
			tk := b[wire.PrefaceSize : wire.PrefaceSize+rpc.TicketSize]
			ch := b[6]
			valid = perr == nil && (ch == wire.ChannelDataClear && bytes.Equal(tk, clear) || ch == wire.ChannelDataSafe && bytes.Equal(tk, safe)) &&
				bytes.Equal(b[wire.PrefaceSize+rpc.TicketSize:], rpc.Proof(key, tk))
		}
		if got := admitted(t, b); got != valid {
			t.Fatalf("opening %x: admitted %v, want %v", b, got, valid)
		}
		if valid && admitted(t, b) {
			t.Fatal("a ticket opened a second channel")
		}
	})
}
