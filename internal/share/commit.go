package share

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// commitJob is what a commit copies: the bytes of ranges, read from src at
// their offsets, into target.
type commitJob struct {
	target  *os.File
	src     io.ReaderAt
	ranges  []wire.ByteRange // written: sorted, disjoint, not yet cut at the size
	stage   string           // the stage's name in the root; "" for an inline commit
	payload []byte           // an inline commit's data, recorded with it
}

// commit answers OpCommit (see wire.CommitReq).
func (s *Server) commit(req *rpc.Request) (rpc.Reply, error) {
	var r wire.CommitReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	h, err := s.tokenHandle(req, r.Tok, r.Handle)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Size < 0 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "commit %s: negative size %d", "/"+h.rel, r.Size)
	}
	var job commitJob
	switch {
	case r.Inline:
		if job, err = s.inlineJob(req, h, r); err != nil {
			return rpc.Reply{}, err
		}
		defer job.target.Close()
	case len(req.Data) > 0 || len(r.Ranges) > 0:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "commit %s: data or ranges with a commit that is not inline", "/"+h.rel)
	case h.stage == nil:
		return rpc.Reply{}, wire.Errorf(wire.CodeBadHandle, "commit %s: the handle is not a stage (open one with a stage request, or commit inline)", "/"+h.rel)
	case h.stage.named != nil && h.stage.named.isGone():
		return rpc.Reply{}, wire.Errorf(wire.CodeBadHandle, "commit %s: the stage was thrown away (closed by another handle, or expired); send the data again through a new stage", "/"+h.rel)
	default:
		job = commitJob{target: h.stage.target, src: h.f, ranges: h.stage.written(), stage: h.stage.name}
	}
	ranges, err := s.apply(job, h.rel, holderOf(req), r)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	a, err := fileAttr(job.target)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, h.rel, err)
	}
	fault.Crash("share.commit.after-apply-before-reply")
	if !r.Inline {
		h.stage.discard = true // applied: a named stage is done with too
		if _, err := s.dropHandle(req, r.Handle); err == nil {
			_ = h.release(s)
		}
	}
	for _, rg := range ranges {
		s.inv.wroteDeleg(invSessionOf(req), h.rel, rg.Off, rg.Len)
	}
	s.changedData(req, h.rel)
	return rpc.Reply{Msg: wire.AttrResp{Attr: a}}, nil
}

// inlineJob checks an inline commit's data and opens the file of h (open
// for writing) to copy it into.
func (s *Server) inlineJob(req *rpc.Request, h *handle, r wire.CommitReq) (commitJob, error) {
	var total, end int64
	for _, rg := range r.Ranges {
		if rg.Off < end || rg.Len < 0 || rg.Len > wire.MaxData {
			return commitJob{}, wire.Errorf(wire.CodeInvalid, "commit %s: the range of %d bytes at %d is out of bounds or out of order (ranges go up and do not overlap)", "/"+h.rel, rg.Len, rg.Off)
		}
		total += rg.Len
		end = rg.Off + rg.Len
	}
	if total != int64(len(req.Data)) {
		return commitJob{}, wire.Errorf(wire.CodeInvalid, "commit %s: the ranges hold %d bytes, the request %d", "/"+h.rel, total, len(req.Data))
	}
	if err := checkSum(h.rel, req, r.Sum); err != nil {
		return commitJob{}, err
	}
	target, err := s.targetOf(req, h)
	if err != nil {
		return commitJob{}, err
	}
	return commitJob{target: target, src: memSource{ranges: r.Ranges, data: req.Data}, ranges: r.Ranges, payload: req.Data}, nil
}

// targetOf opens the file of h (open for writing, a regular file) anew,
// without the handle's O_APPEND (a commit writes at offsets), also when
// its name is gone.
func (s *Server) targetOf(req *rpc.Request, h *handle) (*os.File, error) {
	if !h.writing || h.stage != nil {
		return nil, wire.Errorf(wire.CodeBadHandle, "%s %s: a stage or a commit needs a handle open for writing, not a read-only handle or a stage", req.Op, "/"+h.rel)
	}
	a, err := fileAttr(h.f)
	if err != nil {
		return nil, toWire(req.Op, h.rel, err)
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, toWire(req.Op, h.rel, syscall.EISDIR)
	}
	target, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", h.f.Fd()), os.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, toWire(req.Op, h.rel, err)
	}
	return target, nil
}

// memSource reads the data of an inline commit at the file offsets of
// its ranges.
type memSource struct {
	ranges []wire.ByteRange
	data   []byte
}

func (m memSource) ReadAt(p []byte, off int64) (int, error) {
	var base int64
	for _, rg := range m.ranges {
		if off >= rg.Off && off < rg.Off+rg.Len {
			n := copy(p, m.data[base+off-rg.Off:base+rg.Len])
			if n < len(p) {
				return n, io.EOF
			}
			return n, nil
		}
		base += rg.Len
	}
	return 0, io.EOF
}

// clipRanges cuts rs at size.
func clipRanges(rs []wire.ByteRange, size int64) []wire.ByteRange {
	var out []wire.ByteRange
	for _, r := range rs {
		if r.Off >= size {
			break
		}
		out = append(out, wire.ByteRange{Off: r.Off, Len: min(r.Len, size-r.Off)})
	}
	return out
}

// apply copies job into its file (rel) and sets the file's size and
// mtime as r says; it returns the ranges copied. Everything that can fail
// for want of room fails before the file changes.
func (s *Server) apply(job commitJob, rel, holder string, r wire.CommitReq) ([]wire.ByteRange, error) {
	size := r.Size
	ranges := clipRanges(job.ranges, size)
	if f, ok := job.src.(*os.File); ok && r.Sync {
		if err := f.Sync(); err != nil {
			return nil, err
		}
	}
	tfd := int(job.target.Fd())
	for _, rg := range ranges {
		err := unix.Fallocate(tfd, unix.FALLOC_FL_KEEP_SIZE, rg.Off, rg.Len)
		if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			break // a file system that cannot reserve: the copy may still fail
		}
		if err != nil {
			// Give back what was reserved beyond the end: the file
			// is as it was.
			var fst unix.Stat_t
			if unix.Fstat(tfd, &fst) == nil {
				_ = unix.Ftruncate(tfd, fst.Size)
			}
			return nil, err
		}
	}
	defer s.commits.commit(rel, holder)()
	a, err := fileAttr(job.target)
	if err != nil {
		return nil, err
	}
	if r.KeepLonger && a.Size > size {
		size = a.Size
	}
	rec := commitRecord{Stage: job.stage, Inline: job.payload != nil, Target: rel, Ino: a.Ino, Ranges: job.ranges, Upto: r.Size, Size: size, Mtime: r.Mtime}
	slot, err := s.writeRecord(rec, job.payload, r.Sync)
	if err != nil {
		return nil, err
	}
	defer s.dropRecord(slot, r.Sync)
	return ranges, copyRanges(job.src, job.target, ranges, size, r.Mtime, r.Sync)
}
