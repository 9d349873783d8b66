package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
)

// newUserCredsCmds are pando user passwd and pando user s3-key: the
// credentials the controller keeps for gateways.
func newUserCredsCmds(g *cli.Globals) []*cobra.Command {
	passwd := &cobra.Command{
		Use:   "passwd [NAME]",
		Short: "Set your password for the gateways (or NAME's, as an administrator), read from standard input",
		Long: "Set the password you sign in to gateways with (HTTP Basic authentication, over TLS). The\n" +
			"controller keeps a slow hash of it; gateways ask it to check. Without NAME, your own.",
		Args: cobra.MaximumNArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			fmt.Fprint(cmd.ErrOrStderr(), "new password: ")
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return errors.New("no password was given on standard input")
			}
			if err := c.Admin().UserPasswd(cmd.Context(), name, strings.TrimRight(line, "\r\n")); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr())
			fmt.Fprintln(cmd.OutOrStdout(), "password set")
			return nil
		}),
	}
	s3key := &cobra.Command{
		Use:   "s3-key [NAME]",
		Short: "Make an S3 access key of yours (or NAME's, as an administrator) and show it with its secret",
		Long: "Make an S3 access key for the S3 gateways and print it with its secret, once: the controller\n" +
			"keeps it and gateways ask it. Without NAME, your own.",
		Args: cobra.MaximumNArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			r, err := c.Admin().S3KeyCreate(cmd.Context(), name)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "access key %s for %s\nsecret key %s\n", r.Access, r.User, r.Secret)
			return nil
		}),
	}
	return []*cobra.Command{passwd, s3key}
}
