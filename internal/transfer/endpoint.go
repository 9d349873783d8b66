package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// Info describes a file or directory at an endpoint.
type Info struct {
	Size    int64
	Mode    uint32 // permission bits
	Dir     bool
	Mtime   int64  // unix ns
	Version uint64 // change counter, where the endpoint has one
}

// Entry is a name in a directory listing.
type Entry struct {
	Name string
	Info
}

// Reader reads blocks of an open source file.
type Reader interface {
	// ReadBlock fills p at off; it returns fewer bytes only at the end,
	// and the CRC32C of the n bytes read.
	ReadBlock(ctx context.Context, p []byte, off int64) (n int, sum uint32, err error)
	Close() error
}

// streamReader is a Reader that can write a block to a local file piece by
// piece as its bytes arrive, checked against the block's CRC32C once all
// have: the bytes are copied once and while in cache, with no staging
// buffer. On an error the range holds unchecked bytes and must be written
// again.
type streamReader interface {
	ReadBlockTo(ctx context.Context, w io.WriterAt, off int64, n int) (int, uint32, error)
}

// Writer writes blocks of an open destination file.
type Writer interface {
	// WriteBlock writes p at off unless p no longer has the CRC32C sum
	// it had at the source.
	WriteBlock(ctx context.Context, p []byte, off int64, sum uint32) error
	Truncate(ctx context.Context, size int64) error
	Sync(ctx context.Context) error
	// Sums computes the CRC32C of each block of [off, off+length) from
	// storage (uncached: from the disk itself).
	Sums(ctx context.Context, off, length int64, block int, uncached bool) ([]uint32, error)
	Close() error
}

// Endpoint is one side of a transfer: the local file system, a pando
// domain, or a web server (source only).
type Endpoint interface {
	Stat(ctx context.Context, p string) (Info, error)
	List(ctx context.Context, dir string) ([]Entry, error)
	Join(dir, name string) string
	OpenRead(ctx context.Context, p string) (Reader, error)
	// OpenWrite opens p for writing, creating it with mode if needed and
	// keeping what it holds (a partial file being resumed).
	OpenWrite(ctx context.Context, p string, mode uint32) (Writer, error)
	// ReadSmall reads a whole file of at most len(buf) bytes at once.
	ReadSmall(ctx context.Context, p string, buf []byte) ([]byte, Info, bool, error)
	// WriteSmall creates or replaces p with data atomically.
	WriteSmall(ctx context.Context, p string, data []byte, mode uint32, mtime int64, sum uint32) error
	Mkdir(ctx context.Context, p string, mode uint32) error
	Rename(ctx context.Context, oldp, newp string) error
	Remove(ctx context.Context, p string) error
	SetMtime(ctx context.Context, p string, mtime int64) error
	// Name shows p to a person, as they would type it.
	Name(p string) string
}

// errCorrupt marks data that did not match its checksum.
var errCorrupt = errors.New("checksum mismatch")

// local is the local file system. With noSync, files written are left to
// the page cache (Options.NoSync).
type local struct{ noSync bool }

func infoOf(fi fs.FileInfo) Info {
	return Info{Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Dir: fi.IsDir(), Mtime: fi.ModTime().UnixNano()}
}

func (local) Stat(_ context.Context, p string) (Info, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return Info{}, err
	}
	in := infoOf(fi)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		in.Version = uint64(st.Ctim.Nano())
	}
	return in, nil
}

func (local) List(_ context.Context, dir string) ([]Entry, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(ents))
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name())) // follows links, like cp -r -L
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			continue // sockets, devices, fifos are not data
		}
		out = append(out, Entry{Name: e.Name(), Info: infoOf(fi)})
	}
	return out, nil
}

func (local) Join(dir, name string) string { return filepath.Join(dir, name) }

func (local) Name(p string) string { return p }

type localFile struct {
	*os.File
	noSync bool
}

func (f localFile) ReadBlock(_ context.Context, p []byte, off int64) (int, uint32, error) {
	n, err := f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, wire.CRC(p[:n]), err
}

