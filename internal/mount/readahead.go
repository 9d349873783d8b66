package mount

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// readAheadKB is the kernel read-ahead asked for on the mount: enough
// 1 MiB requests in flight for the agent's own read-ahead to run behind.
const readAheadKB = 8 << 10

// raiseReadAhead sets the kernel's read-ahead for the mount at dir.
// The kernel offers a FUSE file system 128 KiB at INIT, and the INIT
// reply can only lower it, so sequential reads would reach the agent as
// 128 KiB requests; the mount's backing device info (BDI) in sysfs is the
// way up. It needs root; without it the mount works as before.
func raiseReadAhead(dir string, log *slog.Logger) {
	dev, err := mountDevice(dir)
	if err == nil {
		p := filepath.Join("/sys/class/bdi", dev, "read_ahead_kb")
		err = os.WriteFile(p, []byte(fmt.Sprint(readAheadKB)), 0)
	}
	if err != nil {
		log.Debug("cannot raise the kernel's read-ahead on the mount", "dir", dir, "err", err)
	}
}

// mountDevice returns the device number ("0:42") of the mount at dir,
// from /proc/self/mountinfo. It does not stat dir: that would leave the
// root's attributes in the kernel's cache (and hang on a dead mount).
func mountDevice(dir string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("reading the mount table: %w", err)
	}
	return deviceIn(string(b), dir)
}

// deviceIn finds dir's device in the text of a mountinfo file; the last
// mount at dir is the one on top.
func deviceIn(mountinfo, dir string) (string, error) {
	dev := ""
	for _, line := range strings.Split(mountinfo, "\n") {
		// ID parent major:minor root mount-point options ...
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == dir {
			dev = f[2]
		}
	}
	if dev == "" {
		return "", fmt.Errorf("%s is not in the mount table", dir)
	}
	return dev, nil
}
