package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// newDomainIssuerCmds are pando domain trust-issuer, issuers,
// distrust-issuer and jwks.
func newDomainIssuerCmds(g *cli.Globals) []*cobra.Command {
	var iss wire.IssuerInfo
	var jwksFile string
	trust := &cobra.Command{
		Use:   "trust-issuer ISS --jwks FILE --audience AUD --base /DOMAIN/PATH",
		Short: "Take the bearer tokens (JWTs) of issuer ISS, as capabilities below a base path",
		Long: "Trust the JWTs (WLCG token profile) of issuer ISS (their iss claim), signed by a key of the key\n" +
			"set in FILE (a JWKS: ES256 P-256 or Ed25519 keys, each with a kid), that carry audience AUD.\n" +
			"Their scope paths are relative to --base (storage.read:/pub with --base /tacc/data reads\n" +
			"/tacc/data/pub), and they grant exactly what their scopes cover there, to principal SUB@NAME,\n" +
			"whatever the ACLs say. NAME is --name, by default the first label of ISS's host.\n" +
			"Trusting again under the same name replaces the issuer. Administrators only.",
		Args: cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			iss.Issuer = args[0]
			if iss.Name == "" {
				u, err := url.Parse(iss.Issuer)
				if err != nil || u.Hostname() == "" {
					return fmt.Errorf("the issuer %q is no URL like https://issuer.example.org; give its iss claim", iss.Issuer)
				}
				iss.Name = strings.ToLower(strings.Split(u.Hostname(), ".")[0])
				if auth.ValidName(iss.Name) != nil {
					return fmt.Errorf("name the issuer with --name (no name can be made of %s)", u.Hostname())
				}
			}
			b, err := os.ReadFile(jwksFile)
			if err != nil {
				return fmt.Errorf("the issuer's key set: %w", err)
			}
			if _, err := auth.ParseJWKS(b); err != nil {
				return fmt.Errorf("%s: %w", jwksFile, err)
			}
			iss.JWKS = b
			if err := c.Admin().IssuerTrust(cmd.Context(), iss); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "trusting %s as %s: audience %s, scopes below %s, principals SUB@%s\n", iss.Issuer, iss.Name, iss.Audience, iss.Base, iss.Name)
			return nil
		}),
	}
	trust.Flags().StringVar(&jwksFile, "jwks", "", "the issuer's key set (JWKS JSON file)")
	trust.Flags().StringVar(&iss.Audience, "audience", "", "the audience its tokens must carry for this domain")
	trust.Flags().StringVar(&iss.Base, "base", "", "the global path its scope paths are relative to, e.g. /tacc/data")
	trust.Flags().StringVar(&iss.Name, "name", "", "the issuer's name in principals SUB@NAME (default: the first label of its host)")
	for _, f := range []string{"jwks", "audience", "base"} {
		_ = trust.MarkFlagRequired(f)
	}

	list := &cobra.Command{
		Use:   "issuers",
		Short: "List the issuers of bearer tokens this domain trusts",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			is, err := c.Admin().IssuerList(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tISSUER\tAUDIENCE\tBASE\tKEYS\tSINCE")
			for _, i := range is {
				keys := "?"
				if ks, err := auth.ParseJWKS(i.JWKS); err == nil {
					var ids []string
					for _, k := range ks.Keys {
						ids = append(ids, k.KeyID)
					}
					keys = strings.Join(ids, ",")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.Name, i.Issuer, i.Audience, i.Base, keys, time.Unix(0, i.Added).Local().Format(time.DateTime))
			}
			return tw.Flush()
		}),
	}

	distrust := &cobra.Command{
		Use:   "distrust-issuer NAME|ISS",
		Short: "Stop taking an issuer's bearer tokens (from the next request on)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			if err := c.Admin().IssuerDistrust(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "no longer trusting %s\n", args[0])
			return nil
		}),
	}

	jwks := &cobra.Command{
		Use:   "jwks",
		Short: "Print this domain's key set (JWKS) for its own bearer tokens",
		Long: "Print the key set (JWKS JSON) that verifies the JWTs this domain signs (pando token create\n" +
			"--scope), on standard output, and its issuer and audience on standard error: give them to\n" +
			"another domain (pando domain trust-issuer ISS --jwks FILE).",
		Args: cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			r, err := c.Admin().DomainJWKS(cmd.Context())
			if err != nil {
				return err
			}
			if len(r.JWKS) == 0 {
				return errors.New("the controller published no key set")
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(r.JWKS))
			fmt.Fprintf(cmd.ErrOrStderr(), "issuer %s; its tokens for this domain carry audience %s\n", r.Issuer, r.Audience)
			return nil
		}),
	}
	return []*cobra.Command{trust, list, distrust, jwks}
}
