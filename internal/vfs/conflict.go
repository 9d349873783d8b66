package vfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"pando.dev/pando/internal/wire"
)

// ConflictName is the name the local version of name gets beside it:
// NAME.conflict-HOST-YYYYMMDD-HHMMSS (UTC), with -N appended for the Nth
// try when that is taken.
func ConflictName(name, host string, t time.Time, n int) string {
	s := ".conflict-" + host + "-" + t.UTC().Format("20060102-150405")
	if n > 1 {
		s += fmt.Sprint("-", n)
	}
	dir, base := path.Split(name)
	if over := len(base) + len(s) - 255; over > 0 {
		n := max(1, len(base)-over)
		for n > 1 && !utf8.RuneStart(base[n]) {
			n-- // not inside a character
		}
		base = base[:n]
	}
	return dir + base + s
}

// hostLabel is this host's name as it goes into conflict names.
func hostLabel() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	h, _, _ = strings.Cut(h, ".")
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, h)
}

// writeLocalVersion writes the cached version of key to a new file beside
// name and returns its path, and whether blocks were missing.
func (v *FS) writeLocalVersion(ctx context.Context, key, name string, mode uint32) (string, bool, error) {
	v.cache.Pin(key)
	defer v.cache.Unpin(key)
	_, size, _ := v.cache.Version(key)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir, base := path.Split(name)
	tmp := dir + "." + base[:min(len(base), 200)] + ".pando-conflict-" + hex.EncodeToString(rnd[:])
	f, err := v.data.Create(ctx, tmp, wire.OpenWrite|wire.OpenExcl, mode)
	if err != nil {
		return "", false, fmt.Errorf("creating a copy of %s beside it: %w", name, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close(context.Background())
			_ = v.c.Remove(context.Background(), tmp)
		}
	}()
	bs := v.cache.BlockSize()
	buf := make([]byte, bs)
	partial := false
	for idx := int64(0); idx*bs < size; idx++ {
		n := min(bs, size-idx*bs)
		if !v.cache.Present(key, idx) {
			partial = true // a hole: zeros
			continue
		}
		got, err := v.cache.ReadAt(ctx, key, buf[:n], idx*bs, noFetch)
		if errors.Is(err, errNotCached) {
			partial = true
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return "", false, fmt.Errorf("reading unsent data of %s from the cache: %w", name, err)
		}
		if _, err := f.WriteAt(ctx, buf[:got], idx*bs); err != nil {
			return "", false, fmt.Errorf("writing a copy of %s beside it: %w", name, err)
		}
	}
	if err := f.Truncate(ctx, size); err != nil {
		return "", false, fmt.Errorf("writing a copy of %s beside it: %w", name, err)
	}
	if err := f.Sync(ctx); err != nil {
		return "", false, fmt.Errorf("syncing the copy of %s at its share: %w", name, err)
	}
	if err := f.Close(ctx); err != nil {
		return "", false, fmt.Errorf("writing a copy of %s beside it: %w", name, err)
	}
	done = true
	host, now := hostLabel(), time.Now()
	for n := 1; n <= 100; n++ {
		kept := ConflictName(name, host, now, n)
		err := v.c.Rename(ctx, tmp, kept, true)
		if err == nil {
			v.forget(tmp)
			return kept, partial, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			_ = v.c.Remove(context.Background(), tmp)
			return "", false, fmt.Errorf("naming the copy of %s: %w", name, err)
		}
	}
	_ = v.c.Remove(context.Background(), tmp)
	return "", false, fmt.Errorf("naming the copy of %s: a hundred conflict copies from this second exist: %w", name, fs.ErrExist)
}
