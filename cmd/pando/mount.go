package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/vfs"
)

// mountFlags are the agent's flags, shared by pando mount and pando up.
type mountFlags struct {
	cacheDir, cacheSize, memory, blockSize string
	maxUnsent                              string
	consistency, write, offline            string
	policies                               []string
	readAhead                              int
	metaEntries                            uint
	debug, noPassthrough, nonEmpty         bool
	logins                                 bool
	metrics                                string
	lendTo                                 []string
	mapUser, mapGroup                      []string
	nobody                                 string
}

func (f *mountFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cacheDir, "cache-dir", agent.DefaultCacheDir(), "where the agent keeps its cache (one per agent)")
	cmd.Flags().StringVar(&f.cacheSize, "cache-size", "auto", "disk space the cache may use; auto: 80% of the free space of the cache directory's file system (with what the cache already holds), at most 10GiB")
	cmd.Flags().StringVar(&f.memory, "memory", "512MiB", "memory the cache may use")
	cmd.Flags().StringVar(&f.blockSize, "block-size", "1MiB", "cache block size")
	cmd.Flags().StringVar(&f.consistency, "consistency", consistency.Default.String(), "consistency mode: strict, window=D, poll=D, callback or immutable")
	cmd.Flags().StringVar(&f.write, "write", "close", "write mode: close (send on last close), through (each write), or back (kept back under a write delegation; needs --consistency callback)")
	cmd.Flags().StringVar(&f.offline, "offline", "serve", "while a share cannot be reached: serve (its cached files and listings stay readable, read-only and marked stale; not under strict) or fail")
	cmd.Flags().StringVar(&f.maxUnsent, "max-unsent", "auto", "data not yet sent the cache accepts while a share cannot be reached (writes kept back under a write delegation), past which writes fail with EHOSTUNREACH; auto: a quarter of --cache-size (half of what the cache holds unsent before sending ahead, which also caps it)")
	cmd.Flags().StringArrayVar(&f.policies, "policy", nil, "consistency for a path prefix, e.g. /uva/releases=immutable (repeatable)")
	cmd.Flags().IntVar(&f.readAhead, "read-ahead", 0, "blocks kept in flight ahead of a sequential reader (0: 16, more on a path whose measured bandwidth-delay product asks for it, up to 64 MiB)")
	cmd.Flags().UintVar(&f.metaEntries, "meta-entries", 0, "attributes, and entries of directory listings, kept in memory (each), the least recently used dropped first (0: 200,000, at most about 120 MiB)")
	cmd.Flags().BoolVar(&f.debug, "debug-fuse", false, "log every FUSE request")
	cmd.Flags().BoolVar(&f.noPassthrough, "no-passthrough", false, "serve every read through the agent, never by the kernel straight from the cache's data file (FUSE passthrough, used when the kernel allows it for files the cache holds whole)")
	cmd.Flags().StringSliceVar(&f.lendTo, "lend-to", nil, "local users (names or uids, comma-separated) who may use the mount besides the one running the agent, with the agent's grid principal and the files' mode bits; nobody else is served (see docs/security.md)")
	cmd.Flags().BoolVar(&f.logins, "logins", false, "let each local user act with their own grid credential, handed to the agent with pando login (kept in memory only); a user with no login is served as --lend-to says (see docs/security.md)")
	cmd.Flags().StringArrayVar(&f.mapUser, "map-user", nil, "show the files of a principal as a local user's, e.g. alice@uva=alice (repeatable); the agent's own principal is always the user running it (see docs/posix.md)")
	cmd.Flags().StringArrayVar(&f.mapGroup, "map-group", nil, "show the files of a grid group as a local group's, e.g. staff@uva=staff (repeatable)")
	cmd.Flags().StringVar(&f.nobody, "nobody", "65534:65534", "local USER[:GROUP] shown for owners and groups with no local id")
	cmd.Flags().BoolVar(&f.nonEmpty, "nonempty", false, "mount over a directory that holds files, hiding them while mounted (refused otherwise)")
	cmd.Flags().StringVar(&f.metrics, "metrics", "", "also serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9750); always on the agent's control socket")
}

