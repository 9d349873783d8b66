package wire

// The messages of whole-file and bulk operations: checksums of ranges,
// staged commits, third-party pushes and their tickets, and small files
// read or written in one request.

// SumReq asks for the CRC32C of each Block-sized block of [Offset,
// Offset+Length) of an open file, read from the share's storage; with
// Uncached, the share first drops the range from its page cache, so that
// the sums say what is on its disk.
type SumReq struct {
	Tok      uint32 `cbor:"1,keyasint"`
	Handle   uint64 `cbor:"2,keyasint"`
	Offset   int64  `cbor:"3,keyasint"`
	Length   int64  `cbor:"4,keyasint"`
	Block    uint32 `cbor:"5,keyasint"`
	Uncached bool   `cbor:"6,keyasint,omitempty"`
}

// CommitReq applies the stage Handle (OpStage) to its file: the bytes
// written to the stage replace those of the file, whose size becomes Size
// (a truncate, O_TRUNC included, travels with the data this way; see
// KeepLonger), and, if Mtime is set, its modification time becomes Mtime
// (unix ns). The share first reserves the file's space for the bytes to
// come, so that a full disk fails the commit before the file changes, and
// records the commit (to complete it if it stops); then it copies them
// in, with reads of the file through the share waiting (see Sync). The
// file keeps its identity (Ino). The stage is closed and removed once
// committed; closing it instead (or losing the connection) throws it
// away.
//
// With Inline, Handle is instead the file's own handle (open for writing)
// and the request's data part holds the new bytes, those of Ranges one
// after the other (Sum, if set, is their CRC32C at the source): the share
// stages them itself, so that a small write-back costs one round trip.
type CommitReq struct {
	Tok    uint32      `cbor:"1,keyasint"`
	Handle uint64      `cbor:"2,keyasint"`
	Size   int64       `cbor:"3,keyasint"`
	Mtime  int64       `cbor:"4,keyasint,omitempty"`
	Inline bool        `cbor:"5,keyasint,omitempty"`
	Ranges []ByteRange `cbor:"6,keyasint,omitempty"`
	Sum    *uint32     `cbor:"7,keyasint,omitempty"`
	// KeepLonger: a file longer than Size at the commit keeps its size
	// (the writer did not cut it; another may have made it grow).
	KeepLonger bool `cbor:"8,keyasint,omitempty"`
	// Sync makes every step durable (the stage, the record, the file):
	// without it the commit is whole across a crash of the share's
	// process, not a power cut of its host.
	Sync bool `cbor:"9,keyasint,omitempty"`
}

// SumResp answers SumReq; the last block may be short (end of range or file).
type SumResp struct {
	Sums []uint32 `cbor:"1,keyasint"`
}

// MaxSumLength bounds one SumReq, so that it finishes within a deadline.
const MaxSumLength = 1 << 30

// PushReq makes the share copy [Offset, Offset+Length) of its file Path to
// DestPath (a global path under Dest.Prefix) at the share of Dest, whose
// token was delegated to this share: third-party transfer, the data moves
// between the shares only. The destination file must exist (a partial
// file the client created); with Whole, the share instead writes the whole
// file, which must fit in one request, atomically (as putfile) with Mode
// and Mtime. Window blocks are in flight at once over Streams data
// channels; with Sync, the destination syncs the range before the reply.
type PushReq struct {
	Tok      uint32      `cbor:"1,keyasint"`
	Path     string      `cbor:"2,keyasint"`
	Offset   int64       `cbor:"3,keyasint"`
	Length   int64       `cbor:"4,keyasint"`
	Block    uint32      `cbor:"5,keyasint"`
	Dest     ResolveResp `cbor:"6,keyasint"`
	DestPath string      `cbor:"7,keyasint"`
	Streams  int         `cbor:"8,keyasint,omitempty"`
	Window   int         `cbor:"9,keyasint,omitempty"`
	Whole    bool        `cbor:"10,keyasint,omitempty"`
	Mode     uint32      `cbor:"11,keyasint,omitempty"`
	Mtime    int64       `cbor:"12,keyasint,omitempty"`
	Sync     bool        `cbor:"13,keyasint,omitempty"`
	// Protection of the data channels between the shares (default private).
	Protection string `cbor:"14,keyasint,omitempty"`
	// DestDomain is the destination's domain when it is a linked domain
	// ("": the share's own); the share checks the destination against
	// that domain's CA, as its controller has it.
	DestDomain string `cbor:"15,keyasint,omitempty"`
}

// PushResp carries the CRC32C of each block pushed, computed from the
// source's reads (the destination checked each against its data).
type PushResp struct {
	Sums []uint32 `cbor:"1,keyasint"`
}

// TicketReq asks for a one-time ticket to open a data channel without TLS
// with the given protection ("safe" or "clear"), on a TLS control channel.
type TicketReq struct {
	Protection string `cbor:"1,keyasint"`
}

// TicketResp carries the ticket (see rpc.DialPlain).
type TicketResp struct {
	Ticket []byte `cbor:"1,keyasint"`
}

// GetFileReq reads a whole file of at most Max bytes in one round trip.
type GetFileReq struct {
	Tok  uint32 `cbor:"1,keyasint"`
	Path string `cbor:"2,keyasint"`
	Max  uint32 `cbor:"3,keyasint"`
}

// GetFileResp carries the file's attributes; its data part holds the
// content, or its first Max bytes when Whole is false.
type GetFileResp struct {
	Attr  Attr `cbor:"1,keyasint"`
	Whole bool `cbor:"2,keyasint"`
}

// PutFileReq creates or replaces the file at Path with the request's data
// part, atomically (readers see the old content or the new, never a part),
// then sets its modification time (unix ns; 0 leaves it). Sum is as in
// WriteReq. With Excl, an existing file is an error.
type PutFileReq struct {
	Tok   uint32  `cbor:"1,keyasint"`
	Path  string  `cbor:"2,keyasint"`
	Mode  uint32  `cbor:"3,keyasint"`
	Mtime int64   `cbor:"4,keyasint,omitempty"`
	Sum   *uint32 `cbor:"5,keyasint,omitempty"`
	Excl  bool    `cbor:"6,keyasint,omitempty"`
}
