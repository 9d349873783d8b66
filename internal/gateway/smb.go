package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"pando.dev/pando/internal/mount"
)

// SMB: the gateway runs Debian's Samba (smbd and samba-dcerpcd), with a
// configuration of its own, over one FUSE mount per SMB user of that
// user's own vfs (the gateway acting for the user, as for every other
// protocol). Samba's share of the domain has path MNT/%U/<domain>, and
// that of each export (a folder served as a share of its own) path
// MNT/%U/<global path>: a user who signed in reaches only their own
// mount, and every request there is made at the shares with their
// rights. Samba acts as root
// inside the mount (force user): the mount admits only the uid that
// mounted it, and pando's rights, not Unix modes, decide. Samba's users
// exist for Samba alone: the passwd file it sees is the gateway's
// (nss_wrapper, preloaded into Samba's processes only), so no account of
// the host is made or used. See docs/gateways.md.

// SMBConfig configures the SMB front end.
type SMBConfig struct {
	// Listen is host:port (port 0: a free one is picked).
	Listen string
	// Passwords is the SMB password file (pando serve smb-passwd).
	Passwords string
	// Encrypt is Samba's "server smb encrypt": required (the default)
	// or desired.
	Encrypt string
	// Exports are folders served as shares of their own, beside the
	// domain's share (ParseSMBExports).
	Exports []SMBExport
}

// SMB is a running Samba in front of a gateway.
type SMB struct {
	g    *Gateway
	cfg  SMBConfig
	dir  string // the gateway's smb directory
	addr string

	mu      sync.Mutex
	mounts  map[string]*mount.Mount
	passwd  *secretFile[*smbPasswd]
	applied *smbPasswd // the version of the password file served
	procs   []*exec.Cmd
	exited  chan struct{} // closed when smbd ends
	stop    chan struct{}
	wg      sync.WaitGroup
}

// Samba's programs, as Debian installs them.
var (
	smbdPath    = "/usr/sbin/smbd"
	dcerpcdPath = "/usr/libexec/samba/samba-dcerpcd"
)

// nssWrapper finds the nss_wrapper library (Debian's libnss-wrapper).
func nssWrapper() string {
	m, _ := filepath.Glob("/usr/lib/*/libnss_wrapper.so")
	if len(m) == 0 {
		m, _ = filepath.Glob("/usr/lib*/libnss_wrapper.so")
	}
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// StartSMB starts Samba on cfg.Listen, with a mount for each user of
// the password file.
func (g *Gateway) StartSMB(cfg SMBConfig) (*SMB, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the SMB gateway runs Samba and a FUSE mount per user, which need root: run it as root")
	}
	for _, p := range []string{smbdPath, dcerpcdPath} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("the SMB gateway runs Samba, and %s is missing: install it (apt-get install samba libnss-wrapper)", p)
		}
	}
	nss := nssWrapper()
	if nss == "" {
		return nil, errors.New("the SMB gateway needs nss_wrapper to give Samba its users without host accounts: install it (apt-get install libnss-wrapper)")
	}
	if err := checkSMBExports(g.Domain(), cfg.Exports); err != nil {
		return nil, err
	}
	if cfg.Encrypt == "" {
		cfg.Encrypt = "required"
	}
	if cfg.Encrypt != "required" && cfg.Encrypt != "desired" {
		return nil, fmt.Errorf("--encrypt %q: give required or desired", cfg.Encrypt)
	}
	host, port, err := net.SplitHostPort(cfg.Listen)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		return nil, fmt.Errorf("--listen %q: give an IP address and a port, e.g. 127.0.0.1:445", cfg.Listen)
	}
	if port == "0" {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		ln.Close()
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return nil, fmt.Errorf("--listen %q: the port must be a number from 1 to 65535", cfg.Listen)
	}
	dir, err := filepath.Abs(filepath.Join(g.cfg.Cache.Dir, "smb"))
	if err != nil {
		return nil, err
	}
	if err := confSafe(dir); err != nil {
		return nil, fmt.Errorf("the gateway's cache directory: %w", err)
	}
	s := &SMB{g: g, cfg: cfg, dir: dir, addr: net.JoinHostPort(host, port), mounts: map[string]*mount.Mount{},
		passwd: openSMBPasswd(cfg.Passwords), exited: make(chan struct{}), stop: make(chan struct{})}
	s.passwd.tell(g.cfg.Log)
	for _, d := range []string{"mnt", "samba", "samba/private", "samba/lock", "samba/state", "samba/cache", "samba/pid", "samba/ncalrpc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("the gateway's cache directory: %w", err)
		}
	}
	// Samba's processes left by a gateway that was killed (a
	// connection's smbd outlives its parent) end now; and a pid file
	// they left would stop this Samba.
	killLeftovers(filepath.Join(dir, "samba"))
	if ents, err := os.ReadDir(filepath.Join(dir, "samba/pid")); err == nil {
		for _, e := range ents {
			os.Remove(filepath.Join(dir, "samba/pid", e.Name()))
		}
	}
	if err := os.WriteFile(s.conf(), []byte(smbConf(dir, g.Domain(), ip, port, cfg.Encrypt, cfg.Exports)), 0o600); err != nil {
		return nil, err
	}
	if err := s.sync(); err != nil {
		s.Close()
		return nil, err
	}
	env := append(os.Environ(), "LD_PRELOAD="+nss, "NSS_WRAPPER_PASSWD="+filepath.Join(dir, "samba/passwd"),
		"NSS_WRAPPER_GROUP="+filepath.Join(dir, "samba/group"))
	logf, err := os.OpenFile(filepath.Join(dir, "samba/samba.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		s.Close()
		return nil, err
	}
	defer logf.Close()
	common := []string{"--foreground", "--no-process-group", "--debug-stdout", "--configfile=" + s.conf()}
	smbd := exec.Command(smbdPath, common...)
	dcerpcd := exec.Command(dcerpcdPath, append(common, "--libexec-rpcds")...)
	for i, c := range []*exec.Cmd{smbd, dcerpcd} {
		c.Env, c.Stdout, c.Stderr = env, logf, logf
		// One process group, which Close ends whole; and each ends if
		// the gateway dies without a word.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if i > 0 {
			c.SysProcAttr.Pgid = smbd.Process.Pid
		}
		if err := c.Start(); err != nil {
			s.Close()
			return nil, fmt.Errorf("starting Samba: %w", err)
		}
		s.procs = append(s.procs, c)
		if i == 0 {
			os.WriteFile(filepath.Join(dir, "samba/pgid"), []byte(strconv.Itoa(smbd.Process.Pid)), 0o600)
			go func() { _ = smbd.Wait(); close(s.exited) }()
		} else {
			go func() { _ = c.Wait() }()
		}
	}
	if err := s.waitListening(30 * time.Second); err != nil {
		s.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.watch()
	return s, nil
}

