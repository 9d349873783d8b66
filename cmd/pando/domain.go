package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// newDomainCmd is the group of commands about this domain and others:
// links (below) and the issuers of bearer tokens it trusts
// (domain_issuer.go).
func newDomainCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "domain", Short: "Link this domain with others: one namespace, each domain deciding its own rights; trusted token issuers"}
	cmd.AddCommand(domainLinkCmds(g)...)
	cmd.AddCommand(newDomainIssuerCmds(g)...)
	return cmd
}

// admitFlags are the flags that say what a link admits.
type admitFlags struct {
	admit  string
	prefix string
}

func (f *admitFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&f.admit, "admit", "all", "which of "+what+"'s users this domain accepts: all, none, or group:NAME[,group:NAME...]")
	cmd.Flags().StringVar(&f.prefix, "prefix", "", "the part of this domain's namespace they may ever reach (e.g. /uva/shared; default all, within the ACLs)")
}

func (f *admitFlags) apply(l *wire.DomainLink) error {
	switch f.admit {
	case wire.AdmitAll, wire.AdmitNone:
		l.Admit = f.admit
	default:
		for _, g := range strings.Split(f.admit, ",") {
			name, ok := strings.CutPrefix(strings.TrimSpace(g), "group:")
			if !ok {
				return cli.Usagef("--admit takes all, none or group:NAME[,group:NAME...], not %q", f.admit)
			}
			l.Groups = append(l.Groups, name)
		}
		l.Admit = wire.AdmitGroups
	}
	l.Prefix = f.prefix
	return nil
}

func domainLinkCmds(g *cli.Globals) []*cobra.Command {
	var af admitFlags
	var ctrls []string
	var fp string
	link := &cobra.Command{
		Use:   "link NAME --controller HOST:PORT --fingerprint SHA256",
		Short: "Link domain NAME: accept its users as NAME's say who they are, and reach its namespace",
		Long: `Link domain NAME. Its controller is dialled at --controller and must present a
CA certificate with the SHA-256 fingerprint --fingerprint (as NAME's administrator
reads it with pando domain fingerprint, or openssl x509 -fingerprint -sha256; colons
and case do not matter). The link is one-way trust: this domain accepts NAME's users
as user@NAME (all, none or some groups: --admit), and its users reach NAME's
namespace where NAME's own link admits them. Rights are each domain's own ACLs.`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			if len(ctrls) == 0 || fp == "" {
				return cli.Usagef("pando domain link %s needs --controller HOST:PORT and --fingerprint SHA256 (or use an invitation: pando domain join CODE)", args[0])
			}
			l := wire.DomainLink{Name: args[0], Controllers: ctrls}
			if err := af.apply(&l); err != nil {
				return err
			}
			out, err := c.Admin().DomainLink(cmd.Context(), l, fp, "")
			if err != nil {
				return err
			}
			return printLinked(cmd, out)
		}),
	}
	link.Flags().StringArrayVar(&ctrls, "controller", nil, "HOST:PORT of a controller of the other domain (repeatable)")
	link.Flags().StringVar(&fp, "fingerprint", "", "SHA-256 fingerprint of the other domain's CA certificate")
	af.add(link, "NAME")

	var jf admitFlags
	join := &cobra.Command{
		Use:   "join CODE",
		Short: "Link with the domain whose invitation CODE is (pando domain invite prints one)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			var l wire.DomainLink
			if err := jf.apply(&l); err != nil {
				return err
			}
			out, err := c.Admin().DomainLink(cmd.Context(), l, "", args[0])
			if err != nil {
				return err
			}
			return printLinked(cmd, out)
		}),
	}
	jf.add(join, "the inviting domain")

	var inv admitFlags
	var ttl time.Duration
	invite := &cobra.Command{
		Use:   "invite NAME",
		Short: "Print a one-time code with which domain NAME links with this one (pando domain join CODE there)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			var l wire.DomainLink
			if err := inv.apply(&l); err != nil {
				return err
			}
			out, err := c.Admin().DomainInvite(cmd.Context(), wire.DomainInviteReq{Name: args[0], Admit: l.Admit, Groups: l.Groups, Prefix: l.Prefix, TTL: int64(ttl)})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), out.Code)
			fmt.Fprintf(cmd.ErrOrStderr(), "Give it to %s's administrator, who runs: pando domain join CODE\nIt serves once, until %s.\n",
				args[0], time.Unix(0, out.Expires).Local().Format(time.DateTime))
			return nil
		}),
	}
	invite.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the code may be used (at most 7 days)")
	inv.add(invite, "NAME")

	return []*cobra.Command{link, join, invite, {
		Use:   "unlink NAME",
		Short: "End the link with domain NAME at once, for every share and agent of this domain",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			return c.Admin().DomainUnlink(cmd.Context(), args[0])
		}),
	}, {
		Use:   "ls",
		Short: "List the linked domains: what each admits, and whether it answers",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			r, err := c.ProbeLinks(cmd.Context())
			if err != nil {
				return err
			}
			rows := [][]string{{"DOMAIN", "ADMITS", "REACH", "STATE", "LAST CONTACT", "CA FINGERPRINT"}}
			for _, l := range r.Links {
				fp, _ := auth.FingerprintPEM(l.CA)
				state, last := "reachable", "-"
				if l.LastError != "" {
					state = "unreachable: " + l.LastError
				}
				if l.LastContact != 0 {
					last = time.Unix(0, l.LastContact).Local().Format(time.DateTime)
				}
				rows = append(rows, []string{l.Name, admits(l), cmpOr(l.Prefix, "/"), state, last, fp})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "home domain %s, CA fingerprint %s\n", r.Home, r.Fingerprint)
			if len(r.Links) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no linked domains (pando domain link NAME, or pando domain invite NAME)")
				return nil
			}
			return cli.Table(cmd.OutOrStdout(), rows)
		}),
	}, {
		Use:   "fingerprint",
		Short: "Print the SHA-256 fingerprint of this domain's CA certificate, for another domain to link with it",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			r, err := c.Links(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.Fingerprint)
			return nil
		}),
	}}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func admits(l wire.DomainLink) string {
	if l.Admit == wire.AdmitGroups {
		return "group:" + strings.Join(l.Groups, ",group:")
	}
	return l.Admit
}

func printLinked(cmd *cobra.Command, l wire.DomainLink) error {
	fmt.Fprintf(cmd.OutOrStdout(), "linked with %s (admits %s, reach %s); its namespace is /%s\n", l.Name, admits(l), cmpOr(l.Prefix, "/"), l.Name)
	return nil
}
