package rpc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/wire"
)

// FileData is reply data that the connection sends straight from a file
// with sendfile(2): the kernel hands the file's cached pages to the socket
// and the bytes are never copied through this process. Only clear data
// channels can (CanSendFile): the others encrypt or authenticate every
// byte on its way out.
type FileData struct {
	F   *os.File
	Off int64
	Len int
	// Sum is the CRC32C of the Len bytes at Off, which the frame carries:
	// the handler computed it from the file just before. Should the bytes
	// change in between, the receiver finds they no longer match it.
	Sum uint32
}

// ErrFileShrank: a file sent with sendfile ended before the bytes its
// frame announced. The frame cannot be finished, so the connection ends.
var ErrFileShrank = errors.New("the file shrank while it was being sent")

// CanSendFile reports whether replies on this connection may carry
// FileData: a clear data channel over TCP, whose bytes go out as they are.
func (c *ServerConn) CanSendFile() bool { return c.tcp != nil }

// clearTCP returns the TCP connection under a clear data channel, or nil.
func clearTCP(nc net.Conn, channel byte) *net.TCPConn {
	if channel != wire.ChannelDataClear {
		return nil
	}
	if s, ok := nc.(*sniffed); ok {
		nc = s.Conn
	}
	tc, _ := nc.(*net.TCPConn)
	return tc
}

// writeFile sends a response frame whose data comes from fd.
func (c *ServerConn) writeFile(typ byte, op wire.Op, id uint32, meta []byte, fd *FileData) error {
	if fd.Len < 0 || fd.Len > wire.MaxData {
		return fmt.Errorf("file data of %d bytes", fd.Len)
	}
	h := wire.Header{Type: typ, Op: op, ID: id, MetaLen: uint32(len(meta)), DataLen: uint32(fd.Len)}
	if fd.Len > 0 {
		h.Flags, h.DataCRC = wire.FlagCRC, fd.Sum
	}
	buf := make([]byte, wire.HeaderSize, wire.HeaderSize+len(meta))
	h.Encode(buf)
	buf = append(buf, meta...)
	// A short file leaves the frame unfinished: send ends the connection.
	return c.send(buf, func() error { return sendFile(c.tcp, fd.F, fd.Off, fd.Len) })
}

// sendFile writes n bytes of f at off to tc with sendfile(2), which
// leaves f's offset alone (other requests read the same file). It holds
// f open meanwhile and waits, as any write does, while the socket is
// full, up to the write deadline.
func sendFile(tc *net.TCPConn, f *os.File, off int64, n int) error {
	src, err := f.SyscallConn()
	if err != nil {
		return err
	}
	dst, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	cerr := src.Control(func(in uintptr) {
		werr := dst.Write(func(out uintptr) bool {
			for n > 0 {
				k, err := unix.Sendfile(int(out), int(in), &off, min(n, 1<<30))
				switch {
				case errors.Is(err, syscall.EAGAIN):
					return false // wait until the socket drains
				case errors.Is(err, syscall.EINTR):
					continue
				case err != nil:
					serr = os.NewSyscallError("sendfile", err)
					return true
				case k == 0:
					serr = ErrFileShrank
					return true
				}
				n -= k
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if cerr != nil {
		return cerr
	}
	return serr
}
