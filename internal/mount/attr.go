package mount

import (
	"context"
	"errors"
	"hash/fnv"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// inoOf maps a share's inode number into the mount's inode space: inodes
// of different shares must not collide.
func inoOf(share string, ino uint64) uint64 {
	h := fnv.New32a()
	h.Write([]byte(share))
	return uint64(h.Sum32()&0x7fffff)<<40 | ino&(1<<40-1)
}

// synthIno numbers namespace directories above the shares.
func synthIno(p string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(p))
	return h.Sum64() | 1<<63
}

// fillAttr converts share attributes into FUSE attributes, the owner and
// group through the mount's ID map (idmap.go). On a mount lent to other
// uids the kernel checks mode bits against them (default_permissions).
func (m *Mount) fillAttr(out *fuse.Attr, a wire.Attr, ino uint64) {
	out.Ino = ino
	out.Mode = a.Mode
	out.Rdev = uint32(a.Rdev)
	out.Nlink = a.Nlink
	out.Size = uint64(a.Size)
	out.Blocks = uint64(a.Blocks)
	out.Blksize = 1 << 16
	setTime := func(ns int64) (uint64, uint32) { return uint64(ns / 1e9), uint32(ns % 1e9) }
	out.Atime, out.Atimensec = setTime(a.Atime)
	out.Mtime, out.Mtimensec = setTime(a.Mtime)
	out.Ctime, out.Ctimensec = setTime(a.Ctime)
	ids := m.idmap()
	out.Uid, out.Gid = ids.uid(a.Owner), ids.gid(a.Owner, a.Group)
}

// errno translates a vfs error into an errno for the kernel.
func errno(err error) syscall.Errno { return vfs.Errno(err) }

// detach keeps operations running when the kernel interrupts the calling
// process (Go programs are signalled all the time for preemption): a
// rename or write must not fail with EINTR half done. Every operation has
// its own deadline in the client. But a caller that is being killed
// (SIGKILL, or a signal whose default action ends it) cannot leave the
// kernel until the agent answers: for it, the interrupt cancels the
// operation (EINTR), at once or as soon as the kill comes, so that kill -9
// ends a program blocked on an unreachable share. done must be called
// when the operation ends.
func detach(ctx context.Context) (context.Context, func()) {
	d := context.WithoutCancel(ctx)
	if ctx.Done() == nil {
		return d, func() {}
	}
	pid := callerPid(ctx)
	if pid == 0 {
		return d, func() {}
	}
	d, cancel := context.WithCancel(d)
	stop := context.AfterFunc(ctx, func() {
		// Interrupted: the kernel sends one interrupt per request, so
		// watch the caller until the operation ends.
		t := time.NewTicker(killPoll)
		defer t.Stop()
		for {
			if dying(pid) {
				cancel()
				return
			}
			select {
			case <-d.Done():
				return
			case <-t.C:
			}
		}
	})
	return d, func() {
		stop()
		cancel()
	}
}

// killPoll is how often an interrupted caller is checked for a kill.
const killPoll = 100 * time.Millisecond

// dying reports whether thread tid has a fatal signal pending: the kernel
// marks every thread of a process being killed with SIGKILL (also for a
// signal whose default action is to end the process). A thread that is
// gone is dying too.
func dying(tid uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "SigPnd" && k != "ShdPnd" {
			continue
		}
		if set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && set&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
}

// callerPid is the process a FUSE request came from (0 if unknown).
func callerPid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}
