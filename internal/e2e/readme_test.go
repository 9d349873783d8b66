package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// walkthroughs are the README sections whose shell blocks TestREADME runs.
var walkthroughs = []string{"## Five minutes with pando", "## The mount"}

// TestREADME runs the README's walkthroughs literally, in order, in one
// shell with a scratch HOME, from the repository's root (as a newcomer
// would after cloning): every command must succeed, and print what its
// comment says (`# → TEXT`), or fail with what it says (`# refused:
// TEXT`); whitespace runs compare as one space.
func TestREADME(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script, steps := walkthroughScript(t, string(readme))
	if steps < 10 {
		t.Fatalf("found %d checked steps in the README's walkthroughs; the sections %v moved?", steps, walkthroughs)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(cleanEnv(), "HOME="+home, "PATH="+os.Getenv("PATH"))
	// Go's caches stay where they are (a newcomer's HOME has its own).
	for _, v := range []string{"GOPATH", "GOMODCACHE", "GOCACHE"} {
		if out, err := exec.Command("go", "env", v).Output(); err == nil {
			cmd.Env = append(cmd.Env, v+"="+strings.TrimSpace(string(out)))
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// Whatever the walkthrough left running in its process group.
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	exec.Command("fusermount3", "-u", "-z", filepath.Join(home, "grid", "mnt")).Run()
	var failed []string
	passed := 0
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "README-FAIL "):
			failed = append(failed, strings.TrimPrefix(line, "README-FAIL "))
		case strings.HasPrefix(line, "README-OK "):
			passed++
		}
	}
	for _, f := range failed {
		t.Error(strings.ReplaceAll(f, `\n`, "\n    "))
	}
	if err != nil || passed != steps {
		t.Errorf("%d of %d steps passed (the walkthrough ended: %v); its output:\n%s", passed, steps, err, out.String())
	}
}

// cleanEnv is the environment without what would point the walkthrough
// at another pando (a configuration, XDG directories).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PANDO_CONFIG" || strings.HasPrefix(k, "XDG_") || k == "HOME" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

var annotation = regexp.MustCompile(`\s+#\s*(→|refused:)\s*(.*)$`)

// walkthroughScript turns the walkthroughs' shell blocks into one bash
// script that runs each command as written and reports every checked
// step as README-OK or README-FAIL; it returns the script and the number
// of steps.
func walkthroughScript(t *testing.T, readme string) (string, int) {
	var b strings.Builder
	b.WriteString(`set -u
trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT
norm() { printf '%s' "$1" | tr -s ' \t\n' '   ' | sed 's/^ //; s/ $//'; }
check() { # N RC OUT MODE WANT CMD
	local got; got=$(norm "$3")
	local want; want=$(norm "$5")
	local esc; esc=$(printf '%s' "$3" | sed ':a;N;$!ba;s/\n/\\n/g')
	if [ "$4" = refused ] && [ "$2" -eq 0 ]; then echo "README-FAIL step $1: $6: succeeded, the README says it is refused with: $5"; return; fi
	if [ "$4" != refused ] && [ "$2" -ne 0 ]; then echo "README-FAIL step $1: $6: exit $2: $esc"; return; fi
	case "$got" in *"$want"*) echo "README-OK $1";; *) echo "README-FAIL step $1: $6: printed: $esc\n  the README says: $5";; esac
}
`)
	steps := 0
	for _, section := range walkthroughs {
		i := strings.Index(readme, "\n"+section+"\n")
		if i < 0 {
			t.Fatalf("the README has no section %q", section)
		}
		body := readme[i+len(section)+2:]
		if j := strings.Index(body, "\n## "); j >= 0 {
			body = body[:j]
		}
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(body, -1) {
			for _, line := range strings.Split(block[1], "\n") {
				trimmed := strings.TrimSpace(line)
				if trimmed == "" || strings.HasPrefix(trimmed, "#") {
					continue
				}
				cmdText, mode, want := trimmed, "ok", ""
				if m := annotation.FindStringSubmatchIndex(trimmed); m != nil {
					cmdText = strings.TrimSpace(trimmed[:m[0]])
					mode, want = map[string]string{"→": "prints", "refused:": "refused"}[trimmed[m[2]:m[3]]], trimmed[m[4]:m[5]]
				} else if k := strings.Index(trimmed, " #"); k >= 0 {
					cmdText = strings.TrimSpace(trimmed[:k])
				}
				if strings.HasSuffix(cmdText, "&") {
					b.WriteString(cmdText + "\n")
					continue
				}
				steps++
				if mode == "ok" {
					// In the shell itself (an export, a cd, a kill %1 of
					// a job stay in force); only its exit status is checked.
					fmt.Fprintf(&b, "%s\ncheck %d $? '' ok '' %s\n", cmdText, steps, shellQuote(cmdText))
					continue
				}
				fmt.Fprintf(&b, "out=$( { %s ; } 2>&1 ); check %d $? \"$out\" %s %s %s\n", cmdText, steps, mode, shellQuote(want), shellQuote(cmdText))
			}
		}
	}
	return b.String(), steps
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
