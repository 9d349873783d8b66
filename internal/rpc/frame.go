package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"pando.dev/pando/internal/wire"
)

// How long a server waits for a frame it has begun to receive. A
// connection may stay idle between frames as long as it likes (sessions
// live for days); but once a frame's first byte has arrived, the rest
// must keep coming: by DefaultFrameTimeout after its first byte plus the
// time what arrived since takes at DefaultFrameRate, more must have
// arrived, and the frame must end, or the connection is closed. A peer
// that sends half a frame and goes silent holds nothing for long; one
// that sends slower than DefaultFrameRate is cut within the timeout.
const (
	DefaultFrameTimeout = 30 * time.Second
	DefaultFrameRate    = 128 << 10 // bytes per second: 1 Mbit/s
)

// errFrameTimeout: a frame begun was not finished in time.
var errFrameTimeout = errors.New("frame not completed in time")

func (s *Server) frameBounds() (time.Duration, int64) {
	timeout, rate := s.FrameTimeout, s.FrameRate
	if timeout <= 0 {
		timeout = DefaultFrameTimeout
	}
	if rate <= 0 {
		rate = DefaultFrameRate
	}
	return timeout, rate
}

// readFrame reads the next frame, waiting without bound for its first
// byte and within the frame bound for the rest. Its data, if any, is in
// a recycled buffer that release gives back.
func (c *ServerConn) readFrame(br *bufio.Reader) (f *wire.Frame, release func(), err error) {
	if c.endBy.Load() != 0 {
		c.setReadDeadline(time.Time{}) // the end of the linger
	}
	if _, err := br.Peek(1); err != nil {
		return nil, nil, err
	}
	clk := &frameClock{c: c, start: time.Now()}
	clk.timeout, clk.rate = c.srv.frameBounds()
	clk.add(0)
	defer func() {
		c.setReadDeadline(time.Time{})
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("%w: %w", errFrameTimeout, err)
		}
	}()
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(br, hb[:]); err != nil {
		return nil, nil, truncated(err)
	}
	h, err := wire.DecodeHeader(hb[:])
	if err != nil {
		return nil, nil, err
	}
	clk.add(wire.HeaderSize)
	f = &wire.Frame{Header: h}
	if h.MetaLen > 0 {
		if f.Meta, err = readGrowing(br, int(h.MetaLen), clk); err != nil {
			return nil, nil, err
		}
	}
	var crc uint32
	if h.DataLen > 0 {
		if f.Data, release, crc, err = readData(br, int(h.DataLen), clk); err != nil {
			return nil, nil, err
		}
	}
	if err := h.CheckCRC(crc); err != nil {
		if release != nil {
			release()
		}
		return nil, nil, err
	}
	return f, release, nil
}

// readGrowing reads n bytes into a buffer that grows as they arrive.
func readGrowing(br *bufio.Reader, n int, clk *frameClock) ([]byte, error) {
	b := make([]byte, 0, min(n, 64<<10))
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(n, 2*cap(b)))
			copy(nb, b)
			b = nb
		}
		got, err := io.ReadFull(br, b[len(b):cap(b)])
		b = b[:len(b)+got]
		clk.add(got)
		if err != nil {
			return nil, truncated(err)
		}
	}
	return b, nil
}

// readData reads n bytes of data, summing them as they arrive, into a
// recycled buffer. Nothing is taken before the first 256 KiB (or all of
// the data) have arrived; then the data is read into a buffer of the
// smallest size class (1 MiB), and moved into the next (4, 16 MiB) only
// once that is full: a sender that stops in mid-frame pins at most 4
// times what it sent. Data of up to 1 MiB, the usual, is never moved.
func readData(br *bufio.Reader, n int, clk *frameClock) ([]byte, func(), uint32, error) {
	if _, err := br.Peek(min(n, br.Size())); err != nil {
		return nil, nil, 0, truncated(err)
	}
	var (
		buf     []byte
		release func()
		crc     uint32
		err     error
	)
	for _, size := range bufClasses {
		if len(buf) == n {
			break
		}
		next, rel := DataBuf(min(n, size))
		got := copy(next, buf)
		if release != nil {
			release()
		}
		buf, release = next, rel
		if crc, err = readSummed(br, buf[got:], crc, clk); err != nil {
			release()
			return nil, nil, 0, err
		}
	}
	return buf, release, crc, nil
}

// readSummed fills b from br, continuing crc over it piece by piece while
// each piece is in cache.
func readSummed(br *bufio.Reader, b []byte, crc uint32, clk *frameClock) (uint32, error) {
	for o := 0; o < len(b); {
		k := min(len(b)-o, wire.CRCChunk)
		if _, err := io.ReadFull(br, b[o:o+k]); err != nil {
			return 0, truncated(err)
		}
		clk.add(k)
		crc = wire.UpdateCRC(crc, b[o:o+k])
		o += k
	}
	return crc, nil
}

// frameClock keeps the read deadline of a frame being received: its
// first byte's time, plus the timeout, plus what has arrived since at the
// minimum rate.
type frameClock struct {
	c       *ServerConn
	start   time.Time
	timeout time.Duration
	rate    int64
	got     int64
}

// add counts n more bytes arrived and moves the deadline on.
func (k *frameClock) add(n int) {
	if k == nil {
		return
	}
	k.got += int64(n)
	k.c.setReadDeadline(k.start.Add(k.timeout + time.Duration(k.got*int64(time.Second)/k.rate)))
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
