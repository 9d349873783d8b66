// Package etcdtest runs a real etcd cluster for tests: members of the
// system's etcd server (Debian's etcd-server) on loopback ports, in a
// temporary directory, stopped when the test ends.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       *testing.T
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

// Binary finds the etcd server, or fails the test saying how to get it
// (`./dev test` installs it).
func Binary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal("these tests run a real etcd cluster and no etcd server is installed: run them with ./dev test, which installs it, or apt-get install etcd-server")
	}
	return bin
}

// Start starts an n-member cluster and waits until it has a leader.
func Start(t *testing.T, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir(), bin: Binary(t)}
	var initial []string
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), client: freeAddr(t), peer: freeAddr(t)}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	t.Cleanup(c.stopAll)
	for i := range c.members {
		c.start(i, strings.Join(initial, ","))
	}
	c.WaitLeader()
	return c
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (c *Cluster) start(i int, initial string) {
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
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("cannot start etcd: %v", err)
	}
	m.cmd, m.log, m.done = cmd, log, make(chan struct{})
	go func() { cmd.Wait(); close(m.done) }()
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

func (c *Cluster) client() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	return cli
}

// Leader returns the index of the member that leads now (-1 if none).
func (c *Cluster) Leader() int {
	cli := c.client()
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
func (c *Cluster) WaitLeader() int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if l := c.Leader(); l >= 0 {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the etcd cluster has no leader after 30 s; member logs in %s", c.dir)
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
func (c *Cluster) Restart(i int) {
	c.start(i, "")
}

func (c *Cluster) stopAll() {
	for i := range c.members {
		c.Kill(i)
	}
}
