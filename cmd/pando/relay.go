package main

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/holder"
	"pando.dev/pando/internal/metricsrv"
	"pando.dev/pando/internal/relay"
)

// newRelayCmd is `pando relay`: serves shares that cannot accept
// connections to the clients that ask for them.
func newRelayCmd(g *cli.Globals) *cobra.Command {
	var (
		listen, metrics string
		cas             []string
		lim             relay.Limits
	)
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run a relay for shares behind firewalls and NAT",
		Long: `Run a relay. A share that cannot accept connections (pando share --relay ADDR)
dials out to it, authenticated with its certificate, and registers under the
name its certificate gives it; clients that dial the address the share
advertises (relay://ADDR/share:NAME@DOMAIN) are spliced to a connection the
share dials back. Client and share run their own mutual TLS through the
splice: the relay reads nothing of it. The relay needs one port, open to
shares and clients; they need none.

--ca names the CA certificates (PEM) whose shares and controllers may register,
one per domain: each domain's is the "ca" of its credential bundles. A
certificate is accepted only from the CA of the domain it names.`,
		Example: `  pando relay --listen 0.0.0.0:7400 --ca uva-ca.pem --ca tacc-ca.pem --metrics 127.0.0.1:9752`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(cas) == 0 {
				return cli.Usagef("pando relay needs --ca FILE: the CA certificate of each domain whose shares it serves")
			}
			var pems [][]byte
			for _, f := range cas {
				pem, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("cannot read the CA certificate: %w", err)
				}
				pems = append(pems, pem)
			}
			trust, err := auth.NewForeign(pems)
			if err != nil {
				return cli.Usagef("--ca: %v", err)
			}
			// The relay's log is its record: every registration, refusal
			// and splice (with its bytes each way), at level INFO.
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			if g.Verbose {
				log = g.Logger()
			}
			srv, err := relay.New(relay.Config{Limits: lim, Log: log, Verify: func(chain []*x509.Certificate) (string, error) {
				id, err := trust.Verify(chain)
				return id.String(), err
			}})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("the relay cannot listen on %s: %w%s (choose another address with --listen)", listen, err, holder.InUse(err, listen))
			}
			if metrics != "" {
				ms, err := metricsrv.Serve(metrics, metricsrv.Handler(srv))
				if err != nil {
					ln.Close()
					return err
				}
				defer ms.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "metrics at http://%s/metrics\n", ms.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "relay for domains %s listening on %s\n", strings.Join(trust.Domains(), ", "), ln.Addr())
			go func() {
				<-cmd.Context().Done()
				srv.Close()
			}()
			return srv.Serve(ln)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:7400", "address to listen on (shares and clients both dial it)")
	fl.StringArrayVar(&cas, "ca", nil, "CA certificate (PEM) whose shares may register (repeatable)")
	fl.StringVar(&metrics, "metrics", "", "also serve Prometheus metrics at http://ADDR/metrics")
	fl.IntVar(&lim.PerServer, "per-server", 256, "connections spliced to one share at a time")
	fl.IntVar(&lim.PerClient, "per-client", 128, "connections one client address may hold")
	fl.DurationVar(&lim.Handshake, "handshake-timeout", 0, "time a peer has to send its request, and a share to dial back (default 10s)")
	fl.DurationVar(&lim.Idle, "idle", 0, "end a splice on which nothing moved for this long (default 5m)")
	return cmd
}
