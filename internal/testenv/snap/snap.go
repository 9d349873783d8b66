// Package snap records a directory tree (every entry's path, type, mode,
// owner, and content hash or link target) so that a test can check that a
// refused request changed nothing.
package snap

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Take records the tree below root.
func Take(tb testing.TB, root string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		v := []string{strconv.FormatUint(uint64(st.Mode), 8), "uid=" + strconv.Itoa(int(st.Uid)), "gid=" + strconv.Itoa(int(st.Gid))}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			v = append(v, hex.EncodeToString(h[:8]))
		case syscall.S_IFLNK:
			target, _ := os.Readlink(p)
			v = append(v, "-> "+target)
		}
		out[strings.TrimPrefix(p, root)] = strings.Join(v, " ")
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// Same reports every difference between two records of one tree, saying
// what was done between them.
func Same(tb testing.TB, what string, before, after map[string]string) {
	tb.Helper()
	for p, v := range before {
		if w, ok := after[p]; !ok {
			tb.Errorf("%s removed %s (%s)", what, p, v)
		} else if w != v {
			tb.Errorf("%s changed %s: %s -> %s", what, p, v, w)
		}
	}
	for p, v := range after {
		if _, ok := before[p]; !ok {
			tb.Errorf("%s made %s (%s)", what, p, v)
		}
	}
}
