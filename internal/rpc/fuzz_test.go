package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"pando.dev/pando/internal/wire"
)

func frame(typ byte, op wire.Op, id uint32, msg any, data []byte) []byte {
	var meta []byte
	if msg != nil {
		var err error
		if meta, err = wire.Marshal(msg); err != nil {
			panic(err)
		}
	}
	b := wire.AppendHeader(nil, typ, 0, op, id, meta, data)
	return append(append(b, meta...), data...)
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// FuzzClientReply: a server answers the client's first call (ID 1) with
// arbitrary bytes. The call must end (never hang), and end as the frames
// say, read one by one by wire.ReadFrame: the first frame for ID 1 is the
// reply (decoded as the wire says, data intact), a connection-level error
// (ID 0) refuses the call with its message, and anything malformed or cut
// short before the reply fails the call.
func FuzzClientReply(f *testing.F) {
	attr := wire.AttrResp{Attr: wire.Attr{Ino: 7, Mode: 0o100644, Size: 5, Version: 3}}
	for _, seed := range [][]byte{
		frame(wire.TypeResponse, wire.OpGetAttr, 1, attr, nil),
		frame(wire.TypeResponse, wire.OpGetAttr, 1, attr, []byte("hello")),
		frame(wire.TypeError, wire.OpGetAttr, 1, wire.Error{Code: wire.CodeAccess, Message: "alice lacks r", Missing: "r"}, nil),
		frame(wire.TypeError, 0, 0, wire.Error{Code: wire.CodeTokenRevoked, Message: "revoked"}, nil),
		join(frame(wire.TypeNotify, wire.OpWatch, 9, wire.Revocation{Before: 1}, nil), frame(wire.TypeResponse, wire.OpGetAttr, 1, attr, nil)),
		join(frame(wire.TypeResponse, wire.OpGetAttr, 2, attr, []byte("x")), frame(wire.TypeResponse, wire.OpGetAttr, 1, wire.Empty{}, nil)),
		frame(wire.TypeResponse, wire.OpGetAttr, 1, attr, nil)[:30],
		{},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cl, srv := net.Pipe()
		defer srv.Close()
		go func() {
			defer srv.Close()
			var p [wire.PrefaceSize]byte
			if _, err := io.ReadFull(srv, p[:]); err != nil {
				return
			}
			srv.Write(wire.EncodePreface(wire.Preface{Version: wire.Version}))
			if _, err := wire.ReadFrame(srv); err != nil {
				return
			}
			srv.Write(b)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := NewConn(ctx, cl, wire.ChannelControl)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var resp wire.AttrResp
		data, err := c.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "f"}, nil, &resp, nil)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("the call hung")
		}

		// What the bytes say.
		r := bytes.NewReader(b)
		for {
			fr, rerr := wire.ReadFrame(r)
			if rerr != nil {
				if err == nil {
					t.Fatalf("call succeeded on bytes that break before its reply: %v", rerr)
				}
				return
			}
			if fr.ID == 0 && fr.Type == wire.TypeError {
				var we wire.Error
				if wire.Unmarshal(fr.Meta, &we) == nil {
					if got, ok := err.(*wire.Error); !ok || got.Code != we.Code || got.Message != we.Message {
						t.Fatalf("connection refused with %+v, call returned %v", we, err)
					}
				} else if err == nil {
					t.Fatal("call succeeded after an undecodable refusal")
				}
				return
			}
			if fr.ID != 1 {
				continue
			}
			if fr.Type == wire.TypeError {
				var we wire.Error
				if wire.Unmarshal(fr.Meta, &we) == nil {
					if got, ok := err.(*wire.Error); !ok || got.Code != we.Code || got.Message != we.Message || got.Missing != we.Missing {
						t.Fatalf("error reply %+v, call returned %v", we, err)
					}
				} else if err == nil {
					t.Fatal("call succeeded on an undecodable error reply")
				}
				return
			}
			var want wire.AttrResp
			if wire.Unmarshal(fr.Meta, &want) != nil {
				if err == nil {
					t.Fatal("call succeeded on an undecodable reply")
				}
				return
			}
			if err != nil || resp != want || !bytes.Equal(data, fr.Data) {
				t.Fatalf("reply %+v with %d bytes; call returned %+v, %d bytes, %v", want, len(fr.Data), resp, len(data), err)
			}
			return
		}
	})
}

// echo answers every request with its own data.
var echo = HandlerFunc(func(ctx context.Context, req *Request) (Reply, error) {
	return Reply{Msg: wire.Empty{}, Data: req.Data}, nil
})

