package wire

import "syscall"

// Byte-range locks. The share holds each lock for the handle it was taken
// through, as an open-file-description lock on its own descriptor of the
// file (F_OFD_SETLK): locks of two handles conflict, whichever agents hold
// them, and they conflict with the locks that programs at the share's
// machine take on the same file. A handle's locks go when it is closed,
// and so when its connection ends.

// Lock types, as fcntl(2) numbers them.
const (
	LockRead   uint8 = syscall.F_RDLCK
	LockWrite  uint8 = syscall.F_WRLCK
	LockUnlock uint8 = syscall.F_UNLCK
)

// CodeLocked: another holder's lock conflicts with the one asked for.
const CodeLocked Code = Code(syscall.EAGAIN)

// LockReq asks for a lock of Type on Len bytes from Start (Len 0: to the
// end of the file, however far it grows) through an open handle. With
// Test, nothing changes: the reply names a lock that would conflict, or
// Type LockUnlock when none would.
type LockReq struct {
	Tok    uint32 `cbor:"1,keyasint"`
	Handle uint64 `cbor:"2,keyasint"`
	Type   uint8  `cbor:"3,keyasint"`
	Start  int64  `cbor:"4,keyasint"`
	Len    int64  `cbor:"5,keyasint"`
	Test   bool   `cbor:"6,keyasint,omitempty"`
}

// LockResp answers a test: the conflicting lock, or Type LockUnlock.
type LockResp struct {
	Type  uint8 `cbor:"1,keyasint"`
	Start int64 `cbor:"2,keyasint"`
	Len   int64 `cbor:"3,keyasint"`
}
