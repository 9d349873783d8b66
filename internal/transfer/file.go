package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// job is one file to copy.
type job struct {
	sp, dp string
	in     Info
}

// blk is a block in flight from reader to writer.
type blk struct {
	i   int
	buf []byte
	sum uint32
}

// retryable reports failures that a new attempt may cure: a broken or
// refused connection, a restarting share, data damaged on the way.
func retryable(err error) bool {
	var ne net.Error
	switch {
	case err == nil:
		return false
	case errors.Is(err, errCorrupt), errors.Is(err, wire.ErrChecksum), errors.Is(err, rpc.ErrBroken), errors.As(err, &ne), errors.Is(err, client.ErrUnreachable),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	switch wire.CodeOf(err) {
	case wire.CodeUnavailable, wire.CodeBadHandle, wire.CodeCorrupt:
		return true
	}
	var he *rpc.HandshakeError
	return errors.As(err, &he)
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		wire.CodeOf(err) == wire.CodeNoSpace || wire.CodeOf(err) == wire.CodeQuota
}

// backoff waits before attempt n (1, 2, ...), or returns ctx's error.
func backoff(ctx context.Context, n int) error {
	d := min(100*time.Millisecond<<min(n, 6), 5*time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// copySmall moves a file that fits in one block in one request each way.
func (x *run) copySmall(ctx context.Context, j job) error {
	buf := x.small.Get().(*[]byte)
	defer x.small.Put(buf)
	if x.o.Resume && x.alreadyThere(ctx, j) {
		return nil
	}
	for attempt := 0; ; attempt++ {
		err := x.smallOnce(ctx, &j, *buf)
		if errors.Is(err, errGrew) {
			return x.copyLarge(ctx, j)
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, errCorrupt) {
			x.corrupt.Add(1)
		}
		if !retryable(err) || attempt >= x.o.Retries {
			return err
		}
		x.retries.Add(1)
		if err := backoff(ctx, attempt+1); err != nil {
			return err
		}
	}
}

// errGrew: a small file grew beyond a block while it was being copied.
var errGrew = errors.New("the file grew beyond one block")

// smallOnce is one attempt at a small file: share to share, or read
// whole and written whole. When the file grew, j gets its new size.
func (x *run) smallOnce(ctx context.Context, j *job, buf []byte) error {
	if x.third != nil {
		return x.pushSmall(ctx, *j)
	}
	data, in, whole, err := x.src.ReadSmall(ctx, j.sp, buf)
	if err != nil {
		return err
	}
	if !whole {
		j.in.Size = max(in.Size, int64(len(buf))+1)
		return errGrew
	}
	x.limit(ctx, len(data))
	if err := x.dst.WriteSmall(ctx, j.dp, data, j.in.Mode, in.Mtime, wire.CRC(data)); err != nil {
		return err
	}
	x.moved.Add(int64(len(data)))
	return nil
}

// alreadyThere reports (and counts) a file that a previous run copied
// completely: same size and modification time at the destination, which
// only a finished copy sets.
func (x *run) alreadyThere(ctx context.Context, j job) bool {
	d, err := x.dst.Stat(ctx, j.dp)
	if err != nil || d.Dir || d.Size != j.in.Size || d.Mtime != j.in.Mtime {
		return false
	}
	x.skipped.Add(j.in.Size)
	return true
}

// partialName is where a large file is assembled before it is renamed
// into place: readers of the destination never see half a file.
func partialName(dp string) string {
	return path.Join(path.Dir(dp), "."+path.Base(dp)+".pando-part")
}

// copyLarge moves a file block by block through the staging ring, keeping
// a journal of committed blocks, retrying within the budget.
func (x *run) copyLarge(ctx context.Context, j job) error {
	srcName, dstName := x.src.Name(j.sp), x.dst.Name(j.dp)
	jp := journalPath(x.o.JournalDir, srcName, dstName)
	part := partialName(j.dp)
	var jr *journal
	if x.o.Resume {
		if x.alreadyThere(ctx, j) {
			return nil
		}
		var err error
		if jr, err = loadJournal(jp, srcName, dstName, j.in, x.o.Block); err != nil {
			return err
		}
		if jr != nil {
			if d, err := x.dst.Stat(ctx, part); err != nil || d.Size != j.in.Size {
				jr = nil // the partial file is gone: start over
			}
		}
	}
	if jr == nil {
		jr = newJournal(jp, srcName, dstName, j.in, x.o.Block)
		if _, err := x.dst.Stat(ctx, part); err == nil {
			if err := x.dst.Remove(ctx, part); err != nil && !isNotExist(err) {
				return fmt.Errorf("%s: cannot remove the stale partial file: %w", x.dst.Name(part), err)
			}
		}
	}
	if jr.Unsynced {
		if err := x.recheck(ctx, j, jr, part); err != nil {
			return err
		}
	}
	x.skipped.Add(jr.committed())
	for attempt := 0; ; attempt++ {
		var err error
		if x.third != nil {
			err = x.pushPump(ctx, j, jr, part)
		} else {
			err = x.pump(ctx, j, jr, part)
		}
		if err == nil {
			break
		}
		if isNoSpace(err) {
			return fmt.Errorf("%s: the destination is full after %d of %d bytes (%w); free space there, then run the same command with --resume to move only the rest",
				dstName, jr.committed(), j.in.Size, err)
		}
		if !retryable(err) || attempt >= x.o.Retries || ctx.Err() != nil {
			if !retryable(err) && ctx.Err() == nil || jr.committed() == 0 {
				// Resuming helps only a copy that moved something and
				// was cut short; a refusal says what to fix instead.
				return fmt.Errorf("%s: %w", dstName, err)
			}
			return fmt.Errorf("%s: %w (%d of %d bytes are safe at the destination; run the same command with --resume to move only the rest)",
				dstName, err, jr.committed(), j.in.Size)
		}
		x.retries.Add(1)
		if err := backoff(ctx, attempt+1); err != nil {
			return err
		}
	}
	if x.o.Verify {
		if err := x.verify(ctx, j, jr, part); err != nil {
			return err
		}
	}
	if err := x.dst.SetMtime(ctx, part, j.in.Mtime); err != nil {
		return err
	}
	if err := x.dst.Rename(ctx, part, j.dp); err != nil {
		return err
	}
	jr.remove()
	return nil
}

// recheck compares the blocks a journal holds but the destination never
// synced with their sums at the source, reading them back from the
// destination, and forgets those that no longer match: what a machine
// crash before the page cache was written leaves behind.
func (x *run) recheck(ctx context.Context, j job, jr *journal, part string) error {
	w, err := x.dst.OpenWrite(ctx, part, j.in.Mode|0o600)
	if err != nil {
		return err
	}
	defer w.Close()
	for i := 0; i < len(jr.Sums); {
		if !jr.done(i) {
			i++
			continue
		}
		k := i
		for k < len(jr.Sums) && jr.done(k) {
			k++
		}
		off := int64(i) * int64(jr.Block)
		sums, err := w.Sums(ctx, off, min(int64(k-i)*int64(jr.Block), j.in.Size-off), jr.Block, false)
		if err != nil {
			return fmt.Errorf("checking the blocks of %s copied before: %w", x.dst.Name(part), err)
		}
		for b := i; b < k; b++ {
			if b-i >= len(sums) || sums[b-i] != jr.Sums[b] {
				jr.unmark(b)
			}
		}
		i = k
	}
	return nil
}

// verify re-reads the destination from its disk and compares each block
// with its CRC32C at the source.
func (x *run) verify(ctx context.Context, j job, jr *journal, part string) error {
	w, err := x.dst.OpenWrite(ctx, part, j.in.Mode)
	if err != nil {
		return err
	}
	defer w.Close()
	sums, err := w.Sums(ctx, 0, j.in.Size, jr.Block, true)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", x.dst.Name(j.dp), err)
	}
	if len(sums) != len(jr.Sums) {
		return fmt.Errorf("verifying %s: it holds %d blocks, the source %d", x.dst.Name(j.dp), len(sums), len(jr.Sums))
	}
	for i, s := range sums {
		if s != jr.Sums[i] {
			lo := int64(i) * int64(jr.Block)
			return fmt.Errorf("verifying %s: bytes %d..%d differ from the source (CRC32C %08x, source %08x)",
				x.dst.Name(j.dp), lo, min(lo+int64(jr.Block), j.in.Size)-1, s, jr.Sums[i])
		}
	}
	x.verified.Add(j.in.Size)
	return nil
}

// pump runs one attempt at the missing blocks of a file: readers fill
// ring buffers, writers drain them, a checkpointer commits what the
// destination made durable.
func (x *run) pump(ctx context.Context, j job, jr *journal, part string) error {
	r, err := x.src.OpenRead(ctx, j.sp)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := x.dst.OpenWrite(ctx, part, j.in.Mode|0o600)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Truncate(ctx, j.in.Size); err != nil {
		return err
	}
	var todo []int
	for i := range jr.Sums {
		if !jr.done(i) {
			todo = append(todo, i)
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fail := func(err error) { cancel(err) }
	blockLen := func(i int) int { return int(min(int64(jr.Block), j.in.Size-int64(i)*int64(jr.Block))) }
	// A source that hands its bytes over as they arrive writes them
	// straight into a local destination: the readers do it all, with no
	// staging buffer, and the writers only account for what landed.
	sr, direct := r.(streamReader)
	lw, local := w.(localFile)
	direct = direct && local
	readOnce := func(b *blk, off int64) (int, uint32, error) {
		if direct {
			return sr.ReadBlockTo(ctx, lw.File, off, blockLen(b.i))
		}
		return r.ReadBlock(ctx, b.buf[:blockLen(b.i)], off)
	}
	read := func(b *blk) error {
		off := int64(b.i) * int64(jr.Block)
		n, sum, err := readOnce(b, off)
		for tries := 0; errors.Is(err, wire.ErrChecksum) && tries < 3; tries++ {
			x.corrupt.Add(1) // damaged on the way here: read it again
			n, sum, err = readOnce(b, off)
		}
		if err != nil {
			return err
		}
		if n != blockLen(b.i) {
			return fmt.Errorf("%s shrank while being copied (%d bytes at %d, expected %d); copy it again", x.src.Name(j.sp), n, off, blockLen(b.i))
		}
		b.sum = sum
		if !direct {
			b.buf = b.buf[:n]
		}
		return nil
	}

	// A block the destination has no room for starts no more blocks, but
	// lets those in flight land (and be committed) before the attempt
	// fails with it.
	var halted atomic.Pointer[error]
	var next atomic.Int64
	full := make(chan blk, x.nbuf)
	var readers, writers sync.WaitGroup
	for range x.readers {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(todo) || halted.Load() != nil {
					return
				}
				if direct {
					off := int64(todo[k]) * int64(jr.Block)
					if err := lw.reserve(off, blockLen(todo[k])); err != nil {
						halted.CompareAndSwap(nil, &err)
						return
					}
				}
				var buf []byte
				if !direct {
					if buf = x.ring.get(ctx); buf == nil {
						return
					}
				}
				b := blk{i: todo[k], buf: buf}
				x.limit(ctx, blockLen(b.i))
				if err := read(&b); err != nil {
					if !direct {
						x.ring.put(buf)
					}
					fail(err)
					return
				}
				full <- b
			}
		}()
	}
	go func() { readers.Wait(); close(full) }()

	var mu sync.Mutex
	var pending []blk // written, not yet committed (sum only; buf is nil)
	for range x.writers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for b := range full {
				if direct { // written and checked already
					lw.wrote(int64(b.i)*int64(jr.Block), blockLen(b.i))
					x.moved.Add(int64(blockLen(b.i)))
					mu.Lock()
					pending = append(pending, blk{i: b.i, sum: b.sum})
					mu.Unlock()
					continue
				}
				if ctx.Err() != nil {
					x.ring.put(b.buf[:cap(b.buf)])
					continue
				}
				off := int64(b.i) * int64(jr.Block)
				err := w.WriteBlock(ctx, b.buf, off, b.sum)
				for tries := 0; (errors.Is(err, errCorrupt) || errors.Is(err, wire.ErrChecksum)) && tries < 3; tries++ {
					x.corrupt.Add(1) // damaged on the way: read it again
					if err = read(&b); err == nil {
						err = w.WriteBlock(ctx, b.buf, off, b.sum)
					}
				}
				n := len(b.buf)
				x.ring.put(b.buf[:cap(b.buf)])
				if err != nil {
					fail(err)
					continue
				}
				x.moved.Add(int64(n))
				mu.Lock()
				pending = append(pending, blk{i: b.i, sum: b.sum})
				mu.Unlock()
			}
		}()
	}

	// The checkpointer: make the written blocks durable, then record them
	// (with NoSync, only record them, and that they were not synced). A
	// durable copy that resumes one that was not syncs at least once.
	commit := func(cctx context.Context) error {
		mu.Lock()
		batch := pending
		pending = nil
		mu.Unlock()
		if len(batch) == 0 && (x.o.NoSync || !jr.Unsynced) {
			return nil
		}
		if !x.o.NoSync {
			if err := w.Sync(cctx); err != nil {
				return err
			}
		}
		for _, b := range batch {
			jr.mark(b.i, b.sum)
		}
		jr.Unsynced = x.o.NoSync
		return jr.save()
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	tick := time.NewTicker(x.o.Checkpoint)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := commit(ctx); err != nil {
				fail(err)
			}
			continue
		case <-done:
		}
		break
	}
	// Commit what was written even when the attempt failed: it is safe at
	// the destination if the destination can still sync it.
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	cerr := commit(cctx)
	ccancel()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := halted.Load(); err != nil {
		return *err
	}
	return cerr
}
