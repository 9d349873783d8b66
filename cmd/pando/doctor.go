package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/doctor"
)

// newDoctorCmd is `pando doctor`: what this machine and the domain lack.
func newDoctorCmd(g *cli.Globals) *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this machine and the domain: FUSE, clock, certificate, controller, shares, cache space",
		Long: `doctor checks what pando needs, one line each: ok, or what is wrong and what
to do about it. On this machine: /dev/fuse, fusermount3 in PATH, the kernel's
FUSE passthrough (Linux 6.9 or later and CAP_SYS_ADMIN; without it pando works,
slower: a warning), the cache directory's free space. In the domain of the
configuration: its certificate's expiry, the controller, this machine's clock
against the controller's, and every share the controller knows.

It exits with status 1 if any check fails (warnings do not count).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.Context(cmd.Context())
			defer cancel()
			rs := doctor.Run(ctx, doctor.Options{ConfigPath: g.ConfigPath, CacheDir: cacheDir, Timeout: g.Timeout})
			doctor.Print(cmd.OutOrStdout(), rs)
			if n := doctor.Failed(rs); n > 0 {
				return fmt.Errorf("%d of %d checks failed: fix those marked FAIL above and run pando doctor again", n, len(rs))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cacheDir, "cache-dir", agent.DefaultCacheDir(), "the cache directory pando mount will use")
	return cmd
}
