// Command pando is the one binary of pando, a wide-area data grid: each
// role (controller, share, agent) and every tool is a subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pando: "+cli.Message(err))
		os.Exit(cli.ExitCode(err))
	}
}

func newRootCmd() *cobra.Command {
	g := &cli.Globals{}
	root := &cobra.Command{
		Use:   "pando",
		Short: "pando: one namespace over directories shared by many sites",
		Long: `pando is a wide-area data grid: sites export directories into one global
namespace, /<domain>/<path>, that users reach with their own credentials.

Start a domain on this machine:   pando up --share ./data
Then try:                         pando ls /local`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.ConfigPath, "config", "", "client configuration and credentials (default $PANDO_CONFIG or $XDG_CONFIG_HOME/pando/config.json)")
	root.PersistentFlags().DurationVar(&g.Timeout, "timeout", 0, "give up on an operation after this long (default: none for transfers, 60s per request)")
	root.PersistentFlags().BoolVarP(&g.Verbose, "verbose", "v", false, "log what is happening")
	root.AddCommand(
		newControllerCmd(g), newShareCmd(g), newUpCmd(g), newRelayCmd(g),
		newLsCmd(g), newStatCmd(g), newCatCmd(g), newGetCmd(g), newPutCmd(g),
		newMkdirCmd(g), newRmCmd(g), newMvCmd(g), newLnCmd(g),
		newNsCmd(g), newUserCmd(g), newACLCmd(g), newWhoamiCmd(g), newTokenCmd(g),
		newMountCmd(g), newServeCmd(g), newStatsCmd(g), newCacheCmd(g),
		newCpCmd(g), newWanCmd(), newBenchCmd(), newVersionCmd(), newAdminCmd(), newStatusCmd(g), newWaitCmd(g),
		newDoctorCmd(g), newManCmd(), newLoginCmd(g), newLogoutCmd(), newDomainCmd(g),
	)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print pando's version and protocol version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), cli.VersionString())
			return nil
		},
	}
}
