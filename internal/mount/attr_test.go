package mount

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"pando.dev/pando/internal/client"
)

// A share that cannot be reached is EHOSTUNREACH, also when the cause
// carries an errno of its own (a refused dial: ECONNREFUSED).
func TestErrnoUnreachable(t *testing.T) {
	refused := &client.UnreachableError{Share: "alpha", Err: fmt.Errorf("dial: %w", syscall.ECONNREFUSED)}
	if got := errno(refused); got != syscall.EHOSTUNREACH {
		t.Errorf("errno of a refused share: %v, want EHOSTUNREACH", got)
	}
	if got := errno(fmt.Errorf("read: %w", refused)); got != syscall.EHOSTUNREACH {
		t.Errorf("errno of a wrapped unreachable share: %v, want EHOSTUNREACH", got)
	}
	if got := errno(fmt.Errorf("x: %w", syscall.ECONNREFUSED)); got != syscall.ECONNREFUSED {
		t.Errorf("errno of another error: %v", got)
	}
}

// dying tells a thread with SIGKILL pending from one merely signalled;
// a thread that is gone is dying too.
func TestDying(t *testing.T) {
	if dying(uint32(os.Getpid())) {
		t.Fatal("the test itself is dying")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep here:", err)
	}
	pid := uint32(cmd.Process.Pid)
	if dying(pid) {
		t.Error("a sleeping process counts as dying")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !dying(pid) {
		t.Error("a process that was killed and reaped does not count as dying")
	}
}