// FuzzServerFrames: a client sends arbitrary bytes after the preface to a
// server. The server must answer every request frame before the first
// bad one exactly once, with its ID (here with its data echoed), answer a
// frame a client may not send with an error naming it, tell a sender of
// a malformed frame why before it closes, and close in any case when the
// client stops; it must never panic nor hang.
func FuzzServerFrames(f *testing.F) {
	for _, seed := range [][]byte{
		frame(wire.TypeRequest, wire.OpPing, 1, wire.Empty{}, nil),
		join(frame(wire.TypeRequest, wire.OpWrite, 1, wire.WriteReq{Tok: 1, Handle: 2}, []byte("data")),
			frame(wire.TypeRequest, wire.OpRead, 2, wire.ReadReq{Tok: 1, Handle: 2, Length: 4}, nil)),
		join(frame(wire.TypeRequest, wire.OpPing, 5, nil, nil), frame(wire.TypeCancel, wire.OpPing, 5, nil, nil)),
		frame(wire.TypeResponse, wire.OpPing, 3, wire.Empty{}, nil),
		join(frame(wire.TypeRequest, wire.OpPing, 1, nil, nil), []byte{9, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
		frame(wire.TypeRequest, wire.OpPing, 4, nil, []byte("cut short"))[:30],
	} {
		f.Add(seed)
	}
	s := &Server{Handler: echo, Log: slog.New(slog.DiscardHandler), conns: make(map[*ServerConn]struct{})}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The server's whole conversation, run to its end: it reads the
		// client's preface and b, then EOF; what it writes is kept.
		nc := &scripted{r: bytes.NewReader(join(wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: wire.ChannelControl}), b))}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.handle(nc)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the server did not finish with a client that stopped sending")
		}
		out := bytes.NewReader(nc.written())
		if _, err := wire.ReadPreface(out); err != nil {
			t.Fatal(err)
		}
		var got []string
		var notices []wire.Error
		for {
			fr, err := wire.ReadFrame(out)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("reading the server's replies: %v", err)
				}
				break
			}
			switch fr.Type {
			case wire.TypeResponse:
				got = append(got, fmt.Sprintf("%d:%x", fr.ID, fr.Data))
			case wire.TypeError:
				var we wire.Error
				if err := wire.Unmarshal(fr.Meta, &we); err != nil {
					t.Fatalf("undecodable error from the server: %v", err)
				}
				notices = append(notices, we)
			default:
				t.Fatalf("server sent a frame of type %d", fr.Type)
			}
		}

		// What the bytes say.
		var want []string
		r := bytes.NewReader(b)
		var wantNotice bool
		for {
			fr, err := wire.ReadFrame(r)
			if err != nil {
				wantNotice = errors.Is(err, wire.ErrMalformed)
				break
			}
			if fr.Type == wire.TypeCancel {
				continue
			}
			if fr.Type != wire.TypeRequest {
				wantNotice = true
				break
			}
			want = append(want, fmt.Sprintf("%d:%x", fr.ID, fr.Data))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("requests %v, replies %v", want, got)
		}
		if wantNotice != (len(notices) == 1) || len(notices) > 1 {
			t.Fatalf("want a notice: %v; got %+v", wantNotice, notices)
		}
		if wantNotice && notices[0].Code != wire.CodeMalformed {
			t.Fatalf("notice %+v", notices[0])
		}
	})
}

// scripted is a connection whose peer sends what r holds and then
// nothing (EOF), and which keeps what is written to it.
type scripted struct {
	r   io.Reader
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *scripted) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *scripted) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}
func (c *scripted) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}
func (c *scripted) Close() error                       { return nil }
func (c *scripted) LocalAddr() net.Addr                { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *scripted) RemoteAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }
func (c *scripted) SetDeadline(t time.Time) error      { return nil }
func (c *scripted) SetReadDeadline(t time.Time) error  { return nil }
func (c *scripted) SetWriteDeadline(t time.Time) error { return nil }

// recorder is a net.Conn that reads from r and writes to w; the rest of
// net.Conn is not used by macConn.
type recorder struct {
	net.Conn
	r io.Reader
	w *bytes.Buffer
}

func (c recorder) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c recorder) Write(p []byte) (int, error) { return c.w.Write(p) }

// sealed returns what a client of a safe channel with key sends for each
// of msgs (one Write each).
func sealed(key []byte, msgs ...[]byte) []byte {
	var out bytes.Buffer
	w, err := newMACConn(recorder{w: &out}, key, true)
	if err != nil {
		panic(err)
	}
	for _, m := range msgs {
		w.Write(m)
	}
	return out.Bytes()
}

// FuzzMACConn: the share's end of a safe data channel reads arbitrary
// bytes. Whatever it passes on must be records the client sealed with the
// channel's key, in the order sealed: sealing what was read again must
// give a prefix of the input. Anything else ends the stream with
// ErrTampered (or an EOF), never a panic.
func FuzzMACConn(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 32)
	f.Add(sealed(key, []byte("one record")))
	f.Add(sealed(key, []byte("first"), []byte("second"), bytes.Repeat([]byte("x"), 300)))
	f.Add(sealed(bytes.Repeat([]byte{8}, 32), []byte("another key")))
	f.Add(frame(wire.TypeRequest, wire.OpPing, 1, nil, nil))
	f.Add([]byte{0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := newMACConn(recorder{r: bytes.NewReader(b)}, key, false)
		if err != nil {
			t.Fatal(err)
		}
		var records [][]byte
		p := make([]byte, maxRecord)
		for {
			n, err := r.Read(p)
			if err != nil {
				if !errors.Is(err, ErrTampered) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("read: %v", err)
				}
				break
			}
			records = append(records, bytes.Clone(p[:n]))
		}
		if again := sealed(key, records...); !bytes.HasPrefix(b, again) {
			t.Fatalf("passed on %d records the key did not seal in that order", len(records))
		}
	})
}
