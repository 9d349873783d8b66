package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cli"
)

// findLogin finds the login socket of the agent mounted at dir (or of
// the only agent that accepts logins, if dir is "").
func findLogin(dir string) (*agent.Client, error) {
	c, err := agent.FindLogin(dir)
	if errors.Is(err, agent.ErrSeveralLogins) {
		return nil, cli.Usagef("%v", err)
	}
	return c, err
}

func newLoginCmd(g *cli.Globals) *cobra.Command {
	var dir string
	var status bool
	var uid int
	cmd := &cobra.Command{
		Use:   "login [--mount DIR]",
		Short: "Act on a pando mount with your own credential, not the host's",
		Long: `Hands your pando credential (the configuration pando uses for you: --config,
$PANDO_CONFIG or ~/.config/pando/config.json) to the agent of a mount started
with --logins, as AFS's aklog does: from then on everything you do through that
mount runs with your own rights. The agent learns which local user you are from
the kernel, keeps the credential in memory only, and checks it with the
controller first. pando logout ends it; --status lists who is logged in.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ac, err := findLogin(dir)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if status {
				ls, err := ac.Logins(cmd.Context())
				if err != nil {
					return err
				}
				if len(ls) == 0 {
					fmt.Fprintln(w, "nobody is logged in")
				}
				for _, l := range ls {
					fmt.Fprintf(w, "uid %d\t%s\tsince %s\n", l.Uid, l.Principal, l.Since)
				}
				return nil
			}
			cfg, err := g.Config()
			if err != nil {
				return err
			}
			req := agent.LoginRequest{Cert: cfg.Cert, Key: cfg.Key}
			if cmd.Flags().Changed("uid") {
				if os.Geteuid() != 0 {
					return cli.Usagef("--uid logs another local user in, which only root may do")
				}
				req.Uid = &uid
			}
			l, err := ac.Login(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "logged in: uid %d acts as %s on this mount\n", l.Uid, l.Principal)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "mount", "", "the mount point (needed when several mounts accept logins)")
	cmd.Flags().BoolVar(&status, "status", false, "list the local users logged in, and as whom")
	cmd.Flags().IntVar(&uid, "uid", 0, "log in this local uid instead of yourself (root only)")
	return cmd
}

func newLogoutCmd() *cobra.Command {
	var dir string
	var uid int
	cmd := &cobra.Command{
		Use:   "logout [--mount DIR]",
		Short: "Stop acting on a pando mount with your own credential",
		Long: `Ends your pando login at a mount: the agent forgets your credential and removes
what it cached for you; you are served as any local user with no login again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ac, err := findLogin(dir)
			if err != nil {
				return err
			}
			var who *int
			if cmd.Flags().Changed("uid") {
				if os.Geteuid() != 0 {
					return cli.Usagef("--uid logs another local user out, which only root may do")
				}
				who = &uid
			}
			l, err := ac.Logout(cmd.Context(), who)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged out: uid %d no longer acts as %s\n", l.Uid, l.Principal)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "mount", "", "the mount point (needed when several mounts accept logins)")
	cmd.Flags().IntVar(&uid, "uid", 0, "log this local uid out instead of yourself (root only)")
	return cmd
}
