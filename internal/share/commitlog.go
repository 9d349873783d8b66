package share

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/wire"
)

// A commit copies new bytes into a file in place. So that a share that
// stops in the middle does not leave the file half old and half new, the
// commit first writes a record of what it is about to do (with the bytes
// themselves for an inline commit, beside the stage otherwise); a share
// that starts and finds such a record completes the copy before it serves
// anyone, then removes it. A commit with Sync (a program's fsync, pando
// put) syncs the stage, the record and the directory before the copy, and
// the file after it, so that this holds across a power cut of the share's
// host too; others hold across a crash or kill of the share's process
// (the kernel keeps what was written).

// journalPrefix names the slots of commit records (see recordStore).
const journalPrefix = ".pando-commit-"

// commitRecord is what a commit is about to do. An inline commit's bytes
// follow the record's first line, those of Ranges one after the other.
type commitRecord struct {
	Stage  string           `json:"stage,omitempty"`  // the stage's name in the root
	Inline bool             `json:"inline,omitempty"` // the bytes are in the record
	Target string           `json:"target"`           // the file, share-relative
	Ino    uint64           `json:"ino"`              // the file's inode: a name that now leads elsewhere is not written
	Ranges []wire.ByteRange `json:"ranges"`           // the bytes written
	Upto   int64            `json:"upto"`             // the bytes past it are not copied
	Size   int64            `json:"size"`
	Mtime  int64            `json:"mtime,omitempty"`
}

// writeRecord writes rec (and an inline commit's payload) into a free
// slot, which it returns, durably with sync (the stage was synced before).
func (s *Server) writeRecord(rec commitRecord, payload []byte, sync bool) (*os.File, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	f, fresh, err := s.records.take()
	if err != nil {
		return nil, err
	}
	_, err = f.WriteAt(append(append(b, '\n'), payload...), 0)
	if err == nil && sync {
		err = f.Sync()
	}
	if err == nil && sync && fresh {
		err = s.records.syncDir()
	}
	if err != nil {
		_ = s.records.give(f, false)
		return nil, err
	}
	return f, nil
}

// dropRecord empties the slot of a commit done (or given up), durably
// with sync: a record found at start is always one whose copy may be
// unfinished.
func (s *Server) dropRecord(f *os.File, sync bool) {
	if err := s.records.give(f, sync); err != nil {
		s.log.Warn("cannot empty the record of a commit", "record", f.Name(), "err", err)
	}
}

// copyRanges copies ranges of src into target at the same offsets and
// gives target size and, if set, mtime; then, with sync, syncs it.
func copyRanges(src io.ReaderAt, target *os.File, ranges []wire.ByteRange, size, mtime int64, sync bool) error {
	buf := make([]byte, min(1<<20, max(total(ranges), 1)))
	copied := 0
	for _, rg := range ranges {
		for off, end := rg.Off, rg.Off+rg.Len; off < end; {
			n, err := src.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if n == 0 && err != nil {
				if errors.Is(err, io.EOF) {
					return fmt.Errorf("the new bytes end at %d, before the %d written: %w", off, end, syscall.EIO)
				}
				return err
			}
			if _, err := target.WriteAt(buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
			if copied++; copied == 2 {
				fault.Crash("share.commit.mid-copy")
			}
		}
	}
	if err := target.Truncate(size); err != nil {
		return err
	}
	if mtime != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", target.Fd()), ts, 0); err != nil {
			return err
		}
	}
	if sync {
		return target.Sync()
	}
	return nil
}

func total(rs []wire.ByteRange) int64 {
	var n int64
	for _, r := range rs {
		n += r.Len
	}
	return n
}

// recoverCommits completes the commits a stopped share had begun (before
// sweepStages removes their stages), and removes every slot.
func (s *Server) recoverCommits() {
	for _, n := range s.records.names() {
		rec, err := s.redo(n)
		switch {
		case errors.Is(err, errNoRecord):
		case err != nil:
			s.log.Warn("cannot complete a commit that the share had begun before it stopped; the file may hold part of the new version", "record", n, "file", "/"+rec.Target, "err", err)
		default:
			s.log.Info("completed a commit that the share had begun before it stopped", "file", "/"+rec.Target)
		}
		if err := s.records.remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("cannot remove the record of a commit", "record", n, "err", err)
		}
	}
	_ = s.records.syncDir()
}

var errNoRecord = errors.New("an empty slot")

// redo completes the commit of the record name.
func (s *Server) redo(name string) (commitRecord, error) {
	var rec commitRecord
	f, err := s.records.open(name, os.O_RDONLY)
	if err != nil {
		return rec, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 2*wire.MaxData))
	f.Close()
	if err != nil {
		return rec, err
	}
	if len(b) == 0 {
		return rec, errNoRecord
	}
	head, payload, _ := bytes.Cut(b, []byte{'\n'})
	if err := json.Unmarshal(head, &rec); err != nil {
		return rec, fmt.Errorf("the record is damaged: %w", err)
	}
	var src io.ReaderAt
	switch {
	case rec.Inline:
		if total(rec.Ranges) != int64(len(payload)) {
			return rec, fmt.Errorf("the record holds %d bytes of the %d written", len(payload), total(rec.Ranges))
		}
		src = memSource{ranges: rec.Ranges, data: payload}
	case strings.HasPrefix(rec.Stage, stagePrefix) && !strings.Contains(rec.Stage, "/"):
		stage, err := s.tree.openFile(rec.Stage, os.O_RDONLY, 0)
		if err != nil {
			return rec, err
		}
		defer stage.Close()
		src = stage
	default:
		return rec, fmt.Errorf("the record names %q as its stage", rec.Stage)
	}
	rel, err := s.resolve(rec.Target, false)
	if err != nil {
		return rec, err
	}
	target, err := s.tree.openFile(rel, os.O_WRONLY, 0)
	if err != nil {
		return rec, err
	}
	defer target.Close()
	a, err := fileAttr(target)
	if err != nil {
		return rec, err
	}
	if a.Ino != rec.Ino {
		return rec, fmt.Errorf("the name leads to another file now (inode %d, not %d)", a.Ino, rec.Ino)
	}
	return rec, copyRanges(src, target, clipRanges(rec.Ranges, rec.Upto), rec.Size, rec.Mtime, true)
}
