package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/mount"
)

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func newWaitCmd(g *cli.Globals) *cobra.Command {
	var timeout time.Duration
	var mnt string
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the domain answers: its controller, and every registered share online",
		Long: `Wait until the configured domain answers: the configuration exists (pando up
writes it once its shares are registered), the controller answers, and every registered share is
online. For scripts that start pando in the background.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			deadline := time.Now().Add(timeout)
			var last error
			for {
				ok, why := domainUp(cmd.Context(), g)
				if ok && mnt != "" && !mount.Mounted(absPath(mnt)) {
					ok, why = false, fmt.Errorf("nothing is mounted at %s yet", mnt)
				}
				if ok {
					return nil
				}
				last = why
				if time.Now().After(deadline) {
					return fmt.Errorf("the domain is not up after %v: %w", timeout, last)
				}
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait")
	cmd.Flags().StringVar(&mnt, "mount", "", "also wait until a mount is up at this directory")
	return cmd
}

// domainUp reports whether the domain answers, and if not, why.
func domainUp(ctx context.Context, g *cli.Globals) (bool, error) {
	c, err := g.Client()
	if err != nil {
		return false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	shares, err := c.Admin().ShareList(ctx)
	if err != nil {
		return false, err
	}
	var down []string
	for _, s := range shares {
		if !s.Online {
			down = append(down, s.Name)
		}
	}
	if len(down) > 0 {
		return false, fmt.Errorf("share %s not online", strings.Join(down, ", "))
	}
	return true, nil
}
