package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Version is the protocol version sent in the preface. Peers with different
// versions refuse each other with a clear message (see ReadPreface).
const Version uint16 = 1

// Magic opens every preface so that a peer speaking something else (an HTTP
// client, a TLS-less probe) is told apart from a version mismatch.
var Magic = [4]byte{'P', 'N', 'D', 'O'}

// Channel kinds announced in the preface.
const (
	ChannelControl byte = 1 // metadata, control and the back channel
	ChannelData    byte = 2 // bulk reads and writes
	// Data channels without TLS, opened with a ticket from the control
	// channel: every record authenticated (safe), or only the set-up (clear).
	ChannelDataSafe  byte = 3
	ChannelDataClear byte = 4
)

// Limits on what one frame may carry; a header that claims more is malformed.
const (
	HeaderSize = 24
	MaxMeta    = 1 << 20  // one CBOR message
	MaxData    = 16 << 20 // one payload (a block of file data)
)

// Frame types.
const (
	TypeRequest  byte = 1 // client -> server, expects one Response or Error with the same ID
	TypeResponse byte = 2 // server -> client
	TypeError    byte = 3 // server -> client: meta is an Error
	TypeNotify   byte = 4 // server -> client, unsolicited or on a watch (ID of the watch request)
	TypeCancel   byte = 5 // client -> server: abandon request ID (best effort)
)

// Flags.
const (
	FlagCRC byte = 1 << 0 // DataCRC holds the CRC32C of the data part
	FlagEnd byte = 1 << 1 // last Notify of a watch
)

// ErrMalformed is returned (wrapped) for any frame that violates the format:
// unknown type, oversized lengths, a CRC mismatch or undecodable meta.
var ErrMalformed = errors.New("malformed frame")

// ErrChecksum is returned (wrapped together with ErrMalformed) when the data
// part does not match its CRC32C.
var ErrChecksum = errors.New("data checksum mismatch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC returns the CRC32C (Castagnoli) of b, the checksum used on the wire.
func CRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC returns the CRC32C of what crc summed followed by b.
func UpdateCRC(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// CRCChunk is how much of a large payload to sum at a time while it is
// being read, so that the bytes are summed while still in the CPU's cache
// instead of being read back from memory after the whole block.
const CRCChunk = 256 << 10

// Header is the fixed part of a frame.
//
//	0  type    u8
//	1  flags   u8
//	2  op      u16
//	4  id      u32
//	8  metaLen u32
//	12 dataLen u32
//	16 dataCRC u32
//	20 reserved u32 (zero)
type Header struct {
	Type    byte
	Flags   byte
	Op      Op
	ID      uint32
	MetaLen uint32
	DataLen uint32
	DataCRC uint32
}

// Encode writes h into b, which must be at least HeaderSize long.
func (h *Header) Encode(b []byte) {
	b[0] = h.Type
	b[1] = h.Flags
	binary.BigEndian.PutUint16(b[2:], uint16(h.Op))
	binary.BigEndian.PutUint32(b[4:], h.ID)
	binary.BigEndian.PutUint32(b[8:], h.MetaLen)
	binary.BigEndian.PutUint32(b[12:], h.DataLen)
	binary.BigEndian.PutUint32(b[16:], h.DataCRC)
	binary.BigEndian.PutUint32(b[20:], 0)
}

// DecodeHeader parses and validates a header.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: short header (%d bytes)", ErrMalformed, len(b))
	}
	h := Header{
		Type:    b[0],
		Flags:   b[1],
		Op:      Op(binary.BigEndian.Uint16(b[2:])),
		ID:      binary.BigEndian.Uint32(b[4:]),
		MetaLen: binary.BigEndian.Uint32(b[8:]),
		DataLen: binary.BigEndian.Uint32(b[12:]),
		DataCRC: binary.BigEndian.Uint32(b[16:]),
	}
	if h.Type < TypeRequest || h.Type > TypeCancel {
		return h, fmt.Errorf("%w: unknown frame type %d", ErrMalformed, h.Type)
	}
	if h.Flags&^(FlagCRC|FlagEnd) != 0 {
		return h, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, h.Flags)
	}
	if binary.BigEndian.Uint32(b[20:]) != 0 {
		return h, fmt.Errorf("%w: reserved header bytes are not zero", ErrMalformed)
	}
	if h.MetaLen > MaxMeta {
		return h, fmt.Errorf("%w: meta of %d bytes exceeds %d", ErrMalformed, h.MetaLen, MaxMeta)
	}
	if h.DataLen > MaxData {
		return h, fmt.Errorf("%w: data of %d bytes exceeds %d", ErrMalformed, h.DataLen, MaxData)
	}
	return h, nil
}

