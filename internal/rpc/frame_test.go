package rpc

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/wire"
)

// testTLS returns a server and a client configuration around one
// self-signed certificate for 127.0.0.1.
func testTLS(t *testing.T) (srv, cli *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}

// serveTLS starts a Server answering every request with an empty reply.
func serveTLS(t *testing.T, s *Server) (addr string, cli *tls.Config) {
	t.Helper()
	srvConf, cliConf := testTLS(t)
	s.TLS = srvConf
	if s.Handler == nil {
		s.Handler = HandlerFunc(func(ctx context.Context, req *Request) (Reply, error) { return Reply{}, nil })
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvConf)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), cliConf
}

// TestHalfFrameClosed: a client that sends half a frame and goes silent
// is told so and cut off once the frame bound has passed, while another
// connection is served meanwhile and an idle connection, silent between
// frames for longer than the bound, is kept.
func TestHalfFrameClosed(t *testing.T) {
	const bound = 500 * time.Millisecond
	addr, cli := serveTLS(t, &Server{FrameTimeout: bound, FrameRate: 1 << 30})
	ctx := context.Background()
	idle, err := Dial(ctx, addr, cli, wire.ChannelControl)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	// The hostile client: a header announcing 100 bytes of meta and
	// 16 MiB of data, then 10 bytes of the meta, then nothing.
	raw, err := tls.Dial("tcp", addr, cli)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write(wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: wire.ChannelControl}))
	if _, err := wire.ReadPreface(raw); err != nil {
		t.Fatal(err)
	}
	var hdr [wire.HeaderSize]byte
	(&wire.Header{Type: wire.TypeRequest, Op: wire.OpPing, ID: 1, MetaLen: 100, DataLen: wire.MaxData}).Encode(hdr[:])
	sent := time.Now()
	raw.Write(append(hdr[:], make([]byte, 10)...))

	// Another client is served while the half frame is held.
	other, err := Dial(ctx, addr, cli, wire.ChannelControl)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		t.Fatalf("another connection, while a half frame is held: %v", err)
	}

	// The hostile client is told why, then the connection ends.
	raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	f, err := wire.ReadFrame(raw)
	if err != nil {
		t.Fatalf("no word before the connection was cut: %v", err)
	}
	held := time.Since(sent)
	var we wire.Error
	if f.Type != wire.TypeError || f.ID != 0 || wire.Unmarshal(f.Meta, &we) != nil || !strings.Contains(we.Message, "part of a frame") {
		t.Fatalf("got frame type %d id %d %q, want the connection's error", f.Type, f.ID, f.Meta)
	}
	if held < bound {
		t.Errorf("cut after %s, before the bound of %s", held, bound)
	}
	if n, err := raw.Read(make([]byte, 1)); err == nil {
		t.Errorf("the connection stays open after the error (read %d bytes)", n)
	}

	// Idle between frames for longer than the bound: still served.
	time.Sleep(2 * bound)
	if _, err := idle.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		t.Fatalf("a connection idle between frames was cut: %v", err)
	}
}

// TestHalfFramePinsLittle: a header that announces 16 MiB of data, with
// part of it sent, takes no buffer of that size: nothing of the data's
// size for a few bytes, and at most 4 times what arrived past 1 MiB.
func TestHalfFramePinsLittle(t *testing.T) {
	for _, tc := range []struct{ sent, most int }{{1000, 1 << 20}, {1<<20 + 1000, 8 << 20}} {
		a, b := net.Pipe()
		c := &ServerConn{srv: &Server{FrameTimeout: time.Minute}, nc: b}
		go func() {
			var hdr [wire.HeaderSize]byte
			(&wire.Header{Type: wire.TypeRequest, Op: wire.OpWrite, ID: 1, DataLen: wire.MaxData}).Encode(hdr[:])
			a.Write(hdr[:])
			a.Write(make([]byte, tc.sent))
			a.Close()
		}()
		br := bufio.NewReaderSize(b, 256<<10)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := c.readFrame(br)
		runtime.ReadMemStats(&after)
		b.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a truncated frame: %v", err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(tc.most) {
			t.Errorf("reading %d bytes of a frame that announced %d allocated %d bytes, more than %d", tc.sent, wire.MaxData, got, tc.most)
		}
	}
}

// TestFrameReadIntact: frames whose data is read in stages arrive whole
// and summed, at the sizes around each stage.
func TestFrameReadIntact(t *testing.T) {
	for _, n := range []int{0, 1, 256 << 10, 1<<20 - 1, 1 << 20, 1<<20 + 1, 4 << 20, 4<<20 + 1, 5 << 20, wire.MaxData} {
		a, b := net.Pipe()
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 31 >> 3)
		}
		meta := []byte(strings.Repeat("m", 70000))
		go func() {
			buf := wire.AppendHeader(nil, wire.TypeRequest, 0, wire.OpWrite, 7, meta, data)
			buf = append(append(buf, meta...), data...)
			a.Write(buf)
		}()
		c := &ServerConn{srv: &Server{}, nc: b}
		f, release, err := c.readFrame(bufio.NewReaderSize(b, 256<<10))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if string(f.Meta) != string(meta) || string(f.Data) != string(data) || f.ID != 7 {
			t.Errorf("%d bytes: the frame arrived changed", n)
		}
		if release != nil {
			release()
		}
		a.Close()
		b.Close()
	}
}

// TestSlowFrameServed: a frame that arrives slowly but steadily, at more
// than the minimum rate, is served although it takes longer than the
// timeout: the bound is on progress, not on the frame's whole time.
func TestSlowFrameServed(t *testing.T) {
	// A timeout of 3 s, not less: on a loaded machine the server's reader
	// may wait its turn for most of a second.
	const timeout = 3 * time.Second
	addr, cli := serveTLS(t, &Server{FrameTimeout: timeout, FrameRate: 16 << 10})
	raw, err := tls.Dial("tcp", addr, cli)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write(wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: wire.ChannelControl}))
	if _, err := wire.ReadPreface(raw); err != nil {
		t.Fatal(err)
	}
	// 20 pieces of 32 KiB, one every 200 ms: 160 KiB/s, ten times the
	// minimum rate, and 4 s in all.
	data := make([]byte, 20*32<<10)
	meta, _ := wire.Marshal(wire.Empty{})
	frame := wire.AppendHeader(nil, wire.TypeRequest, 0, wire.OpPing, 9, meta, data)
	frame = append(append(frame, meta...), data...)
	began := time.Now()
	raw.Write(frame[:wire.HeaderSize+len(meta)])
	for o := wire.HeaderSize + len(meta); o < len(frame); o += 32 << 10 {
		time.Sleep(200 * time.Millisecond)
		if _, err := raw.Write(frame[o:min(o+32<<10, len(frame))]); err != nil {
			t.Fatalf("the server cut a frame arriving at ten times the minimum rate after %s: %v", time.Since(began), err)
		}
	}
	raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	f, err := wire.ReadFrame(raw)
	if err != nil {
		t.Fatalf("no reply to a slow frame: %v", err)
	}
	if f.Type != wire.TypeResponse || f.ID != 9 {
		var we wire.Error
		wire.Unmarshal(f.Meta, &we)
		t.Fatalf("got frame type %d id %d (%s), want the response", f.Type, f.ID, we.Message)
	}
	if took := time.Since(began); took < timeout {
		t.Errorf("the frame took %s, less than the timeout: the test proves nothing", took)
	}
}
