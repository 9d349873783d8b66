package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
)

func newTokenCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Sign-in tokens for gateways",
	}
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create",
		Short: "Print a sign-in token of yours, which gateways take as 'Authorization: Bearer TOKEN'",
		Long: "Print a sign-in token of yours on standard output. A gateway (pando serve http, webdav) takes it\n" +
			"instead of your certificate or a password, over TLS, as the header 'Authorization: Bearer TOKEN',\n" +
			"until it expires or you are revoked. Anyone who holds it acts as you: keep it as a password.",
		Args: cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			r, err := c.Admin().TokenCreate(cmd.Context(), ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), auth.EncodeSignIn(r.Token))
			fmt.Fprintf(cmd.ErrOrStderr(), "valid until %s; use it as: curl -H \"Authorization: Bearer $TOKEN\" https://GATEWAY/...\n",
				time.Unix(0, r.Expires).Local().Format(time.RFC3339))
			return nil
		}),
	}
	create.Flags().DurationVar(&ttl, "ttl", 8*time.Hour, "how long the token lives (1s to 720h)")
	cmd.AddCommand(create)
	return cmd
}
