// Package etcdrun runs a real etcd cluster on this machine, for tests and
// benchmarks: members of the system's etcd server (Debian's etcd-server)
// on loopback ports, with their data in a directory.
package etcdrun

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	dir     string
	bin     string
	members []*member
}

type member struct {
	name         string
	client, peer string // host:port
	cmd          *exec.Cmd
	done         chan struct{}
	log          *os.File
}

// ErrNoEtcd says that no etcd server is installed.
var ErrNoEtcd = fmt.Errorf("no etcd server is installed: run ./dev test, which installs it, or apt-get install etcd-server")

// Start starts an n-member cluster with its data in dir and waits (up to
// 30 s) until it has a leader. Close stops it.
func Start(dir string, n int) (*Cluster, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrNoEtcd
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	var initial []string
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i)}
		if m.client, err = freeAddr(); err != nil {
			return nil, err
		}
		if m.peer, err = freeAddr(); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	for i := range c.members {
		if err := c.start(i, strings.Join(initial, ",")); err != nil {
			c.Close()
			return nil, err
		}
	}
	if _, err := c.WaitLeader(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (c *Cluster) start(i int, initial string) error {
	m := c.members[i]
	args := []string{"--name", m.name, "--data-dir", filepath.Join(c.dir, m.name),
		"--listen-client-urls", "http://" + m.client, "--advertise-client-urls", "http://" + m.client,
		"--listen-peer-urls", "http://" + m.peer, "--initial-advertise-peer-urls", "http://" + m.peer,
		"--initial-cluster-token", "pando-test", "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
		"--heartbeat-interval", "50", "--election-timeout", "500"}
	if initial != "" {
		args = append(args, "--initial-cluster", initial, "--initial-cluster-state", "new")
	}
	log, err := os.OpenFile(filepath.Join(c.dir, m.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// The members end with the process that started them, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("cannot start etcd: %w", err)
	}
	m.cmd, m.log, m.done = cmd, log, make(chan struct{})
	go func() { cmd.Wait(); close(m.done) }()
	return nil
}

// Endpoints are the members' client addresses.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.client)
	}
	return out
}

// URL is the cluster's address as pando's --store takes it.
func (c *Cluster) URL() string { return "etcd://" + strings.Join(c.Endpoints(), ",") }

// Leader returns the index of the member that leads now (-1 if none).
func (c *Cluster) Leader() int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return -1
	}
	defer cli.Close()
	for i, m := range c.members {
		if m.cmd == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, m.client)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// WaitLeader waits (up to 30 s) until the cluster has a leader.
func (c *Cluster) WaitLeader() (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if l := c.Leader(); l >= 0 {
			return l, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("the etcd cluster has no leader after 30 s; member logs in %s", c.dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill ends member i with SIGKILL.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	m.log.Close()
	m.cmd = nil
}

// Restart starts member i again on its data.
func (c *Cluster) Restart(i int) error {
	return c.start(i, "")
}

// Close stops every member.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Kill(i)
	}
}
