package nfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Bounds of what a client may send. go-nfs trusts the lengths inside a
// call (a handle's length is allocated as given, up to 4 GiB, before it
// is read), so each call is read whole here and its variable-length
// fields checked before go-nfs sees a byte of it; a call that breaks them
// closes the connection, with a log line.
const (
	maxRecord  = 16<<20 + 64<<10 // a WRITE of 16 MiB (go-nfs reads as much at once) and its header
	maxAuth    = 400             // RFC 5531: opaque_auth body<400>
	maxName    = 255
	maxPath    = 4096
	maxConns   = 128 // at most 2 GiB of calls read at once
	idleCutoff = 10 * time.Minute
)

const (
	progNFS   = 100003
	progMount = 100005
)

// guardListener admits connections from the allowed networks only.
type guardListener struct {
	net.Listener
	s *Server
}

func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.s.allowed(c.RemoteAddr()) {
			l.s.c.ConnsRefused.Add(1)
			l.s.log.Warn("nfs: a connection from a network not allowed refused (see --allow)", "client", c.RemoteAddr().String())
			c.Close()
			continue
		}
		l.s.mu.Lock()
		n := len(l.s.conns)
		if n < maxConns {
			l.s.conns[c] = struct{}{}
		}
		l.s.mu.Unlock()
		if n >= maxConns {
			l.s.c.ConnsRefused.Add(1)
			l.s.log.Warn("nfs: a connection refused: too many open", "client", c.RemoteAddr().String(), "open", n)
			c.Close()
			continue
		}
		return &guardConn{Conn: c, s: l.s}, nil
	}
}

// guardConn hands go-nfs one checked call at a time, and never the bytes
// of the next call with the end of one (go-nfs reads some fields with a
// single Read, which must not stop at a buffer's edge).
type guardConn struct {
	net.Conn
	s   *Server
	buf []byte // the rest of the current call, marker included
	err error
}

func (c *guardConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c.Conn)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

func (c *guardConn) Read(p []byte) (int, error) {
	if len(c.buf) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if err := c.next(); err != nil {
			c.err = err
			c.Close() // go-nfs leaves a connection it cannot read open
			if !errors.Is(err, io.EOF) {
				c.s.c.BadRecords.Add(1)
				c.s.log.Warn("nfs: a malformed call; the connection is closed", "client", c.RemoteAddr().String(), "err", err)
			}
			return 0, err
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// next reads and checks the next call.
func (c *guardConn) next() error {
	c.Conn.SetReadDeadline(time.Now().Add(idleCutoff))
	var m [4]byte
	if _, err := io.ReadFull(c.Conn, m[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("the connection ended inside a record marker")
		}
		return io.EOF
	}
	mark := binary.BigEndian.Uint32(m[:])
	n := mark &^ (1 << 31)
	switch {
	case mark&(1<<31) == 0:
		return errors.New("a call in several fragments (not served)")
	case n < 40:
		return fmt.Errorf("a record of %d bytes, too short for a call", n)
	case n > maxRecord:
		return fmt.Errorf("a record of %d bytes, past the bound of %d", n, maxRecord)
	}
	b := make([]byte, 4+n)
	copy(b, m[:])
	// A call, once begun, must arrive within a minute.
	c.Conn.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c.Conn, b[4:]); err != nil {
		return fmt.Errorf("the call was cut short: %w", err)
	}
	if err := checkCall(b[4:]); err != nil {
		return err
	}
	notServed(b[4:])
	c.s.c.Requests.Add(1)
	c.buf = b
	return nil
}

// xdrReader reads XDR fields of a call, checking each length.
type xdrReader struct {
	b   []byte
	err error
}

func (r *xdrReader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 4 {
		r.err = errors.New("the call ends inside a field")
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *xdrReader) skip(n int) {
	if r.err != nil {
		return
	}
	if len(r.b) < n {
		r.err = errors.New("the call ends inside a field")
		return
	}
	r.b = r.b[n:]
}

// opaque skips a variable-length field of at most max bytes.
func (r *xdrReader) opaque(what string, max int) {
	n := r.u32()
	if r.err != nil {
		return
	}
	if n > uint32(max) {
		r.err = fmt.Errorf("%s of %d bytes, past the bound of %d", what, n, max)
		return
	}
	r.skip(int(n+3) &^ 3)
}

// sattr skips a sattr3.
func (r *xdrReader) sattr() {
	for _, size := range []int{4, 4, 4, 8} { // mode, uid, gid, size
		if r.u32() != 0 {
			r.skip(size)
		}
	}
	for range 2 { // atime, mtime
		if r.u32() == 2 { // SET_TO_CLIENT_TIME
			r.skip(8)
		}
	}
}

// checkCall checks a call's header and the lengths of its arguments.
func checkCall(b []byte) error {
	r := &xdrReader{b: b}
	r.u32() // xid
	if r.u32() != 0 {
		return errors.New("a record that is not a call")
	}
	if v := r.u32(); r.err == nil && v != 2 {
		return fmt.Errorf("RPC version %d", v)
	}
	prog, vers, proc := r.u32(), r.u32(), r.u32()
	// go-nfs serves any version of a program as version 3: a call of
	// another (NFSv4's COMPOUND, MOUNT v1's handles) would be misread.
	if r.err == nil && (prog == progNFS || prog == progMount) && vers != 3 {
		return fmt.Errorf("version %d of program %d (only NFSv3 and MOUNT v3 are served)", vers, prog)
	}
	r.u32()
	r.opaque("a credential", maxAuth)
	r.u32()
	r.opaque("a verifier", maxAuth)
	fh := func() { r.opaque("a file handle", fhMax) }
	name := func() { r.opaque("a name", maxName) }
	switch {
	case prog == progMount && (proc == 1 || proc == 3): // MNT, UMNT
		r.opaque("a mount path", maxPath)
	case prog == progNFS && proc > 0 && proc <= 21:
		fh()
		switch proc {
		case 3, 8, 9, 11, 12, 13: // LOOKUP, CREATE, MKDIR, MKNOD, REMOVE, RMDIR
			name()
		case 10: // SYMLINK
			name()
			r.sattr()
			r.opaque("a link's target", maxPath)
		case 14: // RENAME
			name()
			fh()
			name()
		case 15: // LINK
			fh()
			name()
		case 7: // WRITE
			r.skip(16) // offset, count, stable
			r.opaque("a write's data", maxRecord)
		}
	}
	return r.err
}
