package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/manpage"
)

// newManCmd is `pando man DIR`: the man pages, from the commands' help.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "Write a man page per command (pando.1, pando-ls.1, pando-ns-mount.1...) into DIR",
		Long: `man writes pando's man pages, one per command, made from the commands' own
help, into DIR (made if missing). Read one with man -l DIR/pando-mount.1, or
install them where man looks (for example /usr/local/share/man/man1).`,
		Example: `  pando man ./man && man -l ./man/pando-doctor.1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			version := strings.TrimSuffix(strings.SplitN(cli.VersionString(), " (", 2)[0], " ")
			files, err := manpage.WriteTree(cmd.Root(), args[0], manpage.Header{Source: version, Manual: "pando manual"})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d man pages in %s\n", len(files), args[0])
			return nil
		},
	}
}
