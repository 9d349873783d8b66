package manpage

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func tree() *cobra.Command {
	root := &cobra.Command{Use: "tool", Short: "a tool", Long: "tool does things.\n.starts with a dot\n\n  indented   example\n  kept as is"}
	root.PersistentFlags().String("config", "", "the `file` to read")
	a := &cobra.Command{Use: "a ARG", Short: "does a", Run: func(*cobra.Command, []string) {}, Example: "  tool a x"}
	a.Flags().IntP("count", "n", 3, "how many")
	a.Flags().Bool("dry-run", false, "change nothing")
	b := &cobra.Command{Use: "b", Short: "groups c"}
	c := &cobra.Command{Use: "c", Short: `does c\with a backslash`, Run: func(*cobra.Command, []string) {}}
	h := &cobra.Command{Use: "h", Short: "hidden", Hidden: true, Run: func(*cobra.Command, []string) {}}
	b.AddCommand(c)
	root.AddCommand(a, b, h)
	return root
}

// TestWriteTree: a page per command a user can run (and the commands cobra
// adds: help is not one, completion is), none for a hidden one, each with
// its name, synopsis, flags with their defaults, and roff's special
// characters escaped.
func TestWriteTree(t *testing.T) {
	dir := t.TempDir()
	files, err := WriteTree(tree(), dir, Header{Source: "tool 1.0", Manual: "tool manual"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	slices.Sort(names)
	want := []string{"tool-a.1", "tool-b-c.1", "tool-b.1", "tool-completion-bash.1", "tool-completion-fish.1",
		"tool-completion-powershell.1", "tool-completion-zsh.1", "tool-completion.1", "tool.1"}
	if !slices.Equal(names, want) {
		t.Fatalf("pages %v, want %v", names, want)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a := read("tool-a.1")
	for _, w := range []string{".TH \"TOOL\\-A\" 1 \"\" \"tool 1.0\" \"tool manual\"\n", "tool\\-a \\- does a\n", ".B tool a ARG [flags]\n",
		"\\fB\\-n\\fR, \\fB\\-\\-count\\fR \\fIint\\fR\nhow many (default 3)\n", "\\fB\\-\\-dry\\-run\\fR\nchange nothing\n",
		".SH OPTIONS INHERITED FROM PARENT COMMANDS\n", "\\fB\\-\\-config\\fR \\fIfile\\fR\nthe file to read\n", ".SH EXAMPLES\n", "  tool a x\n"} {
		if !strings.Contains(a, w) {
			t.Errorf("tool-a.1 lacks %q:\n%s", w, a)
		}
	}
	root := read("tool.1")
	for _, w := range []string{"\\&.starts with a dot\n", ".nf\n  indented   example\n  kept as is\n.fi\n", ".BR tool\\-b (1)\n"} {
		if !strings.Contains(root, w) {
			t.Errorf("tool.1 lacks %q:\n%s", w, root)
		}
	}
	if strings.Contains(root, "hidden") {
		t.Errorf("tool.1 lists the hidden command:\n%s", root)
	}
	if c := read("tool-b-c.1"); !strings.Contains(c, `does c\ewith a backslash`) {
		t.Errorf("tool-b-c.1 does not escape the backslash:\n%s", c)
	}
	// groff, where it is installed, reads every page without a warning.
	if _, err := exec.LookPath("groff"); err == nil {
		for _, f := range files {
			out, err := exec.Command("groff", "-man", "-ww", "-z", f).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("groff on %s: %v %s", filepath.Base(f), err, out)
			}
		}
	}
}
