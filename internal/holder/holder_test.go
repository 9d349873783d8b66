package holder

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockAndPort: the holder of a flock on a file and of a listening port,
// another process each time, is found and named.
func TestLockAndPort(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) is not installed")
	}
	f := filepath.Join(t.TempDir(), "state.db")
	os.WriteFile(f, nil, 0o600)
	cmd := exec.Command("flock", f, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && pid == 0; time.Sleep(20 * time.Millisecond) {
		pid = Lock(f)
	}
	// flock(1) takes the lock, then runs sleep in a child that inherits it.
	if pid == 0 {
		t.Fatal("the holder of the lock was not found")
	}
	if d := Describe(pid); !strings.Contains(d, "flock") && !strings.Contains(d, "sleep") {
		t.Errorf("the lock's holder is described as %q", d)
	}

	// Another process listening.
	py := exec.Command("python3", "-c", "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint(s.getsockname()[1],flush=True)\ntime.sleep(30)")
	out, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := py.Start(); err != nil {
		t.Skip("python3 is not installed")
	}
	defer func() { py.Process.Kill(); py.Wait() }()
	buf := make([]byte, 16)
	n, _ := out.Read(buf)
	port := strings.TrimSpace(string(buf[:n]))
	if got := Port("127.0.0.1:" + port); got != py.Process.Pid {
		t.Errorf("port %s is held by %d, want %d", port, got, py.Process.Pid)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := Port(ln.Addr().String()); got != 0 {
		t.Errorf("this process's own port was named as held by %d", got)
	}
	if got := Port("127.0.0.1:1"); got != 0 {
		t.Errorf("a port nobody listens on is held by %d", got)
	}
}
