package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/audit"
)

// TestAuditCmd: pando audit reads the logs of a pando up state directory
// (controller and shares), filters them, prints a table or JSON lines,
// warns of a line that is no record, and says in one sentence when it
// finds no log.
func TestAuditCmd(t *testing.T) {
	state := t.TempDir()
	for dir, recs := range map[string][]audit.Record{
		"controller": {
			{Who: "alice@uva", Action: "resolve", Path: "/uva/data", Rights: "rl", Result: audit.Granted, Time: time.Now().Add(-2 * time.Hour)},
			{Who: "admin@uva", Action: "acl-set", Path: "/uva/data/x", Result: audit.Granted, Detail: "entries set: bob:r"},
		},
		"shares": {{Who: "alice@uva", Action: "open", Path: "d/f", Rights: "w", Result: audit.Refused, Detail: "alice@uva lacks the write right (w) on /d/f"}},
	} {
		if err := os.MkdirAll(filepath.Join(state, dir), 0o700); err != nil {
			t.Fatal(err)
		}
		l, err := audit.Open(filepath.Join(state, dir, audit.FileName), audit.Options{Domain: "uva"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			l.Write(r)
		}
		l.Close()
	}
	f, _ := os.OpenFile(filepath.Join(state, "shares", audit.FileName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("edited by hand\n")
	f.Close()

	out := run(t, "audit", "--state", state)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "shares/audit.jsonl:2: skipped") || !strings.HasPrefix(lines[1], "TIME") {
		t.Fatalf("table:\n%s", out)
	}
	if !strings.Contains(lines[2], "resolve") || !strings.Contains(out, "lacks the write right (w) on /d/f") {
		t.Fatalf("table not oldest first:\n%s", out)
	}
	out = run(t, "audit", "--state", state, "--who", "alice", "--since", "1h", "--json")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"action":"open"`) || !strings.Contains(lines[1], `"result":"refused"`) {
		t.Fatalf("--who alice --since 1h --json:\n%s", out)
	}
	if out := run(t, "audit", "--state", state, "--path", "/uva/data", "--action", "acl-set", "--json"); strings.Count(out, "\n{") != 1 || !strings.Contains(out, `"path":"/uva/data/x"`) {
		t.Fatalf("--path /uva/data --action acl-set:\n%s", out)
	}

	root := newRootCmd()
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	empty := t.TempDir()
	root.SetArgs([]string{"audit", "--state", empty})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "no audit log (audit.jsonl) in "+empty+": give the state directory") {
		t.Fatalf("no log: %v", err)
	}
	root.SetArgs([]string{"audit", "--state", state, "--since", "yesterday"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "neither a duration") {
		t.Fatalf("--since yesterday: %v", err)
	}
}

// TestAuditCmdDefaults: without --state, pando audit reads the logs of
// pando up in ./.pando and of pando share beside the client
// configuration, and says where it looked when there are none.
func TestAuditCmdDefaults(t *testing.T) {
	cwd, cfgDir := t.TempDir(), t.TempDir()
	t.Chdir(cwd)
	t.Setenv("PANDO_CONFIG", filepath.Join(cfgDir, "config.json"))
	root := newRootCmd()
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	root.SetArgs([]string{"audit"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no audit log (audit.jsonl) in .pando or "+filepath.Join(cfgDir, "shares")) {
		t.Fatalf("no log anywhere: %v", err)
	}
	for _, dir := range []string{filepath.Join(cwd, ".pando", "controller"), filepath.Join(cfgDir, "shares")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		l, err := audit.Open(filepath.Join(dir, audit.FileName), audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		l.Write(audit.Record{Who: "alice@uva", Action: "resolve", Result: audit.Granted, Detail: dir})
		l.Close()
	}
	out := run(t, "audit", "--json")
	if strings.Count(out, "\n") != 2 {
		t.Fatalf("pando audit read %q, want the record of each default place", out)
	}
}
