package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/bench"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/wan"
)

// newBenchCmd is `pando bench`: the seeds' experiments on this machine.
func newBenchCmd() *cobra.Command {
	var (
		quick, big     bool
		jsonOut, plots string
		rtts           []time.Duration
		rate           string
		modes          []string
	)
	var list strings.Builder
	for _, s := range bench.Scenarios() {
		fmt.Fprintf(&list, "  %-11s %s\n", s.Name, s.About)
	}
	cmd := &cobra.Command{
		Use:   "bench SCENARIO... | all",
		Short: "Run pando's benchmarks beside their references, on this machine",
		Long: `bench starts what a scenario needs (a controller, shares, agents with FUSE
mounts, WAN emulators) in a temporary folder, runs it, cleans up and prints
a table: each figure beside its reference measured in the same run (local
disk, the raw link) and the ratio of the two.

Scenarios:
` + list.String() + `
--quick runs small sizes, once each (all scenarios in about two minutes): a
smoke test whose figures are marked as such. --rtt and --rate set the emulated
link of the wan and walk scenarios (and the first --rtt that of make and lock).
Mounting needs FUSE (/dev/fuse and fusermount3).`,
		Example: `  pando bench read --quick
  pando bench wan --rtt 40ms --rate 200mbit --plot plots/
  pando bench all --json results.json --plot plots/`,
		Args:      cobra.MinimumNArgs(1),
		ValidArgs: append(bench.Names(), "all"), // for shell completion
		RunE: func(cmd *cobra.Command, args []string) error {
			var todo []bench.Scenario
			for _, name := range args {
				if name == "all" {
					todo = append(todo, bench.Scenarios()...)
					continue
				}
				s, ok := bench.Find(name)
				if !ok {
					return cli.Usagef("no benchmark scenario %q; choose from %s, or all", name, strings.Join(bench.Names(), ", "))
				}
				todo = append(todo, s)
			}
			bits, err := wan.ParseRate(rate)
			if err != nil {
				return cli.Usagef("%v", err)
			}
			cmd.SilenceUsage = true
			for _, m := range modes {
				if _, err := consistency.Parse(strings.TrimSuffix(m, "+back")); err != nil {
					return cli.Usagef("--modes: %v", err)
				}
			}
			o := bench.Options{Quick: quick, Big: big, RTTs: rtts, Rate: bits, Modes: modes}
			term := cli.IsTerminal(os.Stderr) && os.Getenv("CI") == ""
			start := time.Now()
			var rep bench.Report
			for i, s := range todo {
				if term {
					o.Progress = func(msg string) {
						fmt.Fprintf(os.Stderr, "\r[%d/%d %s] %-70.70s", i+1, len(todo), time.Since(start).Round(time.Second), msg)
					}
				}
				rows, err := s.Run(cmd.Context(), o)
				if term {
					fmt.Fprintf(os.Stderr, "\r%-90s\r", "")
				}
				if err != nil {
					return fmt.Errorf("bench %s: %w", s.Name, err)
				}
				for i := range rows {
					rows[i].Quick = quick
				}
				rep.Add(rows...)
			}
			if err := rep.Print(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonOut != "" {
				if err := rep.WriteJSON(jsonOut); err != nil {
					return fmt.Errorf("writing results: %w", err)
				}
			}
			if plots != "" {
				files, err := rep.Plot(plots)
				if err != nil {
					return fmt.Errorf("writing plots: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "plots: %d files in %s\n", len(files), plots)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "small sizes, once each (see above)")
	f.BoolVar(&big, "big", false, "walk: a tree of 20,000 files in 2,000 directories (default 2,000 in 100)")
	f.StringVar(&jsonOut, "json", "", "write the raw results to this file")
	f.StringVar(&plots, "plot", "", "write a plot (SVG and PNG) per scenario and metric to this folder")
	f.DurationSliceVar(&rtts, "rtt", nil, "round-trip `times` of the emulated link, comma-separated (default: 0,10ms,40ms,80ms for wan and transfer; make, lock and recall take the first, else their own)")
	f.Lookup("rtt").DefValue = "" // nil: each scenario's own, said above (pflag would add "(default [])")
	f.StringVar(&rate, "rate", "1gbit", "rate cap per direction of the emulated link")
	f.StringSliceVar(&modes, "modes", nil, "consistency modes for make and lock (default: each scenario's own list; MODE+back adds write mode back)")
	return cmd
}
