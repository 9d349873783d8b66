package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/wire"
)

func newNsCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ns", Short: "Manage the namespace's mount table"}
	var replicas []string
	mount := &cobra.Command{
		Use:   "mount PREFIX SHARE[:PATH]",
		Short: "Mount a share (or a directory inside it) at a global prefix",
		Args:  cobra.ExactArgs(2),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			share, sub, _ := strings.Cut(args[1], ":")
			var more []wire.Location
			for _, r := range replicas {
				s, p, _ := strings.Cut(r, ":")
				more = append(more, wire.Location{Share: s, SharePath: p, Kind: wire.LocReplica})
			}
			return c.Admin().MountAdd(cmd.Context(), args[0], share, sub, more...)
		}),
	}
	mount.Flags().StringArrayVar(&replicas, "replica", nil, "SHARE[:PATH] holding a read-only copy (repeatable; recorded and listed, reads still go to SHARE)")
	cmd.AddCommand(mount, &cobra.Command{
		Use:   "unmount PREFIX",
		Short: "Remove a mount (the share's files are untouched)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			return c.Admin().MountRemove(cmd.Context(), args[0])
		}),
	}, &cobra.Command{
		Use:   "ls",
		Short: "List the mount table",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			mounts, err := c.MountTable(cmd.Context())
			if err != nil {
				return err
			}
			rows := [][]string{{"PREFIX", "SHARE", "PATH", "ROLE"}}
			for _, m := range mounts {
				for _, l := range m.Locations() {
					rows = append(rows, []string{m.Prefix, l.Share, "/" + l.SharePath, l.Kind.String()})
				}
			}
			return cli.Table(cmd.OutOrStdout(), rows)
		}),
	})
	return cmd
}

func newUserCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage the domain's users"}
	var groups []string
	var out string
	var gatewayRole bool
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a user and write their credential bundle",
		Long: `Create a user and write their credential bundle, readable only by you (default
NAME.json beside your configuration, ` + filepath.Join(filepath.Dir(config.DefaultPath()), "NAME.json") + `).
Give it to the user over a safe channel; they use it with --config FILE,
PANDO_CONFIG=FILE, or by copying it to ` + config.DefaultPath() + `.`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			name := args[0]
			if out == "" {
				// Beside the configuration, not in the working directory
				// (a repository, a shared folder): it holds a private key.
				out = filepath.Join(filepath.Dir(configPath(g)), name+".json")
			}
			if _, err := os.Stat(out); err == nil {
				return cli.Usagef("%s already exists; choose another file with -o", out)
			}
			var resp wire.UserAddResp
			var err error
			if gatewayRole {
				resp, err = c.Admin().GatewayAdd(cmd.Context(), name)
			} else {
				resp, err = c.Admin().UserAdd(cmd.Context(), name, groups)
			}
			if err != nil {
				return err
			}
			self, err := g.Config()
			if err != nil {
				return err
			}
			bundle := &config.Config{Domain: c.Domain(), Controller: self.Controller, Controllers: resp.Controllers, User: name,
				CA: string(resp.CA), Cert: string(resp.Cert), Key: string(resp.Key)}
			if err := bundle.Save(out); err != nil {
				return err
			}
			what := "user " + name + "@" + c.Domain()
			if gatewayRole {
				what = "gateway gateway:" + name + "@" + c.Domain()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s created; credentials written to %s\n", what, out)
			return nil
		}),
	}
	add.Flags().StringSliceVar(&groups, "group", nil, "groups the user belongs to (repeatable)")
	add.Flags().BoolVar(&gatewayRole, "gateway", false, "make a gateway's credentials (pando serve), which act only in the names of the users the gateway serves")
	add.Flags().StringVarP(&out, "output", "o", "", "where to write the credential bundle (default NAME.json beside your configuration)")
	cmd.AddCommand(add, &cobra.Command{
		Use:   "ls",
		Short: "List users",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			users, err := c.Admin().UserList(cmd.Context())
			if err != nil {
				return err
			}
			rows := [][]string{{"USER", "GROUPS", "CREATED", "STATE"}}
			for _, u := range users {
				state := "active"
				if u.Revoked != 0 {
					state = "revoked " + time.Unix(0, u.Revoked).Format(time.DateTime)
				}
				name := u.Name
				if u.Gateway {
					name += " (gateway)"
				}
				rows = append(rows, []string{name, strings.Join(u.Groups, ","), time.Unix(0, u.Created).Format(time.DateTime), state})
			}
			return cli.Table(cmd.OutOrStdout(), rows)
		}),
	}, &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a user's credentials and access tokens at once",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			return c.Admin().UserRevoke(cmd.Context(), args[0])
		}),
	})
	cmd.AddCommand(newUserCredsCmds(g)...)
	return cmd
}

func newACLCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Show or change access control lists on namespace prefixes",
		Long: `ACLs hang on namespace prefixes and are inherited downward. Rights are AFS's:
r read, l list (lookup), i insert, d delete, w write, k lock, a administer;
or the words read (rl), write (rlidwk), all, none. WHO is a user, group:NAME or
anyone, or the same of a linked domain (bob@tacc, group:physics@tacc, anyone@tacc);
a WHO starting with '-' is a negative entry, which wins over grants.`,
	}
	var replace bool
	set := &cobra.Command{
		Use:   "set PATH WHO RIGHTS [WHO RIGHTS...]",
		Short: "Set entries of the ACL on PATH (RIGHTS none removes an entry)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 3 || len(args)%2 == 0 {
				return cli.Usagef("pando acl set needs PATH and then pairs of WHO RIGHTS, e.g. pando acl set /uva/data alice read -bob w")
			}
			return nil
		},
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			var entries []wire.ACLEntry
			for i := 1; i < len(args); i += 2 {
				who, neg := strings.CutPrefix(args[i], "-")
				entries = append(entries, wire.ACLEntry{Who: who, Rights: args[i+1], Negative: neg})
			}
			return c.Admin().ACLSet(cmd.Context(), args[0], entries, replace)
		}),
	}
	set.Flags().BoolVar(&replace, "replace", false, "replace the whole ACL instead of changing entries")
	// A negative entry like -bob must not be read as a flag.
	set.Flags().SetInterspersed(false)
	cmd.AddCommand(set, &cobra.Command{
		Use:   "get PATH",
		Short: "Show the ACL on PATH, the ACLs it inherits, and your rights there",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, args []string) error {
			r, err := c.Admin().ACLGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			prefixes := make([]string, 0, len(r.Inherited))
			for p := range r.Inherited {
				prefixes = append(prefixes, p)
			}
			slices.Sort(prefixes)
			rows := [][]string{{"PREFIX", "WHO", "RIGHTS"}}
			add := func(p string, es []wire.ACLEntry) {
				for _, e := range es {
					who := e.Who
					if e.Negative {
						who = "-" + who
					}
					rows = append(rows, []string{p, who, e.Rights})
				}
			}
			for _, p := range prefixes {
				add(p, r.Inherited[p])
			}
			add(r.Path, r.Entries)
			if err := cli.Table(w, rows); err != nil {
				return err
			}
			fmt.Fprintf(w, "your rights on %s: %s\n", r.Path, r.Effective)
			return nil
		}),
	})
	return cmd
}

func newWhoamiCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the controller takes you for",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			r, err := c.Admin().WhoAmI(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s", r.Principal)
			if len(r.Groups) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), " (groups: %s)", strings.Join(r.Groups, ", "))
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		}),
	}
}

// configPath is the configuration the command runs with.
func configPath(g *cli.Globals) string {
	if g.ConfigPath != "" {
		return g.ConfigPath
	}
	return config.DefaultPath()
}