// serveMetrics starts the metrics listener asked for with --metrics.
func (f *mountFlags) serveMetrics(a *agent.Agent, w io.Writer) error {
	if f.metrics == "" {
		return nil
	}
	addr, err := a.ServeMetrics(f.metrics)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "metrics at http://%s/metrics\n", addr)
	return nil
}

func (f *mountFlags) config(g *cli.Globals, mountPoint string) (agent.Config, error) {
	cfg := agent.Config{MountPoint: mountPoint, Log: g.Logger(), Debug: f.debug, NoPassthrough: f.noPassthrough, NonEmpty: f.nonEmpty, Logins: f.logins}
	var err error
	if cfg.Client, err = g.Config(); err != nil {
		return cfg, err
	}
	cfg.CertRenewed = g.KeepCert(cfg.Client)
	cfg.Cache.Dir = f.cacheDir
	if f.cacheSize != "auto" {
		if cfg.Cache.DiskBytes, err = cli.ParseSize(f.cacheSize); err != nil {
			return cfg, cli.Usagef("--cache-size: %v (or auto)", err)
		}
	}
	if cfg.Cache.MemoryBytes, err = cli.ParseSize(f.memory); err != nil {
		return cfg, cli.Usagef("--memory: %v", err)
	}
	if cfg.Cache.MemoryBytes == 0 {
		cfg.Cache.MemoryBytes = -1
	}
	if cfg.Cache.BlockSize, err = cli.ParseSize(f.blockSize); err != nil || cfg.Cache.BlockSize < 4096 || cfg.Cache.BlockSize > 16<<20 {
		return cfg, cli.Usagef("--block-size must be between 4KiB and 16MiB")
	}
	if cfg.VFS.Consistency, err = consistency.Parse(f.consistency); err != nil {
		return cfg, cli.Usagef("--consistency: %v", err)
	}
	if cfg.VFS.Write, err = vfs.ParseWriteMode(f.write); err != nil {
		return cfg, cli.Usagef("--write: %v", err)
	}
	if cfg.VFS.Offline, err = vfs.ParseOffline(f.offline); err != nil {
		return cfg, cli.Usagef("--offline: %v", err)
	}
	if f.maxUnsent != "auto" {
		if cfg.VFS.MaxUnsent, err = cli.ParseSize(f.maxUnsent); err != nil || cfg.VFS.MaxUnsent <= 0 {
			return cfg, cli.Usagef("--max-unsent must be a size above zero, e.g. 256MiB, or auto")
		}
	}
	for _, p := range f.policies {
		pol, err := consistency.ParsePolicy(p)
		if err != nil {
			return cfg, cli.Usagef("--policy: %v", err)
		}
		cfg.VFS.Policies = append(cfg.VFS.Policies, pol)
	}
	if err := cfg.VFS.Check(); err != nil {
		return cfg, cli.Usagef("--write: %v", err)
	}
	cfg.VFS.ReadAhead = f.readAhead
	cfg.VFS.MetaEntries = int(min(f.metaEntries, 1<<30))
	if cfg.LendTo, err = mount.ParseLendTo(f.lendTo); err != nil {
		return cfg, cli.Usagef("%v", err)
	}
	if cfg.IDMap, err = mount.ParseIDMap(f.mapUser, f.mapGroup, f.nobody); err != nil {
		return cfg, cli.Usagef("%v", err)
	}
	return cfg, nil
}