// Addr is the address Samba listens on.
func (s *SMB) Addr() string { return s.addr }

// Users are the SMB users served (with a mount).
func (s *SMB) Users() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.mounts))
}

// Exports are the folders served as shares of their own.
func (s *SMB) Exports() []SMBExport { return slices.Clone(s.cfg.Exports) }

// Exited is closed when smbd has ended on its own.
func (s *SMB) Exited() <-chan struct{} { return s.exited }

func (s *SMB) conf() string { return filepath.Join(s.dir, "samba/smb.conf") }

// waitListening waits until smbd takes connections.
func (s *SMB) waitListening(limit time.Duration) error {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		select {
		case <-s.exited:
			return fmt.Errorf("Samba ended at start: %s", s.logTail())
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("Samba does not listen on %s after %s: %s", s.addr, limit, s.logTail())
}

// logTail is the last lines Samba logged, on one line.
func (s *SMB) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "samba/samba.log"))
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	lines = lines[max(0, len(lines)-4):]
	return string(bytes.Join(lines, []byte(" | ")))
}

// watch follows the password file: a user added is mounted and given to
// Samba, one removed is taken from Samba and unmounted.
func (s *SMB) watch() {
	defer s.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.sync(); err != nil {
				s.g.cfg.Log.Warn("the SMB password file", "err", err)
			}
		}
	}
}

// sync makes Samba's users and the mounts those of the password file.
func (s *SMB) sync() error {
	pw, err := s.passwd.load()
	if err != nil {
		return err
	}
	s.mu.Lock()
	same := pw == s.applied
	s.mu.Unlock()
	if same {
		return nil
	}
	want := map[string]bool{}
	for _, u := range pw.users {
		want[u.Name] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for name := range s.mounts {
		if !want[name] {
			gone = append(gone, name)
		}
	}
	var served []SMBUser
	for _, u := range pw.users {
		if s.mounts[u.Name] == nil {
			if err := s.mountLocked(u.Name); err != nil {
				s.g.cfg.Log.Warn("an SMB user is not served", "user", u.Name, "err", err)
				continue
			}
		}
		served = append(served, u)
	}
	// Samba learns of a user once the mount is up, and forgets one
	// before it goes.
	if err := writeSambaUsers(filepath.Join(s.dir, "samba"), served, pw.raw); err != nil {
		return err
	}
	for _, name := range gone {
		s.unmountLocked(name)
	}
	s.applied = pw
	return nil
}

// mountLocked mounts user's vfs at mnt/<user>.
func (s *SMB) mountLocked(user string) error {
	d := filepath.Join(s.dir, "mnt", user)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	v, err := s.g.Acquire(context.Background(), user)
	if err != nil {
		return err
	}
	m, err := mount.Start(v, d, mount.Options{Log: s.g.cfg.Log.With("smb-user", user)})
	if err != nil {
		s.g.Release(user)
		return err
	}
	s.mounts[user] = m
	return nil
}

func (s *SMB) unmountLocked(user string) {
	if m := s.mounts[user]; m != nil {
		if err := m.Unmount(); err != nil {
			s.g.cfg.Log.Warn("unmounting an SMB user's mount", "user", user, "err", err)
		}
		delete(s.mounts, user)
		s.g.Release(user)
	}
}

// Close ends Samba (its whole process group) and unmounts every mount.
func (s *SMB) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
	if len(s.procs) > 0 {
		pg := s.procs[0].Process.Pid
		_ = syscall.Kill(-pg, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
		}
		// What is left of the group (connections' processes, RPC
		// helpers) ends now.
		_ = syscall.Kill(-pg, syscall.SIGKILL)
		s.procs = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for user := range s.mounts {
		s.unmountLocked(user)
	}
}

// killLeftovers ends the processes of the Samba an earlier gateway
// started in sd: those of the process group it recorded that still write
// to its log.
func killLeftovers(sd string) {
	b, err := os.ReadFile(filepath.Join(sd, "pgid"))
	pg, _ := strconv.Atoi(string(b))
	if err != nil || pg <= 1 {
		return
	}
	logPath := filepath.Join(sd, "samba.log")
	for i := 0; i < 50; i++ {
		left := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if g, err := syscall.Getpgid(pid); err != nil || g != pg {
				continue
			}
			fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
			for _, fd := range fds {
				if t, _ := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); t == logPath {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					left++
					break
				}
			}
		}
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Remove(filepath.Join(sd, "pgid"))
}
