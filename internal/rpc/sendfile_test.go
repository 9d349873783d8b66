package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"pando.dev/pando/internal/wire"
)

// sinkResp gathers a reply's data as a DataSink sees it.
type sinkResp struct {
	wire.ReadResp
	got  []byte
	fail error
}

func (r *sinkResp) WriteDataAt(p []byte, at int) error {
	if r.fail != nil {
		return r.fail
	}
	if at != len(r.got) {
		return errors.New("pieces out of order")
	}
	r.got = append(r.got, p...)
	return nil
}

// clearPair connects a client Conn to a ServerConn over TCP on loopback, as
// a clear data channel is; serve answers each request.
func clearPair(t *testing.T, serve func(sc *ServerConn, f *wire.Frame)) *Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := &ServerConn{nc: sc, Channel: wire.ChannelDataClear, tcp: clearTCP(sc, wire.ChannelDataClear)}
	if !s.CanSendFile() {
		t.Fatal("a clear channel over TCP cannot send files")
	}
	go func() {
		for {
			f, err := wire.ReadFrame(sc)
			if err != nil {
				sc.Close()
				return
			}
			serve(s, f)
		}
	}()
	c := &Conn{nc: cc, addr: "test", pending: make(map[uint32]*call), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { c.Close(); sc.Close() })
	return c
}

// TestSendFile: reply data sent straight from a file arrives intact, piece
// by piece, in a DataSink; a wrong sum, a failing sink and a file that
// shrank are each told apart.
func TestSendFile(t *testing.T) {
	content := make([]byte, 3<<20+17)
	for i := range content {
		content[i] = byte(i*7 + i>>12)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sent := make(chan error, 1)
	c := clearPair(t, func(sc *ServerConn, fr *wire.Frame) {
		var r wire.ReadReq
		wire.Unmarshal(fr.Meta, &r)
		end := min(r.Offset+int64(r.Length), int64(len(content)))
		sum := wire.CRC(content[r.Offset:end])
		if r.Handle == 1 { // a stale sum: the file changed after it was summed
			sum++
		}
		n := int(end - r.Offset)
		if r.Handle == 2 { // announces more than the file holds
			n = int(r.Length)
		}
		meta, _ := wire.Marshal(wire.ReadResp{})
		sent <- sc.writeFile(wire.TypeResponse, fr.Op, fr.ID, meta, &FileData{F: f, Off: r.Offset, Len: n, Sum: sum})
	})
	ctx := context.Background()
	var resp sinkResp
	data, err := c.Call(ctx, wire.OpRead, wire.ReadReq{Offset: 12345, Length: 2 << 20}, nil, &resp, nil)
	if err != nil || <-sent != nil || data != nil || !bytes.Equal(resp.got, content[12345:12345+2<<20]) {
		t.Fatalf("sendfile to a sink: %d bytes, %v", len(resp.got), err)
	}
	// A sink that fails: the call fails with its error, the connection
	// goes on.
	full := errors.New("disk full")
	resp = sinkResp{fail: full}
	if _, err := c.Call(ctx, wire.OpRead, wire.ReadReq{Offset: 0, Length: 1 << 20}, nil, &resp, nil); !errors.Is(err, full) || <-sent != nil {
		t.Fatalf("failing sink: %v", err)
	}
	resp = sinkResp{}
	if _, err := c.Call(ctx, wire.OpRead, wire.ReadReq{Offset: 3 << 20, Length: 1 << 20}, nil, &resp, nil); err != nil || <-sent != nil || !bytes.Equal(resp.got, content[3<<20:]) {
		t.Fatalf("after a failing sink: %d bytes, %v", len(resp.got), err)
	}
	// Into a buffer, as a reply without a sink: the same bytes.
	buf := make([]byte, 1<<20)
	data, err = c.Call(ctx, wire.OpRead, wire.ReadReq{Offset: 99, Length: 1 << 20}, nil, nil, buf)
	if err != nil || <-sent != nil || !bytes.Equal(data, content[99:99+1<<20]) {
		t.Fatalf("sendfile to a buffer: %d bytes, %v", len(data), err)
	}
	// Bytes that no longer match the sum the frame carries.
	resp = sinkResp{}
	if _, err := c.Call(ctx, wire.OpRead, wire.ReadReq{Handle: 1, Offset: 0, Length: 1 << 20}, nil, &resp, nil); !errors.Is(err, wire.ErrChecksum) {
		t.Fatalf("stale sum: %v, want a checksum error", err)
	}
	<-sent

	// A file that ends before the bytes its frame announced: the share
	// cannot finish the frame and ends the connection.
	c = clearPair(t, func(sc *ServerConn, fr *wire.Frame) {
		meta, _ := wire.Marshal(wire.ReadResp{})
		sent <- sc.writeFile(wire.TypeResponse, fr.Op, fr.ID, meta, &FileData{F: f, Off: 3 << 20, Len: 1 << 20, Sum: 0})
	})
	resp = sinkResp{}
	if _, err := c.Call(ctx, wire.OpRead, wire.ReadReq{Handle: 2}, nil, &resp, nil); !errors.Is(err, ErrBroken) {
		t.Errorf("shrunk file: %v, want a broken connection", err)
	}
	if err := <-sent; !errors.Is(err, ErrFileShrank) {
		t.Errorf("shrunk file, at the share: %v", err)
	}
}

// oddReader hands out its bytes in pieces of awkward sizes, as a socket
// does.
type oddReader struct {
	b []byte
	i int
}

func (r *oddReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	sizes := []int{1000, 4097, 333, 70000, 12, 8191}
	n := copy(p[:min(len(p), sizes[r.i%len(sizes)])], r.b)
	r.b, r.i = r.b[n:], r.i+1
	return n, nil
}

// pieceSink records where each piece ends.
type pieceSink struct {
	got  []byte
	ends []int
}

func (s *pieceSink) WriteDataAt(p []byte, at int) error {
	if at != len(s.got) {
		return errors.New("pieces out of order")
	}
	s.got = append(s.got, p...)
	s.ends = append(s.ends, len(s.got))
	return nil
}

// TestSinkPiecesEndOnPages: however the connection hands the data over, a
// sink gets it in pieces that end on 4 KiB boundaries (but for the last),
// so that a file system never fills part of a page with zeros first.
func TestSinkPiecesEndOnPages(t *testing.T) {
	data := make([]byte, 1<<20+123)
	for i := range data {
		data[i] = byte(i * 13)
	}
	// The frame's header and metadata come first, through the same buffer.
	const head = 37
	br := bufio.NewReaderSize(&oddReader{b: append(make([]byte, head), data...)}, 64<<10)
	if _, err := br.Discard(head); err != nil {
		t.Fatal(err)
	}
	var s pieceSink
	crc, sinkErr, err := readToSink(br, len(data), &s)
	if err != nil || sinkErr != nil {
		t.Fatal(err, sinkErr)
	}
	if !bytes.Equal(s.got, data) || crc != wire.CRC(data) {
		t.Fatal("the sink did not get the data, or its sum is wrong")
	}
	for _, end := range s.ends[:len(s.ends)-1] {
		if end%sinkPage != 0 {
			t.Fatalf("a piece ends at %d, not on a page boundary (pieces end at %v)", end, s.ends)
		}
	}
	if len(s.ends) < 16 {
		t.Fatalf("only %d pieces: the test did not exercise the alignment", len(s.ends))
	}
}
