package share

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Transfer operations: block checksums computed where the data lives, and
// whole small files in one round trip each way, so that many small files
// cost one request apiece instead of open, read or write, close.

// checkSum refuses a request's data that no longer matches the CRC32C it
// had at its source. The sum its frame carried, which the data matched on
// arrival, serves if there is one.
func checkSum(rel string, req *rpc.Request, want *uint32) error {
	if want == nil {
		return nil
	}
	got, ok := req.DataSum()
	if !ok {
		got = wire.CRC(req.Data)
	}
	if got != *want {
		return wire.Errorf(wire.CodeCorrupt, "/%s: %d bytes arrived with CRC32C %08x, but the source read %08x; send them again", rel, len(req.Data), got, *want)
	}
	return nil
}

func (s *Server) sum(req *rpc.Request) (rpc.Reply, error) {
	var r wire.SumReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Block == 0 || r.Block > wire.MaxData || r.Offset < 0 || r.Length < 0 || r.Length > wire.MaxSumLength {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "sum of %d bytes at %d in blocks of %d: out of bounds (blocks of 1..%d bytes, at most %d bytes a request)",
			r.Length, r.Offset, r.Block, wire.MaxData, wire.MaxSumLength)
	}
	if r.Uncached {
		if err := h.f.Sync(); err != nil {
			return rpc.Reply{}, toWire(req.Op, h.rel, err)
		}
		_ = unix.Fadvise(int(h.f.Fd()), r.Offset, r.Length, unix.FADV_DONTNEED)
	}
	buf, release := rpc.DataBuf(int(r.Block))
	defer release()
	var sums []uint32
	for off, end := r.Offset, r.Offset+r.Length; off < end; off += int64(r.Block) {
		n, err := h.f.ReadAt(buf[:min(int64(r.Block), end-off)], off)
		if n > 0 {
			sums = append(sums, wire.CRC(buf[:n]))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, h.rel, err)
		}
	}
	return rpc.Reply{Msg: wire.SumResp{Sums: sums}}, nil
}

func (s *Server) getFile(req *rpc.Request) (rpc.Reply, error) {
	var r wire.GetFileReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	_, rel, err := s.reach(req, r.Tok, r.Path, true, auth.Read)
	if err != nil {
		return rpc.Reply{}, err
	}
	if rel == "" {
		return rpc.Reply{}, wire.Errorf(wire.CodeIsDir, "the root of share %s is a directory", s.cfg.Name)
	}
	f, err := s.tree.openFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	defer f.Close()
	defer s.commits.open(rel, holderOf(req))()
	a, err := fileAttr(f)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return rpc.Reply{}, toWire(req.Op, rel, syscall.EISDIR)
	}
	max := int64(min(r.Max, wire.MaxData))
	buf := make([]byte, min(a.Size, max))
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	// Whole only if nothing follows what was read (the file may have grown).
	var probe [1]byte
	k, _ := f.ReadAt(probe[:], int64(n))
	return rpc.Reply{Msg: wire.GetFileResp{Attr: a, Whole: k == 0}, Data: buf[:n]}, nil
}

func (s *Server) putFile(req *rpc.Request) (rpc.Reply, error) {
	var r wire.PutFileReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	rel, err := s.resolve(r.Path, true)
	if err != nil {
		return rpc.Reply{}, err
	}
	if rel == "" {
		return rpc.Reply{}, wire.Errorf(wire.CodeIsDir, "the root of share %s is a directory", s.cfg.Name)
	}
	need := auth.Insert
	if a, err := s.lstat(rel); err == nil {
		if r.Excl {
			return rpc.Reply{}, toWire(req.Op, rel, fs.ErrExist)
		}
		if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return rpc.Reply{}, toWire(req.Op, rel, syscall.EISDIR)
		}
		need = auth.Write
	}
	t, err := s.allowReached(req, r.Tok, r.Path, rel, need)
	if err != nil {
		return rpc.Reply{}, err
	}
	if err := checkSum(rel, req, r.Sum); err != nil {
		return rpc.Reply{}, err
	}
	dir, name := splitRel(rel)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".pando-" + hex.EncodeToString(rnd[:])
	if len(name) <= 200 {
		tmp = "." + name + tmp
	}
	if dir != "" {
		tmp = dir + "/" + tmp
	}
	f, err := s.tree.openFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, s.realMode(syscall.S_IFREG|r.Mode&0o7777))
	if err == nil {
		if err = s.own(t, tmp, syscall.S_IFREG|r.Mode&0o7777, 0, ident{owner: t.Principal}); err != nil {
			f.Close()
			_ = s.tree.remove(tmp, false)
		}
	}
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	fail := func(err error) (rpc.Reply, error) {
		f.Close()
		_ = s.tree.remove(tmp, false)
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	if _, err := f.Write(req.Data); err != nil {
		return fail(err)
	}
	if r.Mtime != 0 {
		if err := s.utimes(tmp, r.Mtime, r.Mtime); err != nil {
			return fail(err)
		}
	}
	if err := s.renameAt(tmp, rel, r.Excl); err != nil {
		return fail(err)
	}
	a, err := fileAttr(f)
	f.Close()
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	s.changed(req, rel, parentOf(rel))
	return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
}
