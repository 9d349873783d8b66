package nfs

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"sync"
)

// File handles name a path below an export, not an inode: the vfs opens
// by path, and a handle made of the path needs no table to be read back,
// so it survives a restart of the gateway and is never forgotten by an
// LRU while a client still holds it (go-nfs's caching handler gives
// random handles from an in-memory LRU: after a restart, or past its
// size, every handle a client holds is stale). Like that handler's, a
// handle names the path: after a rename the old handle is stale (the
// client looks the name up again), and a handle of a removed name names
// whatever is made there next.
//
// A handle is at most 64 bytes (NFSv3), a multiple of 4 (go-nfs reads
// some handles without their XDR padding):
//
//	kindInline:  kind(1) export(4) len(1) path(len) zero padding
//	kindHashed:  kind(1) export(4) zero(3) sha256(export, path)[:16]
//
// export is a hash of the export's name; path is the names below the
// export's root joined with "/". A path too long to fit inline is kept in
// a table on disk (--cache-dir/nfs-handles), appended to as handles are
// made and read whole at start.
const (
	kindInline = 1
	kindHashed = 2
	fhMax      = 64
	inlineMax  = fhMax - 6
)

// ErrBadHandle: a file handle no export of this gateway made.
var ErrBadHandle = errors.New("not a file handle of this gateway")

func exportID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

type handleTable struct {
	mu   sync.Mutex
	m    map[[16]byte]string // hash -> export name NUL path
	file *os.File            // nil: kept in memory only
}

// openHandleTable reads the table kept in file, or starts one.
func openHandleTable(file string) (*handleTable, error) {
	t := &handleTable{m: make(map[[16]byte]string)}
	if file == "" {
		return t, nil
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the NFS handle table: %w", err)
	}
	r := bufio.NewReader(f)
	for {
		var hdr [18]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			break // the end, or a record cut short by a crash
		}
		b := make([]byte, binary.BigEndian.Uint16(hdr[16:]))
		if _, err := io.ReadFull(r, b); err != nil {
			break
		}
		t.m[[16]byte(hdr[:16])] = string(b)
	}
	t.file = f
	return t, nil
}

func (t *handleTable) close() {
	if t.file != nil {
		t.file.Close()
	}
}

func pathHash(export, p string) [16]byte {
	s := sha256.Sum256([]byte(export + "\x00" + p))
	return [16]byte(s[:16])
}

// handle makes the handle of names below export e.
func (t *handleTable) handle(e *exportFS, ns []string) []byte {
	for _, n := range ns {
		if checkName(n) != nil {
			return nil // no handle: go-nfs answers with one no one takes
		}
	}
	p := strings.Join(ns, "/")
	out := make([]byte, 0, fhMax)
	if len(p) <= inlineMax {
		out = append(out, kindInline)
		out = binary.BigEndian.AppendUint32(out, e.id)
		out = append(out, byte(len(p)))
		out = append(out, p...)
		for len(out)%4 != 0 {
			out = append(out, 0)
		}
		return out
	}
	h := pathHash(e.name, p)
	key := e.name + "\x00" + p
	t.mu.Lock()
	if _, ok := t.m[h]; !ok && len(key) <= 0xffff {
		t.m[h] = key
		if t.file != nil {
			rec := append(h[:], 0, 0)
			binary.BigEndian.PutUint16(rec[16:], uint16(len(key)))
			t.file.Write(append(rec, key...))
		}
	}
	t.mu.Unlock()
	out = append(out, kindHashed)
	out = binary.BigEndian.AppendUint32(out, e.id)
	out = append(out, 0, 0, 0)
	return append(out, h[:]...)
}

// resolve reads a handle back: its export and names, each checked.
func (s *Server) resolve(fh []byte) (*exportFS, []string, error) {
	if len(fh) < 8 || len(fh) > fhMax || len(fh)%4 != 0 {
		return nil, nil, ErrBadHandle
	}
	e := s.byID[binary.BigEndian.Uint32(fh[1:5])]
	if e == nil {
		return nil, nil, ErrBadHandle
	}
	var p string
	switch fh[0] {
	case kindInline:
		n := int(fh[5])
		if 6+n > len(fh) || len(fh) != (6+n+3)/4*4 {
			return nil, nil, ErrBadHandle
		}
		for _, b := range fh[6+n:] {
			if b != 0 {
				return nil, nil, ErrBadHandle
			}
		}
		p = string(fh[6 : 6+n])
	case kindHashed:
		if len(fh) != 24 || fh[5]|fh[6]|fh[7] != 0 {
			return nil, nil, ErrBadHandle
		}
		s.handles.mu.Lock()
		key, ok := s.handles.m[[16]byte(fh[8:24])]
		s.handles.mu.Unlock()
		exp, rest, _ := strings.Cut(key, "\x00")
		if !ok || exp != e.name {
			return nil, nil, ErrBadHandle
		}
		p = rest
	default:
		return nil, nil, ErrBadHandle
	}
	if p == "" {
		return e, []string{}, nil
	}
	ns := strings.Split(p, "/")
	for _, n := range ns {
		if checkName(n) != nil {
			return nil, nil, ErrBadHandle
		}
	}
	return e, ns, nil
}