// WriteBlock writes p, whose sum was computed from these very bytes when
// they arrived (checked against the source's on the way); computing it
// again here would only burn a core.
func (f localFile) WriteBlock(_ context.Context, p []byte, off int64, _ uint32) error {
	if _, err := f.WriteAt(p, off); err != nil {
		return err
	}
	f.wrote(off, len(p))
	return nil
}

// reserve allocates n bytes at off before a block streams into them: a
// full disk then shows before the block's bytes move, and the blocks that
// got their space land whole instead of all of them in part. A file system
// that cannot allocate ahead is left to fail at the write.
func (f localFile) reserve(off int64, n int) error {
	err := unix.Fallocate(int(f.Fd()), 0, off, int64(n))
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

// wrote follows a write of n bytes at off.
func (f localFile) wrote(off int64, n int) {
	if f.noSync {
		return // the kernel writes the page cache back when it sees fit
	}
	// Start writing the block to disk now, without waiting: the
	// checkpoint's sync then finds little left to do, and the disk works
	// while the network does.
	_ = unix.SyncFileRange(int(f.Fd()), off, int64(n), unix.SYNC_FILE_RANGE_WRITE)
}

func (f localFile) Truncate(_ context.Context, size int64) error { return f.File.Truncate(size) }

// Sync makes the written data durable. The size was set when the transfer
// opened the file, so fdatasync suffices.
func (f localFile) Sync(context.Context) error { return unix.Fdatasync(int(f.Fd())) }

func (f localFile) Sums(_ context.Context, off, length int64, block int, uncached bool) ([]uint32, error) {
	if uncached {
		if err := f.File.Sync(); err != nil {
			return nil, err
		}
		_ = unix.Fadvise(int(f.Fd()), off, length, unix.FADV_DONTNEED)
	}
	buf := make([]byte, block)
	var sums []uint32
	for o := off; o < off+length; o += int64(block) {
		n, err := f.ReadAt(buf[:min(int64(block), off+length-o)], o)
		if n > 0 {
			sums = append(sums, wire.CRC(buf[:n]))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return sums, nil
}

func (local) OpenRead(_ context.Context, p string) (Reader, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	return localFile{File: f}, nil
}

func (l local) OpenWrite(_ context.Context, p string, mode uint32) (Writer, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, fs.FileMode(mode&0o777))
	if err != nil {
		return nil, err
	}
	return localFile{File: f, noSync: l.noSync}, nil
}

func (local) ReadSmall(_ context.Context, p string, buf []byte) ([]byte, Info, bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, Info{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, Info{}, false, err
	}
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, Info{}, false, err
	}
	var probe [1]byte
	k, _ := f.ReadAt(probe[:], int64(n))
	return buf[:n], infoOf(fi), k == 0, nil
}

func (local) WriteSmall(_ context.Context, p string, data []byte, mode uint32, mtime int64, sum uint32) error {
	if wire.CRC(data) != sum {
		return fmt.Errorf("%s: %w", p, errCorrupt)
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".pando-")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(fs.FileMode(mode & 0o777)); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if mtime != 0 {
		t := time.Unix(0, mtime)
		if err := os.Chtimes(f.Name(), t, t); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

func (local) Mkdir(_ context.Context, p string, mode uint32) error {
	err := os.Mkdir(p, fs.FileMode(mode&0o777)|0o700)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
			return nil
		}
	}
	return err
}

func (local) Rename(_ context.Context, oldp, newp string) error { return os.Rename(oldp, newp) }
func (local) Remove(_ context.Context, p string) error          { return os.Remove(p) }

func (local) SetMtime(_ context.Context, p string, mtime int64) error {
	t := time.Unix(0, mtime)
	return os.Chtimes(p, t, t)
}

// grid is a pando domain, reached through a client.
type grid struct{ c *client.Client }

func gridInfo(a wire.Attr) Info {
	return Info{Size: a.Size, Mode: a.Mode & 0o7777, Dir: a.Mode&syscall.S_IFMT == syscall.S_IFDIR, Mtime: a.Mtime, Version: a.Version}
}

func (g grid) Stat(ctx context.Context, p string) (Info, error) {
	a, err := g.c.Stat(ctx, p)
	if err != nil {
		return Info{}, err
	}
	return gridInfo(a), nil
}

func (g grid) List(ctx context.Context, dir string) ([]Entry, error) {
	ents, err := g.c.ReadDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(ents))
	for _, e := range ents {
		in := gridInfo(e.Attr)
		if !in.Dir && e.Attr.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		out = append(out, Entry{Name: e.Name, Info: in})
	}
	return out, nil
}

