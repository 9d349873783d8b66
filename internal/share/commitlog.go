package share

import (
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

// A commit copies a stage into its file in place. So that a share that
// stops in the middle does not leave the file half old and half new, the
// commit first writes a record of what it is about to do beside the
// stage; a share that starts and finds such a record completes the copy
// from the stage before it serves anyone, then removes both. A commit
// with Sync (a program's fsync, pando put) syncs the stage, the record and
// the directory before the copy, and the file after it, so that this holds
// across a power cut of the share's host too; others hold across a crash
// or kill of the share's process (the kernel keeps what was written).

// journalPrefix names commit records in the share's root.
const journalPrefix = ".pando-commit-"

// commitRecord is what a commit is about to do.
type commitRecord struct {
	Stage  string           `json:"stage"`  // the stage's name in the root
	Target string           `json:"target"` // the file, share-relative
	Ino    uint64           `json:"ino"`    // the file's inode: a name that now leads elsewhere is not written
	Ranges []wire.ByteRange `json:"ranges"` // the stage's bytes to copy
	Size   int64            `json:"size"`
	Mtime  int64            `json:"mtime,omitempty"`
}

func recordName(stage string) string {
	return journalPrefix + strings.TrimPrefix(stage, stagePrefix)
}

// writeRecord writes rec, durably with sync (the stage was synced before).
func (s *Server) writeRecord(rec commitRecord, sync bool) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	name := recordName(rec.Stage)
	f, err := s.tree.openFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && sync {
		err = s.tree.dir.Sync()
	}
	if err != nil {
		_ = s.tree.remove(name, false)
	}
	return err
}

// dropRecord removes the record of a commit done (or given up), durably
// with sync: a record found at start is always one whose copy may be
// unfinished.
func (s *Server) dropRecord(stage string, sync bool) {
	if err := s.tree.remove(recordName(stage), false); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("cannot remove the record of a commit", "stage", stage, "err", err)
	}
	if sync {
		_ = s.tree.dir.Sync()
	}
}

// copyStage copies ranges of stage into target and gives target size and,
// if set, mtime; then, with sync, syncs it.
func copyStage(stage, target *os.File, ranges []wire.ByteRange, size, mtime int64, sync bool) error {
	buf := make([]byte, 1<<20)
	copied := 0
	for _, rg := range ranges {
		for off, end := rg.Off, rg.Off+rg.Len; off < end; {
			n, err := stage.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if n == 0 && err != nil {
				if errors.Is(err, io.EOF) {
					return fmt.Errorf("the stage ends at %d, before the %d bytes written to it: %w", off, end, syscall.EIO)
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

// recoverCommits completes the commits a stopped share had begun (before
// sweepStages removes their stages).
func (s *Server) recoverCommits() {
	d, err := s.tree.openDir("")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		if !strings.HasPrefix(n, journalPrefix) {
			continue
		}
		rec, err := s.readRecord(n)
		if err == nil {
			err = s.redo(rec)
		}
		if err != nil {
			s.log.Warn("cannot complete a commit that the share had begun before it stopped; the file may hold part of the new version", "record", n, "file", "/"+rec.Target, "err", err)
		} else {
			s.log.Info("completed a commit that the share had begun before it stopped", "file", "/"+rec.Target)
		}
		if rec.Stage == "" {
			rec.Stage = stagePrefix + strings.TrimPrefix(n, journalPrefix)
		}
		s.dropRecord(rec.Stage, true)
	}
}

func (s *Server) readRecord(name string) (commitRecord, error) {
	var rec commitRecord
	f, err := s.tree.openFile(name, os.O_RDONLY, 0)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("the record is damaged: %w", err)
	}
	if !strings.HasPrefix(rec.Stage, stagePrefix) || strings.Contains(rec.Stage, "/") {
		return rec, fmt.Errorf("the record names %q as its stage", rec.Stage)
	}
	return rec, nil
}

func (s *Server) redo(rec commitRecord) error {
	rel, err := s.resolve(rec.Target, false)
	if err != nil {
		return err
	}
	target, err := s.tree.openFile(rel, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer target.Close()
	a, err := fileAttr(target)
	if err != nil {
		return err
	}
	if a.Ino != rec.Ino {
		return fmt.Errorf("the name leads to another file now (inode %d, not %d)", a.Ino, rec.Ino)
	}
	stage, err := s.tree.openFile(rec.Stage, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer stage.Close()
	return copyStage(stage, target, rec.Ranges, rec.Size, rec.Mtime, true)
}