// Frame is a decoded frame. Data aliases a buffer owned by whoever read it.
type Frame struct {
	Header
	Meta []byte
	Data []byte
}

// ReadFrame reads one whole frame from r into freshly allocated buffers,
// verifying the data CRC. It is used by tests; servers read with
// ReadFrameBuf, and the client's receive path reads data straight into
// the caller's buffer instead.
func ReadFrame(r io.Reader) (*Frame, error) {
	return ReadFrameBuf(r, func(n int) []byte { return make([]byte, n) })
}

// ReadFrameBuf is ReadFrame with the data read into buf(n), a buffer the
// caller may recycle, and summed piece by piece as it arrives, while it is
// in cache.
func ReadFrameBuf(r io.Reader, buf func(n int) []byte) (*Frame, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, err
	}
	h, err := DecodeHeader(hb[:])
	if err != nil {
		return nil, err
	}
	f := &Frame{Header: h}
	if h.MetaLen > 0 {
		f.Meta = make([]byte, h.MetaLen)
		if _, err := io.ReadFull(r, f.Meta); err != nil {
			return nil, truncated(err)
		}
	}
	var crc uint32
	if h.DataLen > 0 {
		f.Data = buf(int(h.DataLen))[:h.DataLen]
		for o := 0; o < len(f.Data); {
			k := min(len(f.Data)-o, CRCChunk)
			if _, err := io.ReadFull(r, f.Data[o:o+k]); err != nil {
				return nil, truncated(err)
			}
			crc = UpdateCRC(crc, f.Data[o:o+k])
			o += k
		}
	}
	if err := h.CheckCRC(crc); err != nil {
		return nil, err
	}
	return f, nil
}

// CheckData verifies data against the header's CRC, if it carries one.
func (h *Header) CheckData(data []byte) error {
	if h.Flags&FlagCRC == 0 {
		return nil
	}
	return h.CheckCRC(CRC(data))
}

// CheckCRC is CheckData for a receiver that summed the data (crc) as it
// read it.
func (h *Header) CheckCRC(crc uint32) error {
	if h.Flags&FlagCRC != 0 && crc != h.DataCRC {
		return fmt.Errorf("%w: %w (request %d)", ErrMalformed, ErrChecksum, h.ID)
	}
	return nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendHeader appends the encoded header for a frame with the given parts,
// computing the CRC of data when it is not empty.
func AppendHeader(dst []byte, typ, flags byte, op Op, id uint32, meta, data []byte) []byte {
	var crc uint32
	if len(data) > 0 {
		crc = CRC(data)
	}
	return AppendHeaderCRC(dst, typ, flags, op, id, meta, data, crc)
}

// AppendHeaderCRC is AppendHeader for a sender that already has crc, the
// CRC32C of data.
func AppendHeaderCRC(dst []byte, typ, flags byte, op Op, id uint32, meta, data []byte, crc uint32) []byte {
	h := Header{Type: typ, Flags: flags, Op: op, ID: id, MetaLen: uint32(len(meta)), DataLen: uint32(len(data))}
	if len(data) > 0 {
		h.Flags |= FlagCRC
		h.DataCRC = crc
	}
	var b [HeaderSize]byte
	h.Encode(b[:])
	return append(dst, b[:]...)
}

// Preface is the first thing each side sends.
//
//	0 magic "PNDO"
//	4 version u16
//	6 channel u8 (client) / status u8 (server: 0 ok, 1 version refused)
//	7 reserved u8
type Preface struct {
	Version uint16
	Channel byte
}

// PrefaceSize is the encoded length of a Preface.
const PrefaceSize = 8

// ErrVersion is returned when the peer speaks another protocol version.
var ErrVersion = errors.New("protocol version mismatch")

// ErrNotPando is returned when the peer does not speak pando at all.
var ErrNotPando = errors.New("peer does not speak the pando protocol")

// EncodePreface returns the 8 bytes of p.
func EncodePreface(p Preface) []byte {
	b := make([]byte, PrefaceSize)
	copy(b, Magic[:])
	binary.BigEndian.PutUint16(b[4:], p.Version)
	b[6] = p.Channel
	return b
}

// ReadPreface reads and checks a peer's preface. It returns the peer's
// version and channel; a version other than Version yields ErrVersion with
// both numbers in the message.
func ReadPreface(r io.Reader) (Preface, error) {
	var b [PrefaceSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return Preface{}, truncated(err)
	}
	if [4]byte(b[:4]) != Magic {
		return Preface{}, ErrNotPando
	}
	p := Preface{Version: binary.BigEndian.Uint16(b[4:]), Channel: b[6]}
	if p.Version != Version {
		return p, fmt.Errorf("%w: peer speaks version %d, this pando speaks version %d; run the same pando release on both ends", ErrVersion, p.Version, Version)
	}
	return p, nil
}
