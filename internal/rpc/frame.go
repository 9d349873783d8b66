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
// live for days); but a frame whose first byte has arrived must be whole
// within DefaultFrameTimeout plus the time its length takes at
// DefaultFrameRate, or the connection is closed: a peer that sends half
// a frame and goes silent holds nothing for long.
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
	timeout, rate := c.srv.frameBounds()
	start := time.Now()
	c.setReadDeadline(start.Add(timeout))
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
	if n := int64(h.MetaLen) + int64(h.DataLen); n > 0 {
		c.setReadDeadline(start.Add(timeout + time.Duration(n*int64(time.Second)/rate)))
	}
	f = &wire.Frame{Header: h}
	if h.MetaLen > 0 {
		if f.Meta, err = readGrowing(br, int(h.MetaLen)); err != nil {
			return nil, nil, err
		}
	}
	var crc uint32
	if h.DataLen > 0 {
		if f.Data, release, crc, err = readData(br, int(h.DataLen)); err != nil {
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
func readGrowing(br *bufio.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, 64<<10))
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(n, 2*cap(b)))
			copy(nb, b)
			b = nb
		}
		got, err := io.ReadFull(br, b[len(b):cap(b)])
		b = b[:len(b)+got]
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
func readData(br *bufio.Reader, n int) ([]byte, func(), uint32, error) {
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
		if crc, err = readSummed(br, buf[got:], crc); err != nil {
			release()
			return nil, nil, 0, err
		}
	}
	return buf, release, crc, nil
}

// readSummed fills b from br, continuing crc over it piece by piece while
// each piece is in cache.
func readSummed(br *bufio.Reader, b []byte, crc uint32) (uint32, error) {
	for o := 0; o < len(b); {
		k := min(len(b)-o, wire.CRCChunk)
		if _, err := io.ReadFull(br, b[o:o+k]); err != nil {
			return 0, truncated(err)
		}
		crc = wire.UpdateCRC(crc, b[o:o+k])
		o += k
	}
	return crc, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
