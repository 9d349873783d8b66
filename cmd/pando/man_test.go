package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// run runs the CLI in process and returns its standard output.
func run(t *testing.T, args ...string) string {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("pando %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestManPagePerCommand: pando man writes a page for every command a user
// can run, each naming the command and saying what its help says.
func TestManPagePerCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man")
	out := run(t, "man", dir)
	root := newRootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var want []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		want = append(want, c)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() && s.Name() != "help" {
				walk(s)
			}
		}
	}
	walk(root)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(want) || out != fmt.Sprintf("%d man pages in %s\n", len(want), dir) {
		t.Errorf("%d pages for %d commands (%q)", len(ents), len(want), out)
	}
	for _, c := range want {
		name := strings.ReplaceAll(c.CommandPath(), " ", "-")
		b, err := os.ReadFile(filepath.Join(dir, name+".1"))
		if err != nil {
			t.Errorf("no page for %s: %v", c.CommandPath(), err)
			continue
		}
		page := string(b)
		roffName := strings.ReplaceAll(name, "-", `\-`)
		if !strings.HasPrefix(page, `.TH "`+strings.ToUpper(roffName)+`" 1`) || !strings.Contains(page, roffName+` \- `) {
			t.Errorf("%s.1 does not name %s:\n%s", name, c.CommandPath(), page)
		}
		for _, f := range []string{"--help"} {
			if !strings.Contains(page, strings.ReplaceAll(f, "-", `\-`)) {
				t.Errorf("%s.1 lacks %s", name, f)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "pando-doctor.1")); !strings.Contains(string(b), `\fB\-\-cache\-dir\fR \fIstring\fR`) {
		t.Errorf("pando-doctor.1 lacks its --cache-dir flag:\n%s", b)
	}
}

// TestCompletion: pando completion writes each shell's script, and the
// completions the scripts ask pando for name commands and bench's
// scenarios.
func TestCompletion(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_pando", "zsh": "#compdef pando", "fish": "complete -c pando",
	} {
		if out := run(t, "completion", shell); !strings.Contains(out, marker) {
			t.Errorf("pando completion %s lacks %q:\n%.300s", shell, marker, out)
		}
	}
	if out := run(t, "__complete", "doc"); !strings.Contains(out, "doctor\t") {
		t.Errorf("completing doc: %q, want doctor", out)
	}
	if out := run(t, "__complete", "bench", "ma"); !strings.Contains(out, "make") || strings.Contains(out, "read") {
		t.Errorf("completing bench ma: %q, want make alone", out)
	}
}
