// Package manpage writes man pages (roff, section 1) from a cobra command
// tree: one page per command, named as git names its own (pando-ns-mount.1
// for `pando ns mount`), from what the command's help says: its use line,
// short and long descriptions, flags, examples and subcommands.
package manpage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Header is what every page's title line says besides the command.
type Header struct {
	Section string // default "1"
	Source  string // e.g. "pando devel"
	Manual  string // e.g. "pando manual"
}

// Commands returns cmd and every command under it that a page is written
// for: those a user can run (not hidden, not deprecated, not help topics).
func Commands(cmd *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{cmd}
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			continue
		}
		out = append(out, Commands(c)...)
	}
	return out
}

// FileName is the name of cmd's page: "pando-ns-mount.1".
func FileName(cmd *cobra.Command, h Header) string {
	return strings.ReplaceAll(cmd.CommandPath(), " ", "-") + "." + section(h)
}

func section(h Header) string {
	if h.Section == "" {
		return "1"
	}
	return h.Section
}

// WriteTree writes a page for cmd and each command under it into dir
// (made if missing) and returns the files written.
func WriteTree(cmd *cobra.Command, dir string, h Header) ([]string, error) {
	// The commands cobra adds when it runs (help, completion) are there
	// whether or not it ran.
	cmd.Root().InitDefaultHelpCmd()
	cmd.Root().InitDefaultCompletionCmd()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot make %s: %w", dir, err)
	}
	var files []string
	for _, c := range Commands(cmd) {
		p := filepath.Join(dir, FileName(c, h))
		if err := os.WriteFile(p, Page(c, h), 0o644); err != nil {
			return files, fmt.Errorf("cannot write %s: %w", p, err)
		}
		files = append(files, p)
	}
	return files, nil
}

// Page renders cmd's page.
func Page(cmd *cobra.Command, h Header) []byte {
	cmd.InitDefaultHelpFlag()
	var b bytes.Buffer
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	fmt.Fprintf(&b, ".TH %s %s \"\" %s %s\n", quote(strings.ToUpper(name)), section(h), quote(h.Source), quote(h.Manual))
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", esc(name), esc(cmd.Short))
	b.WriteString(".SH SYNOPSIS\n")
	if cmd.Runnable() {
		fmt.Fprintf(&b, ".B %s\n", esc(cmd.UseLine()))
	}
	if cmd.HasAvailableSubCommands() {
		if cmd.Runnable() {
			b.WriteString(".br\n")
		}
		fmt.Fprintf(&b, ".B %s\n", esc(cmd.CommandPath()+" COMMAND [flags]"))
	}
	b.WriteString(".SH DESCRIPTION\n")
	desc := cmd.Long
	if desc == "" {
		desc = cmd.Short
	}
	b.WriteString(text(desc))
	if cmd.HasAvailableSubCommands() {
		b.WriteString(".SH COMMANDS\n")
		for _, c := range cmd.Commands() {
			if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
				continue
			}
			fmt.Fprintf(&b, ".TP\n.BR %s (%s)\n%s\n", esc(strings.ReplaceAll(c.CommandPath(), " ", "-")), section(h), esc(c.Short))
		}
	}
	flags(&b, "OPTIONS", cmd.NonInheritedFlags())
	flags(&b, "OPTIONS INHERITED FROM PARENT COMMANDS", cmd.InheritedFlags())
	if cmd.Example != "" {
		b.WriteString(".SH EXAMPLES\n.PP\n.nf\n.RS\n")
		b.WriteString(verbatim(cmd.Example))
		b.WriteString(".RE\n.fi\n")
	}
	var see []string
	if p := cmd.Parent(); p != nil {
		see = append(see, fmt.Sprintf(".BR %s (%s)", esc(strings.ReplaceAll(p.CommandPath(), " ", "-")), section(h)))
	}
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && !c.IsAdditionalHelpTopicCommand() {
			see = append(see, fmt.Sprintf(".BR %s (%s)", esc(strings.ReplaceAll(c.CommandPath(), " ", "-")), section(h)))
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range see {
			if i < len(see)-1 {
				s += " ,"
			}
			b.WriteString(s + "\n")
		}
	}
	return b.Bytes()
}

// flags writes a section listing fs's visible flags, sorted by name.
func flags(b *bytes.Buffer, title string, fs *pflag.FlagSet) {
	var all []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			all = append(all, f)
		}
	})
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	fmt.Fprintf(b, ".SH %s\n", title)
	for _, f := range all {
		varname, usage := pflag.UnquoteUsage(f)
		head := "\\fB\\-\\-" + esc(f.Name) + "\\fR"
		if f.Shorthand != "" && f.ShorthandDeprecated == "" {
			head = "\\fB\\-" + esc(f.Shorthand) + "\\fR, " + head
		}
		if varname != "" && f.NoOptDefVal == "" {
			head += " \\fI" + esc(varname) + "\\fR"
		}
		if !zeroDefault(f) {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(b, ".TP\n%s\n%s\n", head, esc(usage))
	}
}

// zeroDefault reports whether f's default goes without saying (pflag's
// rule, which it does not export).
func zeroDefault(f *pflag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]", "<nil>":
		return true
	}
	return false
}

// text renders help text: paragraphs (blank-line separated) as filled
// paragraphs, but lines that are indented (examples, tables) as they are.
func text(s string) string {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimSpace(s), "\n\n") {
		lines := strings.Split(para, "\n")
		indented := false
		for _, l := range lines {
			if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") || strings.Contains(l, "   ") {
				indented = true
			}
		}
		b.WriteString(".PP\n")
		if indented {
			b.WriteString(".nf\n" + verbatim(para) + ".fi\n")
			continue
		}
		for _, l := range lines {
			b.WriteString(line(esc(strings.TrimSpace(l))) + "\n")
		}
	}
	return b.String()
}

// verbatim escapes lines to be set as they are (between .nf and .fi).
func verbatim(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(line(esc(l)) + "\n")
	}
	return b.String()
}

// esc escapes roff's escape character and hyphens.
func esc(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}

// line keeps a text line from being read as a request: one that starts
// with a dot or an apostrophe gets a zero-width character first.
func line(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(esc(s), `"`, `\(dq`) + `"`
}