func newMountCmd(g *cli.Globals) *cobra.Command {
	var f mountFlags
	cmd := &cobra.Command{
		Use:   "mount [flags] MOUNTPOINT",
		Short: "Mount the whole namespace as a local file system (FUSE)",
		Long: `Mount the whole namespace at MOUNTPOINT, served from one memory + disk cache.
Every request acts with this agent's grid principal, so only the local user
running the agent may use the mount, and the users named with --lend-to (who
get the files' group or other mode bits); every other local user is refused.
Stop with Ctrl-C, SIGTERM or fusermount3 -u.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(g, args[0])
			if err != nil {
				return err
			}
			a, err := agent.Start(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pando mounted at %s (consistency %s, write %s, cache %s)%s\n",
				args[0], cfg.VFS.Consistency, cfg.VFS.Write, cfg.Cache.Dir, lentNote(cfg.LendTo))
			if err := f.serveMetrics(a, cmd.OutOrStdout()); err != nil {
				a.Close()
				return err
			}
			unmounted := make(chan struct{})
			go func() { a.Wait(); close(unmounted) }()
			select {
			case <-cmd.Context().Done():
			case <-unmounted:
			}
			return a.Close()
		},
	}
	f.add(cmd)
	return cmd
}

// lentNote says which other uids a mount is lent to.
func lentNote(uids []uint32) string {
	if len(uids) == 0 {
		return ""
	}
	s := make([]string, len(uids))
	for i, u := range uids {
		s[i] = fmt.Sprint(u)
	}
	return ", lent to uids " + strings.Join(s, ",")
}

func newStatsCmd(g *cli.Globals) *cobra.Command {
	var dir string
	var asJSON, asMetrics bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show a running agent's RPC counts by kind, cache hits and misses, bytes fetched",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			ac, err := agent.Dial(dir)
			if err != nil {
				return err
			}
			if asMetrics {
				return ac.Metrics(cmd.Context(), w)
			}
			st, err := ac.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(w).Encode(st)
			}
			fmt.Fprintf(w, "mount %s  consistency %s  write %s  up %s  open files %d\n", st.MountPoint, st.Consistency, st.WriteMode, st.Uptime, st.OpenFiles)
			fmt.Fprintln(w, controllerLine(st.Controller, time.Now()))
			fmt.Fprintf(w, "opens: %d read by the kernel from the cache (passthrough), %d through the agent's page cache, %d direct; the agent answered %d reads (%s)\n",
				st.Opens.Passthrough, st.Opens.Cached, st.Opens.Direct, st.Opens.Reads, cli.Size(st.Opens.ReadBytes))
			c := st.Cache
			fmt.Fprintf(w, "cache: %d hits, %d misses, %d blocks fetched (%s), %d bad blocks dropped, %d evictions; %s on disk of %s (%s unsent), %s in memory, %d files; %s written around the page cache, %s loaded back into it\n",
				c.Hits, c.Misses, c.Fetches, cli.Size(c.BytesFetched), c.BadBlocks, c.Evictions, cli.Size(c.DiskBytes), cli.Size(c.DiskLimit), cli.Size(c.DirtyBytes), cli.Size(c.MemoryBytes), c.Files, cli.Size(c.WrittenAround), cli.Size(c.Preloaded))
			if c.Full > 0 || c.SentAhead > 0 {
				fmt.Fprintf(w, "cache: %d writes found its file system full and evicted clean blocks; %s of unsent data sent ahead of a close to make room\n", c.Full, cli.Size(c.SentAhead))
			}
			ops := make([]string, 0, len(st.RPCs))
			for op := range st.RPCs {
				ops = append(ops, op)
			}
			slices.Sort(ops)
			if st.RefusedLocal > 0 {
				fmt.Fprintf(w, "refused: %d requests from local users the mount is not lent to (pando mount --lend-to)\n", st.RefusedLocal)
			}
			for _, l := range st.Logins {
				fmt.Fprintf(w, "logged in: uid %d as %s since %s (pando login)\n", l.Uid, l.Principal, l.Since)
			}
			if st.Unsent > 0 {
				fmt.Fprintf(w, "unsent: %d files hold data not yet at their share (pando cache ls)\n", st.Unsent)
				for _, u := range st.UnsentFiles {
					fmt.Fprintf(w, "  %s\n", unsentLine(u, time.Now()))
				}
			}
			if st.Refused > 0 {
				fmt.Fprintf(w, "refused: %d files had written data their share refused (rights, quota...); dropped, never sent again\n", st.Refused)
			}
			if st.Conflicts > 0 {
				fmt.Fprintf(w, "conflicts: %d (changed at their share while this agent held unsent data)\n", st.Conflicts)
				for _, c := range st.ConflictList {
					switch {
					case c.Kept == "":
						fmt.Fprintf(w, "  %s: %s at its share; local version not kept beside it: %s\n", c.Path, c.Change, c.Reason)
					case c.Partial:
						fmt.Fprintf(w, "  %s: %s at its share; local version kept as %s (only the bytes written here, zeros elsewhere)\n", c.Path, c.Change, c.Kept)
					default:
						fmt.Fprintf(w, "  %s: %s at its share; local version kept as %s\n", c.Path, c.Change, c.Kept)
					}
				}
			}
			for share, age := range st.Staleness {
				fmt.Fprintf(w, "share %s: last invalidation poll %s ago\n", share, age)
			}
			for _, s := range st.Shares {
				if s.Up {
					continue
				}
				what := "cached files served read-only, stale"
				if s.Serving == "fail" {
					what = "its paths fail (--offline=fail)"
				}
				fmt.Fprintf(w, "share %s: UNREACHABLE for %s (%s); %s\n", s.Share, time.Since(s.Since).Round(time.Second), s.LastErr, what)
			}
			if d := st.Delegations; d != nil {
				fmt.Fprintf(w, "write delegations: %d held, %d granted, %d recalled, %d lost with data kept back\n", d.Held, d.Granted, d.Recalls, d.Lost)
			}
			rows := [][]string{{"RPC", "COUNT"}}
			for _, op := range ops {
				rows = append(rows, []string{op, fmt.Sprint(st.RPCs[op])})
			}
			return cli.Table(w, rows)
		},
	}
	cmd.Flags().StringVar(&dir, "cache-dir", agent.DefaultCacheDir(), "the agent's cache directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&asMetrics, "metrics", false, "print the agent's metrics in the Prometheus text format")
	return cmd
}

func newCacheCmd(g *cli.Globals) *cobra.Command {
	var dir string
	cmd := &cobra.Command{Use: "cache", Short: "Inspect or drop a running agent's cache"}
	cmd.PersistentFlags().StringVar(&dir, "cache-dir", agent.DefaultCacheDir(), "the agent's cache directory")
	cmd.AddCommand(&cobra.Command{
		Use:   "stats",
		Short: "Cache sizes and hit counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ac, err := agent.Dial(dir)
			if err != nil {
				return err
			}
			st, err := ac.Stats(cmd.Context())
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(st.Cache)
		},
	}, &cobra.Command{
		Use:   "ls",
		Short: "List cached files, most recently used first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ac, err := agent.Dial(dir)
			if err != nil {
				return err
			}
			entries, err := ac.Cache(cmd.Context())
			if err != nil {
				return err
			}
			rows := [][]string{{"PATH", "SIZE", "CACHED", "STATE"}}
			for _, e := range entries {
				state := ""
				if e.Dirty {
					state = "dirty"
				}
				if e.Pinned {
					state = strings.TrimSpace(state + " open")
				}
				rows = append(rows, []string{e.Name, cli.Size(e.Size), cli.Size(min(e.Cached, e.Size)), state})
			}
			return cli.Table(cmd.OutOrStdout(), rows)
		},
	}, &cobra.Command{
		Use:   "drop PATH",
		Short: "Drop the cached data of PATH and everything below it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, err := agent.Dial(dir)
			if err != nil {
				return err
			}
			n, err := ac.Drop(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dropped %d files\n", n)
			return nil
		},
	})
	return cmd
}

// unsentLine describes a file with unsent data for pando stats: its size,
// whether a write delegation keeps it back, and why it waits.
func unsentLine(u vfs.UnsentFile, now time.Time) string {
	line := u.Path + ": " + cli.Size(u.Bytes)
	if u.KeptBack {
		line += ", kept back under a write delegation"
	}
	if u.Cause == "" {
		return line
	}
	what := ""
	switch u.Cause {
	case "ENOSPC":
		what = " (the share's disk is full)"
	case "EHOSTUNREACH":
		what = " (the share cannot be reached)"
	}
	return fmt.Sprintf("%s; %d sends failed, the last %s ago: %s%s: %s", line, u.Attempts, now.Sub(u.Last).Round(time.Second), u.Cause, what, u.Error)
}
