// Package holder finds the process that holds a resource pando could not
// take (a locked state file, a port), so that the message can name it.
// It reads /proc; where that fails it finds nobody, and the message goes
// without a name.
package holder

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Describe names process pid for a message: "PID 1234 (pando up ...)".
func Describe(pid int) string {
	if pid <= 0 {
		return ""
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Fields(strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "))
	if len(args) > 0 {
		args[0] = filepath.Base(args[0])
	}
	line := strings.Join(args, " ")
	if len(line) > 80 {
		line = line[:77] + "..."
	}
	if line == "" {
		return fmt.Sprintf("PID %d", pid)
	}
	return fmt.Sprintf("PID %d (%s)", pid, line)
}

// Lock returns the process holding a lock (flock or fcntl) on the file at
// path, or 0.
func Lock(path string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%d", st.Ino)
	for _, line := range strings.Split(string(b), "\n") {
		// 1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF
		f := strings.Fields(line)
		if len(f) < 6 || f[1] == "->" {
			continue
		}
		dev := f[5]
		if !strings.HasSuffix(dev, want) {
			continue
		}
		if maj, min, ok := parseDev(strings.TrimSuffix(dev, want)); !ok || maj != major(st.Dev) || min != minor(st.Dev) {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid != os.Getpid() {
			return pid
		}
	}
	return 0
}

func parseDev(s string) (uint64, uint64, bool) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, false
	}
	maj, err1 := strconv.ParseUint(a, 16, 32)
	min, err2 := strconv.ParseUint(b, 16, 32)
	return maj, min, err1 == nil && err2 == nil
}

func major(dev uint64) uint64 { return (dev >> 8) & 0xfff }
func minor(dev uint64) uint64 { return (dev & 0xff) | ((dev >> 12) & 0xfff00) }

// Port returns the process listening on the TCP address addr
// (host:port), or 0.
func Port(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(p)
	if err != nil || port == 0 {
		return 0
	}
	inodes := map[string]bool{}
	for inode, p := range listening() {
		if p == port {
			inodes[inode] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	for _, pe := range procs {
		pid, err := strconv.Atoi(pe.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[t] {
				return pid
			}
		}
	}
	return 0
}

// listening returns the TCP sockets that listen, by their fd link name
// ("socket:[INODE]"), with their ports.
func listening() map[string]int {
	out := map[string]int{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st ... inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // LISTEN
				continue
			}
			_, lp, ok := strings.Cut(f[1], ":")
			if n, err := strconv.ParseUint(lp, 16, 16); ok && err == nil {
				out["socket:["+f[9]+"]"] = int(n)
			}
		}
	}
	return out
}

// Listens returns the TCP ports process pid listens on, and how many
// sockets it holds in all (so that a caller can tell "none" from "could
// not see").
func Listens(pid int) (ports []int, sockets int) {
	ln := listening()
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil || !strings.HasPrefix(t, "socket:[") {
			continue
		}
		sockets++
		if p, ok := ln[t]; ok {
			ports = append(ports, p)
		}
	}
	return ports, sockets
}

// By returns " by PID N (command)" for a message about something in use,
// or "" when pid is 0.
func By(pid int) string {
	if pid <= 0 {
		return ""
	}
	return " by " + Describe(pid)
}

// InUse returns " (held by PID N (command))" when err says addr is in
// use and its listener is found, or "".
func InUse(err error, addr string) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	if pid := Port(addr); pid > 0 {
		return " (held by " + Describe(pid) + ")"
	}
	return ""
}
