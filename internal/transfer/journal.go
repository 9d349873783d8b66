package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// journal records the committed blocks of one file's transfer, so that an
// interrupted transfer moves only what is missing. A block is committed
// once the destination made it durable (after a sync), never merely sent;
// with Options.NoSync, once the destination wrote it, and the journal says
// so (Unsynced): a machine crash may have lost such blocks, so a resume
// checks them against their sums first.
type journal struct {
	path string

	Source  string   `json:"source"`
	Dest    string   `json:"dest"`
	Size    int64    `json:"size"`
	Mtime   int64    `json:"mtime"`
	Version uint64   `json:"version"`
	Block   int      `json:"block"`
	Done    []uint64 `json:"done"` // bitmap of committed blocks
	Sums    []uint32 `json:"sums"` // CRC32C of each committed block, as read at the source
	// Unsynced: blocks were committed that the destination had written
	// but not synced.
	Unsynced bool `json:"unsynced,omitempty"`
}

// JournalDir is where journals live unless told otherwise:
// $XDG_STATE_HOME/pando/transfers (or ~/.local/state/pando/transfers).
func JournalDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "pando", "transfers")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "pando-transfers")
	}
	return filepath.Join(home, ".local", "state", "pando", "transfers")
}

func journalPath(dir, src, dst string) string {
	h := sha256.Sum256([]byte(src + "\x00" + dst))
	return filepath.Join(dir, hex.EncodeToString(h[:12])+".json")
}

func blocksOf(size int64, block int) int { return int((size + int64(block) - 1) / int64(block)) }

// newJournal starts an empty journal for a source of info.
func newJournal(path, src, dst string, in Info, block int) *journal {
	n := blocksOf(in.Size, block)
	return &journal{path: path, Source: src, Dest: dst, Size: in.Size, Mtime: in.Mtime, Version: in.Version,
		Block: block, Done: make([]uint64, (n+63)/64), Sums: make([]uint32, n)}
}

// loadJournal reads the journal at path if it describes the same transfer
// of the same source; otherwise it returns nil.
func loadJournal(path, src, dst string, in Info, block int) (*journal, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, nil // a torn or foreign file: start over
	}
	n := blocksOf(in.Size, block)
	if j.Source != src || j.Dest != dst || j.Size != in.Size || j.Mtime != in.Mtime || j.Version != in.Version ||
		j.Block != block || len(j.Done) != (n+63)/64 || len(j.Sums) != n {
		return nil, nil // the source changed, or another block size: start over
	}
	j.path = path
	return &j, nil
}

func (j *journal) done(i int) bool { return j.Done[i/64]&(1<<(i%64)) != 0 }

func (j *journal) mark(i int, sum uint32) {
	j.Done[i/64] |= 1 << (i % 64)
	j.Sums[i] = sum
}

func (j *journal) unmark(i int) {
	j.Done[i/64] &^= 1 << (i % 64)
	j.Sums[i] = 0
}

// committed counts the bytes of committed blocks.
func (j *journal) committed() int64 {
	var n int64
	for i := range j.Sums {
		if j.done(i) {
			n += min(int64(j.Block), j.Size-int64(i)*int64(j.Block))
		}
	}
	return n
}

// save writes the journal atomically.
func (j *journal) save() error {
	if err := os.MkdirAll(filepath.Dir(j.path), 0o700); err != nil {
		return fmt.Errorf("transfer journal: %w", err)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("transfer journal: %w", err)
	}
	return os.Rename(tmp, j.path)
}

func (j *journal) remove() { os.Remove(j.path) }

// ReadJournal returns the source, destination and committed bytes of the
// journal at path (for tools and tests).
func ReadJournal(path string) (src, dst string, committed int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", 0, err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return "", "", 0, err
	}
	if len(j.Sums) != blocksOf(j.Size, max(j.Block, 1)) || len(j.Done)*64 < len(j.Sums) {
		return "", "", 0, fmt.Errorf("%s: inconsistent journal", path)
	}
	return j.Source, j.Dest, j.committed(), nil
}
