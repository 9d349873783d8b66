package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/wan"
)

// The walk's peers: sshfs and rclone mount (its sftp backend, with
// --vfs-cache-mode full) reading the same tree from a key-only sshd on a
// loopback port, through the same link emulator at the same RTT. They run
// where Debian's sshfs, rclone and openssh-server are installed; the
// bench starts its own sshd (its own host key, config and authorized key,
// in the bench's directory) and stops it after.

// sshServer is an sshd the bench started.
type sshServer struct {
	cmd  *exec.Cmd
	addr string
	user string
	key  string // the client's private key
}

const sshdPath = "/usr/sbin/sshd"

// startSSHD starts a key-only sshd on a free loopback port, its files in dir.
func startSSHD(dir string) (*sshServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	hostKey, key := filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "client_ed25519")
	for _, k := range []string{hostKey, key} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ssh-keygen: %w: %s", err, out)
		}
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		return nil, err
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, pub, 0o600); err != nil {
		return nil, err
	}
	// sshd needs its privilege separation directory, which Debian's
	// service makes at boot.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, fmt.Errorf("sshd's /run/sshd: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(dir, "sshd_config")
	text := strings.Join([]string{
		"ListenAddress " + addr,
		"HostKey " + hostKey,
		"AuthorizedKeysFile " + authorized,
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"AllowUsers " + u.Username,
		"UsePAM no",
		"StrictModes no",
		"PidFile none",
		"MaxStartups 64",
		"LogLevel ERROR",
		"Subsystem sftp internal-sftp",
	}, "\n") + "\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", conf)
	cmd.Stderr = &tailBuffer{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sshd: %w", err)
	}
	s := &sshServer{cmd: cmd, addr: addr, user: u.Username, key: key}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("sshd did not listen on %s within 10 s: %s", addr, cmd.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *sshServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last 4 KiB written to it (a server's log).
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }

// fuseClient is a FUSE file system a peer's process serves at mnt.
type fuseClient struct {
	cmd    *exec.Cmd
	mnt    string
	log    *tailBuffer
	exited chan struct{}
}

// startFUSE runs argv (a program that serves a FUSE mount at mnt in the
// foreground) and waits until mnt is mounted.
func startFUSE(mnt string, argv ...string) (*fuseClient, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	log := &tailBuffer{}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	f := &fuseClient{cmd: cmd, mnt: mnt, log: log, exited: make(chan struct{})}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(f.exited) }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if mount.Mounted(mnt) {
			return f, nil
		}
		select {
		case <-f.exited:
			return nil, fmt.Errorf("%s exited before mounting (%v): %s", argv[0], waitErr, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("%s did not mount %s within 20 s: %s", argv[0], mnt, log)
		}
	}
}

// stop unmounts and ends the peer's process.
func (f *fuseClient) stop() {
	_ = exec.Command("fusermount3", "-u", "-z", f.mnt).Run()
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(5 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.exited
	}
}

// walkPeers walks tree (already built at dir on local disk) through sshfs
// and rclone mount at rtt, as the walk scenario walks pando: first walk,
// again at once, again after 3 s (pando's default window). It returns
// no rows where the peers are not installed, and none for a peer that
// failed (the progress line says why; TestBenchQuick checks in CI that
// both ran).
func walkPeers(ctx context.Context, o Options, work, dir string, tree walkTree, rtt time.Duration) ([]Row, error) {
	var peers []string
	for _, p := range []string{"sshfs", "rclone"} {
		if _, err := exec.LookPath(p); err == nil {
			peers = append(peers, p)
		}
	}
	if _, err := os.Stat(sshdPath); err != nil || len(peers) == 0 {
		return nil, nil
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		return nil, nil
	}
	srv, err := startSSHD(filepath.Join(work, "sshd"))
	if err != nil {
		return nil, fmt.Errorf("walk peers: %w", err)
	}
	defer srv.stop()
	px, err := wan.Listen("127.0.0.1:0", srv.addr, wan.Config{RTT: rtt, Rate: o.Rate})
	if err != nil {
		return nil, fmt.Errorf("walk peers: link emulator: %w", err)
	}
	defer px.Close()
	host, port, _ := net.SplitHostPort(px.Addr())
	wait := 3 * time.Second
	if o.Quick {
		wait = time.Second
	}
	var rows []Row
	for _, p := range peers {
		mnt := filepath.Join(work, "peer-"+p)
		var argv []string
		var name string
		switch p {
		case "sshfs":
			name = "sshfs"
			argv = []string{"sshfs", "-f", "-p", port, srv.user + "@" + host + ":" + dir, mnt,
				"-o", "IdentityFile=" + srv.key, "-o", "StrictHostKeyChecking=no",
				"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"}
		case "rclone":
			name = "rclone mount (sftp, --vfs-cache-mode full)"
			argv = []string{"rclone", "mount", ":sftp:" + dir, mnt, "--config", "/dev/null",
				"--sftp-host", host, "--sftp-port", port, "--sftp-user", srv.user,
				"--sftp-key-file", srv.key, "--sftp-disable-hashcheck",
				"--vfs-cache-mode", "full", "--cache-dir", filepath.Join(work, "rclone-cache")}
		}
		fc, err := startFUSE(mnt, argv...)
		if err != nil {
			o.say("walk: %s left out: %v", name, err)
			continue
		}
		cs := fmt.Sprintf("%s, rtt %v", name, rtt)
		look := func(what string) error {
			o.say("walk: %d files in %d directories, rtt %v, %s: %s", tree.total(), tree.dirs(), rtt, name, what)
			t0 := time.Now()
			n, err := walkFiles(mnt)
			took := time.Since(t0)
			if err == nil && n != tree.total() {
				err = fmt.Errorf("%s saw %d of %d files", name, n, tree.total())
			}
			if err != nil {
				return fmt.Errorf("walk %s, %s: %w", name, what, err)
			}
			rows = append(rows, Row{Scenario: "walk", Case: cs, Metric: what, Value: took.Seconds() * 1000, Unit: "ms",
				Note: fmt.Sprintf("%d files, %d directories (reference)", tree.total(), tree.dirs())})
			return nil
		}
		err = look("first walk")
		if err == nil {
			err = look("again at once")
		}
		if err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(wait + 500*time.Millisecond):
				err = look("after the window")
			}
		}
		fc.stop()
		if err != nil {
			// A reference that fails loses its own figures, not pando's.
			if l := fc.log.String(); l != "" {
				err = fmt.Errorf("%w (%s said: %s)", err, p, l)
			}
			o.say("walk: %s left out: %v", name, err)
		}
	}
	return rows, nil
}
