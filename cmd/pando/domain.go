package main

import (
	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
)

// newDomainCmd is the group of commands about this domain and others:
// the issuers of bearer tokens it trusts (domain_issuer.go).
func newDomainCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "domain",
		Short: "This domain's ties to others: trusted token issuers, its own key set",
	}
	cmd.AddCommand(newDomainIssuerCmds(g)...)
	return cmd
}
