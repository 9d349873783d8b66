package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/cli"
)

// checkFUSE: /dev/fuse exists, is the FUSE device, and opens.
func checkFUSE() Result {
	const dev = "/dev/fuse"
	fi, err := os.Stat(dev)
	if errors.Is(err, fs.ErrNotExist) {
		return Result{"fuse", Fail, dev + " is missing: load the module (modprobe fuse), or in a container pass the device (docker run --device /dev/fuse --cap-add SYS_ADMIN)"}
	}
	if err != nil {
		return Result{"fuse", Fail, fmt.Sprintf("cannot examine %s (%v): check its permissions (crw-rw-rw-)", dev, err)}
	}
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return Result{"fuse", Fail, dev + " is not a character device: remove it and load the fuse module (modprobe fuse)"}
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return Result{"fuse", Fail, fmt.Sprintf("cannot open %s (%v): make it readable and writable by everyone (chmod 666 %s), as fuse3 installs it", dev, unwrapPath(err), dev)}
	}
	f.Close()
	return Result{"fuse", OK, dev + " opens"}
}

// checkFusermount: fusermount3, which mounts FUSE file systems for
// users who are not root, is in PATH.
func checkFusermount() Result {
	p, err := exec.LookPath("fusermount3")
	if err != nil {
		return Result{"fusermount3", Fail, "fusermount3 is not in PATH: install fuse3 (apt-get install fuse3, or dnf install fuse3), or add its directory to PATH"}
	}
	return Result{"fusermount3", OK, p}
}

// passthroughKernel is the first Linux release with FUSE passthrough.
var passthroughKernel = [2]int{6, 9}

// checkPassthrough: FUSE passthrough (the kernel reads cached files
// straight from the cache's data file) needs Linux 6.9 or later and
// CAP_SYS_ADMIN in the agent. Without it pando works, reads slower: a
// warning, not a failure.
func checkPassthrough() Result {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Result{"passthrough", Warn, fmt.Sprintf("cannot tell the kernel's version (%v): pando mount falls back to reads through the agent if the kernel lacks passthrough", err)}
	}
	release := unix.ByteSliceToString(u.Release[:])
	major, minor, ok := kernelVersion(release)
	if !ok {
		return Result{"passthrough", Warn, fmt.Sprintf("cannot read the kernel version %q: FUSE passthrough needs Linux %d.%d or later", release, passthroughKernel[0], passthroughKernel[1])}
	}
	if major < passthroughKernel[0] || major == passthroughKernel[0] && minor < passthroughKernel[1] {
		return Result{"passthrough", Warn, fmt.Sprintf("Linux %s has no FUSE passthrough (needs %d.%d or later): cached files are read through the agent, slower; upgrade the kernel for reads at disk speed",
			release, passthroughKernel[0], passthroughKernel[1])}
	}
	capable, err := hasCapSysAdmin()
	if err != nil {
		return Result{"passthrough", Warn, fmt.Sprintf("Linux %s supports FUSE passthrough, but the capabilities of this process are unknown (%v): it needs CAP_SYS_ADMIN", release, err)}
	}
	if !capable {
		return Result{"passthrough", Warn, fmt.Sprintf("Linux %s supports FUSE passthrough, but it needs CAP_SYS_ADMIN: run pando mount as root (or grant it: setcap cap_sys_admin+ep $(command -v pando)) for reads at disk speed", release)}
	}
	return Result{"passthrough", OK, fmt.Sprintf("Linux %s, with CAP_SYS_ADMIN", release)}
}

// kernelVersion parses "6.18.44-foo" into 6, 18.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits >= 0 {
		parts[1] = parts[1][:digits]
	}
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// hasCapSysAdmin reads this process's effective capabilities.
func hasCapSysAdmin() (bool, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("CapEff %q: %w", strings.TrimSpace(v), err)
			}
			return caps&(1<<unix.CAP_SYS_ADMIN) != 0, nil
		}
	}
	return false, errors.New("no CapEff in /proc/self/status")
}

// checkCacheDir: the cache directory (or, before the first mount, the
// directory it will be made in) is writable and has room.
func checkCacheDir(dir string) Result {
	existing := dir
	for {
		if _, err := os.Stat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	if err := unix.Access(existing, unix.W_OK|unix.X_OK); err != nil {
		return Result{"cache-dir", Fail, fmt.Sprintf("%s is not writable (%v): pass a --cache-dir you can write to", existing, err)}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(existing, &st); err != nil {
		return Result{"cache-dir", Fail, fmt.Sprintf("cannot tell the free space of %s (%v): pass another --cache-dir", existing, err)}
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	switch {
	case free < FreeFail:
		return Result{"cache-dir", Fail, fmt.Sprintf("%s has %s free: the cache needs at least %s; free some space or pass a --cache-dir on a larger file system", dir, cli.Size(free), cli.Size(FreeFail))}
	case free < FreeWarn:
		return Result{"cache-dir", Warn, fmt.Sprintf("%s has only %s free: the cache will be small (it takes 80%% of the free space); free some space or pass a --cache-dir on a larger file system", dir, cli.Size(free))}
	}
	return Result{"cache-dir", OK, fmt.Sprintf("%s: %s free", dir, cli.Size(free))}
}

// unwrapPath drops the *fs.PathError's repeat of the path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
