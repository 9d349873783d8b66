package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
)

func newTokenCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Sign-in tokens for gateways and scoped bearer tokens (JWTs)",
	}
	var (
		ttl      time.Duration
		scopes   []string
		audience string
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Print a sign-in token of yours, or with --scope a scoped bearer token (JWT)",
		Long: "Print a sign-in token of yours on standard output. A gateway (pando serve http, webdav) takes it\n" +
			"instead of your certificate or a password, over TLS, as the header 'Authorization: Bearer TOKEN',\n" +
			"until it expires or you are revoked. Anyone who holds it acts as you: keep it as a password.\n\n" +
			"With --scope (storage.read:/uva/data, storage.create:/path, storage.modify:/path; a path covers\n" +
			"what is below it), print instead a JWT of the WLCG token profile, signed by the domain: it grants\n" +
			"only what its scopes cover and your ACLs grant, to a script, a batch job or a gateway that carries\n" +
			"it instead of a certificate. --audience names who takes it (default: this domain, pando://DOMAIN);\n" +
			"another domain or XRootD takes it once it trusts the domain's keys (pando domain jwks).",
		Args: cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			if len(scopes) == 0 {
				if audience != "" {
					return errors.New("--audience is for scoped tokens; give --scope too")
				}
				r, err := c.Admin().TokenCreate(cmd.Context(), ttl)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), auth.EncodeSignIn(r.Token))
				fmt.Fprintf(cmd.ErrOrStderr(), "valid until %s; use it as: curl -H \"Authorization: Bearer $TOKEN\" https://GATEWAY/...\n",
					time.Unix(0, r.Expires).Local().Format(time.RFC3339))
				return nil
			}
			for _, s := range scopes {
				if _, err := auth.ParseScope(s); err != nil {
					return err
				}
			}
			r, err := c.Admin().JWTCreate(cmd.Context(), scopes, audience, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.JWT)
			fmt.Fprintf(cmd.ErrOrStderr(), "valid until %s for %s\n", time.Unix(0, r.Expires).Local().Format(time.RFC3339), strings.Join(scopes, " "))
			return nil
		}),
	}
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long the token lives (default 8h, up to 720h; with --scope 1h, up to 168h)")
	create.Flags().StringArrayVar(&scopes, "scope", nil, "make a JWT with this storage scope (repeat for more)")
	create.Flags().StringVar(&audience, "audience", "", "with --scope: who takes the token (default: this domain)")
	cmd.AddCommand(create)
	return cmd
}
