package gateway

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// secretFile is a file of credentials a gateway is given (its password
// file, S3 key file or SMB password file), which its operator edits while
// the gateway runs:
//
//   - it is refused, at every use, while others than its owner may read
//     it: it holds what lets a person act as a user;
//   - it is read again when its modification time or size changes, and
//     parsed with parse;
//   - a version that does not parse, once a good one was read, leaves the
//     good one in use and is logged once, as a warning: a slip of the
//     operator's does not lock every user out. The first version read must
//     parse.
type secretFile[T any] struct {
	what  string // how messages name it: "the password file"
	path  string
	parse func(b []byte) (T, error)

	mu   sync.Mutex
	log  *slog.Logger // told of a damaged version; nil: nobody
	seen [2]int64     // modification time and size of the version read last, good or damaged
	v    T            // the last good version
	good bool         // v was read
}

func newSecretFile[T any](what, path string, parse func(b []byte) (T, error)) *secretFile[T] {
	return &secretFile[T]{what: what, path: path, parse: parse}
}

// tell makes log the logger that hears of damaged versions.
func (f *secretFile[T]) tell(log *slog.Logger) {
	f.mu.Lock()
	f.log = log
	f.mu.Unlock()
}

// load returns the file's contents, read again if the file changed.
func (f *secretFile[T]) load() (T, error) {
	var zero T
	fi, err := os.Stat(f.path)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", f.what, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return zero, fmt.Errorf("%s %s may be read by others (mode %o); chmod 600 it", f.what, f.path, perm)
	}
	ver := [2]int64{fi.ModTime().UnixNano(), fi.Size()}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.good && ver == f.seen {
		return f.v, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", f.what, err)
	}
	v, err := f.parse(b)
	if err != nil && !f.good {
		return zero, err
	}
	f.seen = ver
	if err != nil {
		if f.log != nil {
			f.log.Warn("a changed credential file does not parse; the version read before stays in use until it is mended", "file", f.path, "err", err)
		}
		return f.v, nil
	}
	f.v, f.good = v, true
	return v, nil
}
