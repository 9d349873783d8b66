package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	m := parse("share.recall.before-ack, vfs.writeback@3,,bad@x")
	if m["share.recall.before-ack"] != 1 || m["vfs.writeback"] != 3 || m["bad"] != 1 || len(m) != 3 {
		t.Fatalf("parse: %v", m)
	}
	if parse("") != nil {
		t.Fatal("empty spec arms points")
	}
}

func TestUnarmedDoesNothing(t *testing.T) {
	armed = map[string]int{"other": 1}
	defer func() { armed = nil }()
	Crash("not-armed") // must return
}

// TestCrashAtNthHit runs itself in a child armed to crash at the second
// hit, and checks the child was killed there and not before.
func TestCrashAtNthHit(t *testing.T) {
	if os.Getenv("FAULT_CHILD") == "1" {
		Crash("p")
		fmt.Println("after first")
		Crash("p")
		fmt.Println("after second")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashAtNthHit$")
	cmd.Env = append(os.Environ(), "FAULT_CHILD=1", Env+"=p@2")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "after first") || strings.Contains(string(out), "after second") {
		t.Fatalf("child crashed at the wrong hit:\n%s", out)
	}
}
