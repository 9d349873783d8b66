package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// ValidateMax is the most directories one ValidateReq may name; an agent
// with more sends several requests.
const ValidateMax = 16384

// ListingSumSize is the length of a ListingSum.
const ListingSumSize = 16

// ValidateReq names directories (share-relative, as PathReq.Path) with the
// sum of the listing the agent holds of each (ListingSum).
type ValidateReq struct {
	Tok  uint32     `cbor:"1,keyasint"`
	Dirs []DirCheck `cbor:"2,keyasint"`
}

// DirCheck is one directory of a ValidateReq: the sum of its listing, or
// with Attr the sum of its attributes alone (AttrSum; not following a
// final symlink, as getattr), for a path whose listing the agent does
// not hold (the root of a mount, which every walk looks up).
type DirCheck struct {
	Path string `cbor:"1,keyasint"`
	Sum  []byte `cbor:"2,keyasint"` // ListingSumSize bytes
	Attr bool   `cbor:"3,keyasint,omitempty"`
}

// ValidateResp answers ValidateReq: bit i of Unchanged (Unchanged[i/8] &
// (1 << (i%8))) is set if the listing of Dirs[i] the share would give now
// has the sum the agent sent. A directory that is gone, is no directory
// any more, or that the principal may not list is changed, as is one the
// share did not look at (more entries than it reads for one request).
// Under a callback session, the share holds the agent as having listed
// every directory named (a later change recalls it), from before it
// compared.
type ValidateResp struct {
	Unchanged []byte `cbor:"1,keyasint"`
}

// Same reports whether bit i of Unchanged is set.
func (r ValidateResp) Same(i int) bool {
	return i >= 0 && i/8 < len(r.Unchanged) && r.Unchanged[i/8]&(1<<(i%8)) != 0
}

// ListingHash computes the sum of a listing: in the order listed
// (bytewise by name, as shares list), each entry's name and attributes,
// then the directory's attributes (as its last page gave them). Access
// times are left out: reading a file at the share changes them and
// nothing else.
type ListingHash struct{ h hash.Hash }

// NewListingHash starts the sum of a listing.
func NewListingHash() ListingHash { return ListingHash{h: sha256.New()} }

// Add adds an entry.
func (l ListingHash) Add(e DirEntry) {
	l.h.Write([]byte{1})
	l.str(e.Name)
	l.attr(e.Attr)
}

// Sum returns the sum (ListingSumSize bytes) of the listing of a
// directory whose attributes are dir.
func (l ListingHash) Sum(dir Attr) []byte {
	l.h.Write([]byte{2})
	l.attr(dir)
	return l.h.Sum(nil)[:ListingSumSize]
}

// ListingSum is the sum of a whole listing.
func ListingSum(dir Attr, entries []DirEntry) []byte {
	l := NewListingHash()
	for _, e := range entries {
		l.Add(e)
	}
	return l.Sum(dir)
}

// AttrSum is the sum of the attributes a alone (DirCheck.Attr).
func AttrSum(a Attr) []byte { return ListingSum(a, nil) }

func (l ListingHash) attr(a Attr) {
	var b [8 * 9]byte
	for i, x := range []uint64{a.Ino, uint64(a.Mode), uint64(a.Nlink), uint64(a.Size), uint64(a.Blocks),
		uint64(a.Mtime), uint64(a.Ctime), a.Version, a.Rdev} {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	l.h.Write(b[:])
	l.str(a.Owner)
	l.str(a.Group)
}

func (l ListingHash) str(s string) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
	l.h.Write(b[:])
	l.h.Write([]byte(s))
}