func (grid) Join(dir, name string) string { return path.Join(dir, name) }

func (grid) Name(p string) string { return "pando:/" + p }

type gridFile struct{ f *client.File }

// ReadBlock keeps the sum the share computed when it read the block, which
// the data was checked against on arrival: no need to compute it again.
func (f gridFile) ReadBlock(ctx context.Context, p []byte, off int64) (int, uint32, error) {
	n, sum, err := f.f.ReadBlockSum(ctx, p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, sum, err
}

func (f gridFile) ReadBlockTo(ctx context.Context, w io.WriterAt, off int64, n int) (int, uint32, error) {
	n, sum, err := f.f.ReadBlockTo(ctx, w, off, n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, sum, err
}

func (f gridFile) WriteBlock(ctx context.Context, p []byte, off int64, sum uint32) error {
	err := f.f.WriteBlock(ctx, p, off, sum)
	if wire.CodeOf(err) == wire.CodeCorrupt {
		return fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return err
}

func (f gridFile) Truncate(ctx context.Context, size int64) error { return f.f.Truncate(ctx, size) }
func (f gridFile) Sync(ctx context.Context) error                 { return f.f.Sync(ctx) }
func (f gridFile) Sums(ctx context.Context, off, length int64, block int, uncached bool) ([]uint32, error) {
	return f.f.Sums(ctx, off, length, block, uncached)
}

func (f gridFile) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.f.Close(ctx)
}

func (g grid) OpenRead(ctx context.Context, p string) (Reader, error) {
	f, err := g.c.Open(ctx, p, wire.OpenRead)
	if err != nil {
		return nil, err
	}
	return gridFile{f: f}, nil
}

func (g grid) OpenWrite(ctx context.Context, p string, mode uint32) (Writer, error) {
	f, err := g.c.Create(ctx, p, wire.OpenRead|wire.OpenWrite, mode&0o777)
	if err != nil {
		return nil, err
	}
	return gridFile{f: f}, nil
}

func (g grid) ReadSmall(ctx context.Context, p string, buf []byte) ([]byte, Info, bool, error) {
	data, a, whole, err := g.c.GetFile(ctx, p, buf)
	return data, gridInfo(a), whole, err
}

func (g grid) WriteSmall(ctx context.Context, p string, data []byte, mode uint32, mtime int64, sum uint32) error {
	_, err := g.c.PutFile(ctx, p, data, mode&0o777, mtime, sum)
	if wire.CodeOf(err) == wire.CodeCorrupt {
		return fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return err
}

func (g grid) Mkdir(ctx context.Context, p string, mode uint32) error {
	_, err := g.c.Mkdir(ctx, p, mode&0o777|0o700)
	if wire.CodeOf(err) == wire.CodeExist {
		if a, serr := g.c.Stat(ctx, p); serr == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return nil
		}
	}
	return err
}

func (g grid) Rename(ctx context.Context, oldp, newp string) error {
	return g.c.Rename(ctx, oldp, newp, false)
}

func (g grid) Remove(ctx context.Context, p string) error { return g.c.Remove(ctx, p) }

func (g grid) SetMtime(ctx context.Context, p string, mtime int64) error {
	_, err := g.c.SetAttr(ctx, p, wire.SetAttrReq{Valid: wire.SetAtime | wire.SetMtime, Atime: mtime, Mtime: mtime})
	return err
}

// isNotExist reports a missing file at any endpoint.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || wire.CodeOf(err) == wire.CodeNotExist
}

// cleanGrid turns "pando://dom/x" into "/dom/x".
func cleanGrid(p string) string {
	return "/" + strings.TrimPrefix(strings.TrimPrefix(p, "pando://"), "/")
}
