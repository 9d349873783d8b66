package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/store"
)

// storeFlags say how to reach etcd.
type storeFlags struct {
	etcd controller.EtcdTLS
}

func (f *storeFlags) add(cmd *cobra.Command) { addEtcdFlags(cmd, &f.etcd) }

func addEtcdFlags(cmd *cobra.Command, et *controller.EtcdTLS) {
	cmd.Flags().StringVar(&et.CA, "etcd-ca", "", "CA certificate (PEM) of the etcd cluster, for TLS")
	cmd.Flags().StringVar(&et.Cert, "etcd-cert", "", "client certificate (PEM) to present to etcd")
	cmd.Flags().StringVar(&et.Key, "etcd-key", "", "key (PEM) of the etcd client certificate")
}

func (f *storeFlags) open(cmd *cobra.Command, spec string) (store.Store, error) {
	if spec == "" {
		return nil, cli.Usagef("name a store: bbolt:DIR (a controller's state directory) or etcd://HOST:2379,HOST:2379")
	}
	return controller.OpenStore(cmd.Context(), spec, "", f.etcd)
}

func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "Move, back up and restore a domain's store (with its controllers stopped, for bbolt)"}
	var f storeFlags
	var from, to, st string
	migrate := &cobra.Command{
		Use:   "migrate --from bbolt:DIR --to etcd://HOST:2379,...",
		Short: "Copy a domain from one store to another, empty one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := f.open(cmd, from)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := f.open(cmd, to)
			if err != nil {
				return err
			}
			defer dst.Close()
			n, err := store.Copy(cmd.Context(), dst, src)
			if err != nil {
				return fmt.Errorf("migration from %s to %s: %w", from, to, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "copied %d keys from %s to %s; start the controllers with --store %s\n", n, from, to, to)
			return nil
		},
	}
	migrate.Flags().StringVar(&from, "from", "", "the store to copy (bbolt:DIR or etcd://...)")
	migrate.Flags().StringVar(&to, "to", "", "the empty store to copy into")
	f.add(migrate)
	backup := &cobra.Command{
		Use:   "backup --store STORE FILE",
		Short: "Write a consistent snapshot of a store to FILE",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd, st)
			if err != nil {
				return err
			}
			defer s.Close()
			out, err := os.OpenFile(args[0], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("cannot create the backup: %w (choose a file that does not exist)", err)
			}
			n, err := store.Snapshot(cmd.Context(), s, out)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(args[0])
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d keys of %s written to %s (it holds the domain's CA key: keep it as safe as the store)\n", n, st, args[0])
			return nil
		},
	}
	restore := &cobra.Command{
		Use:   "restore --store STORE FILE",
		Short: "Load a snapshot written by backup into an empty store",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer in.Close()
			s, err := f.open(cmd, st)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := store.Restore(cmd.Context(), s, in)
			if err != nil {
				return fmt.Errorf("restore of %s into %s: %w", args[0], st, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d keys restored into %s\n", n, st)
			return nil
		},
	}
	for _, c := range []*cobra.Command{backup, restore} {
		c.Flags().StringVar(&st, "store", "", "the store: bbolt:DIR (a controller's state directory) or etcd://HOST:2379,...")
		f.add(c)
	}
	cmd.AddCommand(migrate, backup, restore)
	return cmd
}

func newStatusCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the domain's controllers, its store's members and its shares (administrators)",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			st, err := c.Admin().Status(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CONTROLLER\tSTATE\tLAST HEARTBEAT")
			for _, ct := range st.Controllers {
				fmt.Fprintf(w, "%s\t%s\t%s ago\n", ct.Addr, upDown(ct.Live), time.Since(time.Unix(0, ct.LastSeen)).Round(time.Second))
			}
			fmt.Fprintf(w, "\nSTORE (%s)\tSTATE\tROLE\n", st.StoreKind)
			if st.StoreKind == "bbolt" {
				fmt.Fprintln(w, "embedded\tup\tone file in the controller's state directory")
			}
			if st.StoreErr != "" {
				fmt.Fprintf(w, "(cannot list the members: %s)\n", st.StoreErr)
			}
			for _, m := range st.Store {
				role := "follower"
				if m.Leader {
					role = "leader"
				}
				state := upDown(m.Up)
				if !m.Up {
					role = m.Err
				}
				fmt.Fprintf(w, "%s %s\t%s\t%s\n", m.Name, m.Addr, state, role)
			}
			fmt.Fprintln(w, "\nSHARE\tSTATE\tADDRESSES")
			for _, s := range st.Shares {
				fmt.Fprintf(w, "%s\t%s\t%s\n", s.Name, upDown(s.Online), strings.Join(s.Addrs, ","))
			}
			return w.Flush()
		}),
	}
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "DOWN"
}
