package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/wan"
)

// newWanCmd is `pando wan`: a TCP proxy that emulates a wide-area link.
func newWanCmd() *cobra.Command {
	var (
		listen, to, rate string
		rtt              time.Duration
		loss             float64
		buffer           int
		shared           bool
	)
	cmd := &cobra.Command{
		Use:   "wan --listen ADDR --to ADDR [--rtt 40ms] [--rate 100mbit] [--loss P] [--buffer BYTES]",
		Short: "Emulate a wide-area link between two local addresses",
		Long: `wan is a TCP proxy that makes a loopback connection behave like a WAN link,
so pando can be tried and benchmarked over a WAN on one machine.

Every connection accepted on --listen is relayed to --to. Each direction is
delayed by rtt/2 and capped at --rate; the rate applies per direction and per
connection, unless --shared makes it the capacity of the whole link, shared
by all connections as flows share a bottleneck. Each direction buffers at most
--buffer bytes (default: the bandwidth-delay product plus a 25 ms margin, or
4 MiB at an unlimited rate); when full, the proxy stops reading so TCP
back-pressure reaches the sender.

--loss P is approximated as delay, since TCP does not lose bytes: with
probability P each chunk (a read of a few KiB) arrives one RTT late, holding
up everything behind it.

Rates: 100mbit, 1gbit, 200Mbit/s, 56kbit (bits); 10MB/s, 512KiB/s (bytes);
0 or empty for unlimited.`,
		Example: `  pando wan --listen 127.0.0.1:9000 --to 127.0.0.1:7000 --rtt 40ms --rate 100mbit`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true // flags parsed; what fails now is not a usage error
			bits, err := wan.ParseRate(rate)
			if err != nil {
				return err
			}
			if buffer < 0 {
				return errors.New("wan: --buffer must be >= 0")
			}
			p, err := wan.Listen(listen, to, wan.Config{RTT: rtt, Rate: bits, Loss: loss, Buffer: buffer, Shared: shared})
			if err != nil {
				return err
			}
			cfg := p.Config()
			var extra strings.Builder
			if cfg.Loss > 0 {
				fmt.Fprintf(&extra, ", loss %g", cfg.Loss)
			}
			per := "per connection and direction"
			if cfg.Shared {
				per = "per direction, shared by all connections"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wan: %s -> %s, rtt %v, %s %s%s, buffer %d bytes\n",
				p.Addr(), to, cfg.RTT, wan.FormatRate(cfg.Rate), per, extra.String(), cfg.Buffer)

			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			stop()
			err = p.Close()
			s := p.Stats()
			fmt.Fprintf(cmd.ErrOrStderr(), "wan: closed after %d connections, %d bytes up, %d bytes down\n",
				s.Conns, s.BytesUp, s.BytesDown)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "address to accept connections on (host:port)")
	f.StringVar(&to, "to", "", "address to relay connections to (host:port)")
	f.DurationVar(&rtt, "rtt", 0, "round-trip time to add; each direction gets rtt/2")
	f.StringVar(&rate, "rate", "", "rate per direction per connection, e.g. 100mbit, 1gbit, 10MB/s (empty or 0: unlimited)")
	f.Float64Var(&loss, "loss", 0, "probability (0..1) that a chunk is delayed by one extra RTT, emulating a retransmission")
	f.IntVar(&buffer, "buffer", 0, "bytes buffered per direction per connection (0: bandwidth-delay product plus margin)")
	f.BoolVar(&shared, "shared", false, "all connections share the rate (a link), instead of each having it")
	cmd.MarkFlagRequired("listen")
	cmd.MarkFlagRequired("to")
	return cmd
}
