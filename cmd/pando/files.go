package main

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// withClient runs fn with the home client and a context bounded by
// --timeout.
func withClient(g *cli.Globals, fn func(cmd *cobra.Command, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return withGrid(g, func(cmd *cobra.Command, gr *cli.Grid, args []string) error { return fn(cmd, gr.Home, args) })
}

// withGrid runs fn with the home client and the router that reaches the
// linked domains (a command on grid paths takes the client of each path's
// domain from it), and a context bounded by --timeout.
func withGrid(g *cli.Globals, fn func(cmd *cobra.Command, gr *cli.Grid, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		gr, err := g.Grid(client.Options{})
		if err != nil {
			return err
		}
		defer gr.Close()
		ctx, cancel := g.Context(cmd.Context())
		defer cancel()
		cmd.SetContext(ctx)
		return fn(cmd, gr, args)
	}
}

func progressOut() *os.File { return os.Stderr }

func newLsCmd(g *cli.Globals) *cobra.Command {
	var long, human bool
	cmd := &cobra.Command{
		Use:   "ls [-l] [PATH...]",
		Short: "List directories of the namespace",
		RunE: withGrid(g, func(cmd *cobra.Command, c *cli.Grid, args []string) error {
			if len(args) == 0 {
				args = []string{"/" + c.Home.Domain()}
			}
			for i, p := range args {
				a, err := c.Stat(cmd.Context(), p)
				if err != nil {
					return err
				}
				if len(args) > 1 {
					if i > 0 {
						fmt.Fprintln(cmd.OutOrStdout())
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s:\n", p)
				}
				var entries []wire.DirEntry
				dir := p
				if cli.IsDir(a.Mode) || cli.IsLink(a.Mode) && strings.HasSuffix(p, "/") {
					if entries, _, _, err = c.ReadDirData(cmd.Context(), p, 0, 0); err != nil {
						return err
					}
				} else {
					entries = []wire.DirEntry{{Name: path.Base(p), Attr: a}}
					dir = path.Dir(p)
				}
				err = cli.Listing(cmd.OutOrStdout(), entries, long, human, func(name string) string {
					t, err := c.Readlink(cmd.Context(), path.Join(dir, name))
					if err != nil {
						return "?"
					}
					return t
				})
				if err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "long listing: mode, links, owner, group, size, time")
	// -h is ls's human-readable sizes here, as in coreutils; help is --help.
	cmd.Flags().Bool("help", false, "help for ls")
	cmd.Flags().BoolVarP(&human, "human-readable", "h", false, "with -l, sizes like 1.5K, 23M, 4.0G")
	return cmd
}

func newStatCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stat PATH...",
		Short: "Show a file's attributes",
		Args:  cobra.MinimumNArgs(1),
		RunE: withGrid(g, func(cmd *cobra.Command, c *cli.Grid, args []string) error {
			for _, p := range args {
				a, err := c.Stat(cmd.Context(), p)
				if err != nil {
					return err
				}
				g, _ := client.Clean(p)
				cli.Stat(cmd.OutOrStdout(), g, a)
			}
			return nil
		}),
	}
}

func newCatCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cat PATH...",
		Short: "Write files to standard output",
		Args:  cobra.MinimumNArgs(1),
		RunE: withGrid(g, func(cmd *cobra.Command, gr *cli.Grid, args []string) error {
			for _, p := range args {
				c, err := gr.ClientFor(cmd.Context(), p)
				if err != nil {
					return err
				}
				f, err := c.Open(cmd.Context(), p, wire.OpenRead|wire.OpenFollow)
				if err != nil {
					return err
				}
				_, err = f.WriteTo(cmd.Context(), cmd.OutOrStdout())
				f.Close(cmd.Context())
				if err != nil {
					return err
				}
			}
			return nil
		}),
	}
}

func newGetCmd(g *cli.Globals) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "get [-r] PATH [LOCAL]",
		Short: "Copy a file (or tree) from the grid to a local path",
		Args:  cobra.RangeArgs(1, 2),
		RunE: withGrid(g, func(cmd *cobra.Command, gr *cli.Grid, args []string) error {
			dst := "."
			if len(args) == 2 {
				dst = args[1]
			}
			c, err := gr.ClientFor(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return cli.Get(cmd.Context(), c, args[0], dst, recursive, progressOut())
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories recursively")
	return cmd
}

func newPutCmd(g *cli.Globals) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "put [-r] LOCAL... PATH",
		Short: "Copy local files (or trees) into the grid",
		Args:  cobra.MinimumNArgs(2),
		RunE: withGrid(g, func(cmd *cobra.Command, gr *cli.Grid, args []string) error {
			dst := args[len(args)-1]
			c, err := gr.ClientFor(cmd.Context(), dst)
			if err != nil {
				return err
			}
			for _, src := range args[:len(args)-1] {
				if err := cli.Put(cmd.Context(), c, src, dst, recursive, progressOut()); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories recursively")
	return cmd
}

func newMkdirCmd(g *cli.Globals) *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "mkdir [-p] PATH...",
		Short: "Create directories",
		Args:  cobra.MinimumNArgs(1),
		RunE: withGrid(g, func(cmd *cobra.Command, gr *cli.Grid, args []string) error {
			for _, p := range args {
				c, err := gr.ClientFor(cmd.Context(), p)
				if err != nil {
					return err
				}
				if parents {
					err = cli.MkdirAll(cmd.Context(), c, p, 0o755)
				} else {
					_, err = c.Mkdir(cmd.Context(), p, 0o755)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; no error if it exists")
	return cmd
}

func newRmCmd(g *cli.Globals) *cobra.Command {
	var recursive, dir bool
	cmd := &cobra.Command{
		Use:   "rm [-r|-d] PATH...",
		Short: "Remove files (and, with -r, directories with their contents)",
		Args:  cobra.MinimumNArgs(1),
		RunE: withGrid(g, func(cmd *cobra.Command, gr *cli.Grid, args []string) error {
			for _, p := range args {
				c, err := gr.ClientFor(cmd.Context(), p)
				if err != nil {
					return err
				}
				switch {
				case recursive:
					err = cli.RemoveAll(cmd.Context(), c, p)
				case dir:
					err = c.Rmdir(cmd.Context(), p)
				default:
					err = c.Remove(cmd.Context(), p)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	cmd.Flags().BoolVarP(&dir, "dir", "d", false, "remove empty directories")
	return cmd
}

func newMvCmd(g *cli.Globals) *cobra.Command {
	var noClobber bool
	cmd := &cobra.Command{
		Use:   "mv SRC DST",
		Short: "Rename or move a file or directory within one mount",
		Args:  cobra.ExactArgs(2),
		RunE: withGrid(g, func(cmd *cobra.Command, c *cli.Grid, args []string) error {
			dst := args[1]
			if a, err := c.Stat(cmd.Context(), dst); err == nil && cli.IsDir(a.Mode) {
				dst = path.Join(dst, path.Base(args[0]))
			}
			return c.Rename(cmd.Context(), args[0], dst, noClobber)
		}),
	}
	cmd.Flags().BoolVarP(&noClobber, "no-clobber", "n", false, "fail instead of replacing an existing destination")
	return cmd
}

func newLnCmd(g *cli.Globals) *cobra.Command {
	var symbolic bool
	cmd := &cobra.Command{
		Use:   "ln [-s] TARGET LINK",
		Short: "Make a hard link (or with -s a symbolic link)",
		Args:  cobra.ExactArgs(2),
		RunE: withGrid(g, func(cmd *cobra.Command, c *cli.Grid, args []string) error {
			var err error
			if symbolic {
				_, err = c.Symlink(cmd.Context(), args[0], args[1])
			} else {
				_, err = c.Link(cmd.Context(), args[0], args[1])
			}
			return err
		}),
	}
	cmd.Flags().BoolVarP(&symbolic, "symbolic", "s", false, "make a symbolic link; TARGET is stored as given")
	return cmd
}
