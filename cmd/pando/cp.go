package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/transfer"
	"pando.dev/pando/internal/wan"
)

// newCpCmd is `pando cp`: bulk transfer between local paths, pando paths
// and web servers.
func newCpCmd(g *cli.Globals) *cobra.Command {
	var (
		o                  transfer.Options
		block, rateS, jout string
		protection         string
	)
	cmd := &cobra.Command{
		Use:   "cp [-r] [-p N] SRC... DST",
		Short: "Copy files and trees at line rate: parallel, resumable, verified",
		Long: `cp copies files and directory trees between local paths, pando paths
(pando://<domain>/..., of the home domain or a linked one) and web servers
(http(s) URLs, as sources only).

Large files move in blocks over -p parallel data streams per share, staged
through a bounded ring of buffers so that disk and network stay busy at once.
Every block carries a CRC32C computed where it was read, checked where it is
written; a damaged block is sent again. Large files are assembled in a hidden
.NAME.pando-part file and renamed into place when complete, and a journal of
committed blocks ($XDG_STATE_HOME/pando/transfers) lets an interrupted copy
continue with --resume, moving only what is missing. Blocks are committed
once the destination synced them; with --no-sync, once it wrote them (as
cp leaves its copy to the page cache), and a --resume first reads them back
to check their sums. Transient failures (dropped connections, a restarting
share) are retried within --retries.
Small files cost one request each way, many in flight at once.

Progress (bytes, files, rate, ETA) shows on a terminal; otherwise cp prints
nothing but errors, and --json FILE (or - for standard output) writes a
summary.`,
		Example: `  pando cp results.h5 pando://uva/data/
  pando cp -r -p 8 pando://uva/data/run42 /scratch/
  pando cp --resume big.tar pando://uva/data/big.tar
  pando cp https://example.org/genome.fa pando://uva/ref/`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if block != "" {
				n, err := cli.ParseSize(block)
				if err != nil || n < 4096 || n > 16<<20 {
					return cli.Usagef("--block %q: give a size from 4KiB to 16MiB, e.g. 1MiB", block)
				}
				o.Block = int(n)
			}
			if rateS != "" {
				bits, err := wan.ParseRate(rateS)
				if err != nil {
					return cli.Usagef("--rate: %v", err)
				}
				o.Rate = bits / 8
			}
			switch protection {
			case "private", "safe", "clear":
			default:
				return cli.Usagef("--protection %q: choose private (encrypted), safe (authenticated, not encrypted) or clear", protection)
			}
			if o.Streams < 1 || o.Streams > 64 {
				return cli.Usagef("-p %d: give from 1 to 64 parallel streams", o.Streams)
			}
			cmd.SilenceUsage = true
			var (
				once sync.Once
				gr   *cli.Grid
				gerr error
			)
			grid := func() (*cli.Grid, error) {
				once.Do(func() { gr, gerr = g.Grid(client.Options{Streams: o.Streams, Protection: protection, RenewCert: true}) })
				return gr, gerr
			}
			o.Grid = func() (*client.Client, error) {
				gr, err := grid()
				if err != nil {
					return nil, err
				}
				return gr.Home, nil
			}
			// Each pando path goes to the client of its domain.
			o.GridAt = func(ctx context.Context, gpath string) (*client.Client, error) {
				gr, err := grid()
				if err != nil {
					return nil, err
				}
				return gr.ClientFor(ctx, gpath)
			}
			defer func() {
				if gr != nil {
					gr.Close()
				}
			}()
			ctx, cancel := g.Context(cmd.Context())
			defer cancel()
			term := cli.IsTerminal(os.Stderr) && os.Getenv("CI") == ""
			if term {
				o.Progress = func(p transfer.Progress) { drawCopy(p) }
			}
			sum, err := transfer.Copy(ctx, args[:len(args)-1], args[len(args)-1], o)
			if term {
				fmt.Fprintln(os.Stderr)
			}
			if jout != "" {
				b, _ := json.MarshalIndent(sum, "", "  ")
				b = append(b, '\n')
				if jout == "-" {
					cmd.OutOrStdout().Write(b)
				} else if werr := os.WriteFile(jout, b, 0o644); werr != nil && err == nil {
					err = werr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.Recursive, "recursive", "r", false, "copy directories and everything below them")
	f.IntVarP(&o.Streams, "parallel", "p", 4, "parallel data streams per share")
	f.StringVar(&block, "block", "", "block size (default 4MiB)")
	f.StringVar(&rateS, "rate", "", "cap the rate of the whole transfer, e.g. 500mbit or 50MB/s")
	f.BoolVar(&o.Resume, "resume", false, "continue an interrupted copy: move only the blocks and files not yet at the destination")
	f.BoolVar(&o.NoSync, "no-sync", false, "leave the copy to the page cache, as cp does: do not sync each checkpoint before journaling it (a --resume then re-checks the journaled blocks)")
	f.BoolVar(&o.Verify, "verify", false, "after copying, re-read each destination file from its disk and compare it with the source")
	f.IntVar(&o.Retries, "retries", 5, "attempts per file after a transient failure (dropped connection, restarting share)")
	f.StringVar(&protection, "protection", "private", "data channel protection: private (TLS, encrypted), safe (authenticated and integrity-checked, not encrypted), clear (authenticated set-up only); the share must allow it")
	f.StringVar(&jout, "json", "", "write a JSON summary to this file (- for standard output)")
	return cmd
}

func drawCopy(p transfer.Progress) {
	el := p.Elapsed.Seconds()
	rate := float64(p.Bytes) / max(el, 1e-3)
	line := fmt.Sprintf("\r%s / %s", cli.Size(p.Bytes), cli.Size(p.BytesTotal))
	if p.Walking {
		line += "+"
	}
	line += fmt.Sprintf("  %d/%d files  %s/s", p.Files, p.FilesTotal, cli.Size(int64(rate)))
	if !p.Walking && rate > 0 && p.Bytes < p.BytesTotal {
		eta := time.Duration(float64(p.BytesTotal-p.Bytes) / rate * float64(time.Second)).Round(time.Second)
		line += "  ETA " + eta.String()
	}
	fmt.Fprintf(os.Stderr, "%-78s", line)
}
