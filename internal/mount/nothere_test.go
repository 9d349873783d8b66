package mount_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
)

// TestCreateAboveShares: a file or directory made in a directory of the
// namespace above every share (the domain's) is refused with EPERM, as
// mkdir(2) has it for a file system that makes none there, not
// EOPNOTSUPP; inside a share both are made.
func TestCreateAboveShares(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	a := startAgent(t, d, vfs.Options{}, cache.Options{DiskBytes: gib})
	mnt := a.Mount().Dir()
	for _, dir := range []string{filepath.Join(mnt, "t")} {
		if err := os.Mkdir(filepath.Join(dir, "newdir"), 0o755); !errors.Is(err, syscall.EPERM) {
			t.Errorf("mkdir in %s: %v, want EPERM", dir, err)
		}
		if f, err := os.OpenFile(filepath.Join(dir, "new.txt"), os.O_CREATE|os.O_WRONLY, 0o644); !errors.Is(err, syscall.EPERM) {
			t.Errorf("create in %s: %v, want EPERM", dir, err)
			if err == nil {
				f.Close()
			}
		}
	}
	if err := os.Mkdir(filepath.Join(mnt, "t", "data", "newdir"), 0o755); err != nil {
		t.Errorf("mkdir in the share: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "t", "data", "new.txt"), []byte("x"), 0o644); err != nil {
		t.Errorf("create in the share: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "newdir")); err != nil {
		t.Errorf("the share has no newdir: %v", err)
	}
}
