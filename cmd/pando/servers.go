package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/controller"
	"pando.dev/pando/internal/share"
	"pando.dev/pando/internal/wire"
)

func newControllerCmd(g *cli.Globals) *cobra.Command {
	var cfg controller.Config
	var metrics string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run a domain's controller (namespace, users, ACLs, CA, tokens)",
		Long: `Run a domain's controller. At first start it creates the domain, its CA and an
administrator, whose credentials it writes to STATE/admin.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Log = g.Logger()
			if cfg.Relay != "" && !cmd.Flags().Changed("listen") {
				cfg.Listen = "" // reached through the relay only: no port open
			}
			c, err := controller.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			if metrics != "" {
				addr, err := c.ServeMetrics(metrics)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "metrics at http://%s/metrics\n", addr)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "controller of domain %s listening on %s\nadministrator credentials: %s\n", c.Domain(), c.Addr(), c.AdminBundlePath())
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&cfg.StateDir, "state", ".pando/controller", "state directory (database, CA, admin credentials)")
	cmd.Flags().StringVar(&cfg.Domain, "domain", "", "domain name (required at first start)")
	cmd.Flags().StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "address to listen on")
	cmd.Flags().StringVar(&cfg.Advertise, "advertise", "", "address clients dial (default: the listen address)")
	cmd.Flags().StringVar(&cfg.Relay, "relay", "", "be served through the relay at HOST:PORT (pando relay), dialling out to it; without --listen the controller opens no port (the relay must trust the domain's CA: start once without it to create the domain)")
	cmd.Flags().DurationVar(&cfg.TokenTTL, "token-ttl", 10*time.Minute, "lifetime of the access tokens the controller signs")
	cmd.Flags().DurationVar(&cfg.CertTTL, "cert-ttl", 2*365*24*time.Hour, "lifetime of the certificates of users and gateways (long-running clients renew theirs when a third is left)")
	cmd.Flags().StringVar(&cfg.Store, "store", "", "where the domain is kept: etcd://HOST:2379,HOST:2379 (shared by several controllers), or bbolt in --state (the default)")
	addEtcdFlags(cmd, &cfg.Etcd)
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus metrics (controllers, store members, shares) on this address")
	return cmd
}

func newShareCmd(g *cli.Globals) *cobra.Command {
	var rc share.RunConfig
	var lf limitFlags
	cmd := &cobra.Command{
		Use:   "share",
		Short: "Export a local directory to the domain, or list shares (share ls)",
		Long: `Export a local directory to the domain. The first run registers the share with
the controller using an administrator's credentials (--config) and keeps the
share's own certificate in --state; mount it with 'pando ns mount'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rc.Root == "" || rc.Name == "" {
				return cli.Usagef("pando share needs --root DIR and --name NAME")
			}
			cfg, err := g.Config()
			if err != nil && !errors.Is(err, config.ErrNoConfig) {
				return err
			}
			rc.Credentials = cfg
			if rc.StateDir == "" {
				rc.StateDir = filepath.Join(filepath.Dir(config.DefaultPath()), "shares")
			}
			rc.Log = g.Logger()
			if rc.Relay != "" && !cmd.Flags().Changed("listen") {
				rc.Listen = "" // reached through the relay only: no port open
			}
			if rc.Limits, err = lf.limits(); err != nil {
				return err
			}
			for _, p := range rc.Protection {
				if !slices.Contains(share.Protections, p) {
					return cli.Usagef("--protection %q: choose from private, safe and clear", p)
				}
			}
			s, err := share.Start(cmd.Context(), rc)
			if err != nil {
				return err
			}
			defer s.Close()
			if rc.IDRules != "" {
				reloadOnHangUp(cmd.Context(), rc.Log, []*share.Running{s})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "share %s exporting %s on %s\n", rc.Name, rc.Root, strings.Join(s.Addrs, " and "))
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&rc.Root, "root", "", "directory to export")
	cmd.Flags().StringVar(&rc.Name, "name", "", "share name")
	cmd.Flags().StringVar(&rc.Listen, "listen", "127.0.0.1:0", "address to listen on")
	cmd.Flags().StringVar(&rc.Advertise, "advertise", "", "address others dial (for NAT, firewalls, pando wan; default the listen address)")
	cmd.Flags().StringVar(&rc.RelayAdvertise, "relay-advertise", "", "the relay's HOST:PORT as clients dial it, where that differs from --relay (NAT, pando wan)")
	cmd.Flags().StringVar(&rc.Relay, "relay", "", "be served through the relay at HOST:PORT (pando relay), dialling out to it; without --listen the share opens no port")
	cmd.Flags().StringVar(&rc.StateDir, "state", "", "where the share keeps its certificate (default next to the client configuration)")
	cmd.Flags().StringVar(&rc.Controller, "controller", "", "controller address (default: from the configuration)")
	cmd.Flags().StringSliceVar(&rc.Protection, "protection", []string{"private", "safe"}, "data channel protections clients may use: private (TLS), safe (authenticated, not encrypted), clear (authenticated set-up only)")
	cmd.Flags().StringVar(&rc.Owner, "owner", "", "USER[:GROUP] that owns what clients create, for a share run as root (default: the owner of --root, or nobody if that is root)")
	cmd.Flags().BoolVar(&rc.AllowSetID, "allow-setid", false, "let clients make setuid and setgid files (off: the bits are dropped)")
	cmd.Flags().StringVar(&rc.IDRules, "id-rules", "", "a file of rules PRINCIPAL ACCOUNT[:GROUP] choosing the local account that owns what principals of other domains create, for a share run as root (default: the --owner account; re-read on SIGHUP; see docs/security.md)")
	lf.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List the shares registered with the controller",
		Args:  cobra.NoArgs,
		RunE: withClient(g, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			shares, err := c.Admin().ShareList(cmd.Context())
			if err != nil {
				return err
			}
			rows := [][]string{{"NAME", "STATE", "ADDRESS", "LAST SEEN"}}
			for _, s := range shares {
				state := "offline"
				if s.Online {
					state = "online"
				}
				rows = append(rows, []string{s.Name, state, strings.Join(s.Addrs, ","), time.Unix(0, s.LastSeen).Format(time.DateTime)})
			}
			return cli.Table(cmd.OutOrStdout(), rows)
		}),
	})
	return cmd
}

func newUpCmd(g *cli.Globals) *cobra.Command {
	var (
		state, domain, listen string
		dirs                  []string
		noConfig              bool
		owner, idRules        string
		allowSetID            bool
		mountDir              string
		mf                    mountFlags
		lf                    limitFlags
		serve                 []string
		passwords, s3Keys     string
		s3Buckets             string
		nfsExports, nfsAllow  []string
		smbPasswords          string
		smbExports            []string
		relayAddr             string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a whole domain in one process: controller and shares",
		Long: `Start pando on its embedded default: a controller (state in ./.pando) and one
share per --share DIR, mounted at /<domain>/<basename of DIR>. The administrator's
client configuration is written so that the CLI works at once. Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			log := g.Logger()
			if len(dirs) == 0 {
				dirs = []string{filepath.Join(state, "data")}
				if err := os.MkdirAll(dirs[0], 0o755); err != nil {
					return err
				}
			}
			limits, err := lf.limits()
			if err != nil {
				return err
			}
			names := map[string]string{}
			for _, d := range dirs {
				fi, err := os.Stat(d)
				if err != nil || !fi.IsDir() {
					return cli.Usagef("--share %s: not a directory", d)
				}
				abs, _ := filepath.Abs(d)
				name := shareName(abs)
				if other, dup := names[name]; dup {
					return cli.Usagef("--share %s and --share %s would both be named %q; rename one directory", other, d, name)
				}
				names[name] = abs
			}
			c, err := controller.Start(ctx, controller.Config{StateDir: filepath.Join(state, "controller"), Domain: domain, Listen: listen, Log: log})
			if err != nil {
				return err
			}
			defer c.Close()
			admin, err := config.Load(c.AdminBundlePath())
			if err != nil {
				return err
			}
			// One audit log for the shares, which keep one state directory.
			shareState := filepath.Join(state, "shares")
			if err := os.MkdirAll(shareState, 0o700); err != nil {
				return err
			}
			shareLog, err := audit.Open(filepath.Join(shareState, audit.FileName), audit.Options{Domain: c.Domain(), Log: log})
			if err != nil {
				return err
			}
			defer shareLog.Close()
			var shares []*share.Running
			defer func() {
				for _, s := range shares {
					s.Close()
				}
			}()
			cl, err := g.ClientFor(admin)
			if err != nil {
				return err
			}
			defer cl.Close()
			for name, dir := range names {
				shareListen := "127.0.0.1:0"
				if relayAddr != "" {
					shareListen = "" // reached through the relay only
				}
				s, err := share.Start(ctx, share.RunConfig{Name: name, Root: dir, Listen: shareListen, Relay: relayAddr,
					StateDir: shareState, Credentials: admin, Log: log, Owner: owner, AllowSetID: allowSetID, Limits: limits, Audit: shareLog, IDRules: idRules})
				if err != nil {
					return err
				}
				shares = append(shares, s)
				prefix := "/" + c.Domain() + "/" + name
				if err := cl.Admin().MountAdd(ctx, prefix, name, ""); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				fmt.Fprintf(out, "share %-12s %s  ->  %s\n", name, dir, prefix)
			}
			if idRules != "" {
				reloadOnHangUp(ctx, log, shares)
			}
			// The configuration is written once every share is registered
			// and mounted: pando wait, which waits for it and then for the
			// shares the controller knows, would otherwise see the first
			// share alone.
			cfgPath, note := installConfig(g, admin, c.AdminBundlePath(), noConfig)
			if mountDir != "" {
				if !cmd.Flags().Changed("cache-dir") {
					mf.cacheDir = filepath.Join(state, "cache")
				}
				acfg, err := mf.config(&cli.Globals{ConfigPath: c.AdminBundlePath(), Verbose: g.Verbose}, mountDir)
				if err != nil {
					return err
				}
				acfg.Client = admin
				a, err := agent.Start(acfg)
				if err != nil {
					return err
				}
				defer a.Close()
				fmt.Fprintf(out, "namespace mounted at %s (consistency %s, write %s)%s\n", mountDir, acfg.VFS.Consistency, acfg.VFS.Write, lentNote(acfg.LendTo))
				if err := mf.serveMetrics(a, out); err != nil {
					return err
				}
			}
			stopGateways, err := upGateways(cmd, g, cl, admin, state, upServe{specs: serve, passwords: passwords,
				s3Keys: s3Keys, s3Buckets: s3Buckets, smbPasswords: smbPasswords, nfsExports: nfsExports, nfsAllow: nfsAllow,
				smbExports: smbExports, consistency: mf.consistency})
			if err != nil {
				return err
			}
			defer stopGateways()
			fmt.Fprintf(out, "\npando is up: domain %s, controller %s\n", c.Domain(), c.Addr())
			fmt.Fprintf(out, "administrator credentials: %s%s\n\n", cfgPath, note)
			fmt.Fprintf(out, "Try:\n  pando ls /%s\n  pando put README.md /%s/%s/\n  pando user add alice     # writes her credential bundle beside your configuration\n  pando acl set /%s/%s alice read\n\nCtrl-C stops pando.\n",
				c.Domain(), c.Domain(), firstName(names), c.Domain(), firstName(names))
			<-ctx.Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", ".pando", "state directory")
	cmd.Flags().StringVar(&domain, "domain", "local", "domain name (used at first start)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7070", "controller address")
	cmd.Flags().StringArrayVar(&dirs, "share", nil, "directory to export (repeatable; default STATE/data)")
	cmd.Flags().BoolVar(&noConfig, "no-config", false, "do not write the administrator's configuration to the default place")
	cmd.Flags().StringVar(&mountDir, "mount", "", "also mount the namespace here (FUSE)")
	cmd.Flags().StringArrayVar(&serve, "serve", nil, "also serve the namespace: http=ADDR, webdav=ADDR, s3=ADDR, nfs=ADDR or smb=ADDR (repeatable; see pando serve)")
	cmd.Flags().StringSliceVar(&nfsExports, "nfs-export", nil, "exports of --serve nfs=ADDR: PATH=PRINCIPAL (default: /DOMAIN as the administrator)")
	cmd.Flags().StringSliceVar(&nfsAllow, "nfs-allow", nil, "client networks of --serve nfs=ADDR (default: loopback only)")
	cmd.Flags().StringVar(&passwords, "passwords", "", "a password file for the gateways of --serve (pando serve passwd)")
	cmd.Flags().StringVar(&s3Keys, "s3-keys", "", "the S3 access key file for --serve s3=ADDR (pando serve s3-key)")
	cmd.Flags().StringVar(&s3Buckets, "s3-buckets", "", "the folder whose folders are the buckets of --serve s3=ADDR, made and removed over S3 (see pando serve s3 --buckets)")
	cmd.Flags().StringVar(&smbPasswords, "smb-passwords", "", "the SMB password file for --serve smb=ADDR (pando serve smb-passwd)")
	cmd.Flags().StringSliceVar(&smbExports, "smb-export", nil, "folders --serve smb=ADDR serves as shares of their own: NAME=PATH (repeatable or comma-separated)")
	cmd.Flags().StringVar(&owner, "owner", "", "USER[:GROUP] that owns what clients create in the shares, when run as root (default: each directory's owner, or nobody)")
	cmd.Flags().StringVar(&idRules, "id-rules", "", "a file of rules PRINCIPAL ACCOUNT[:GROUP] choosing the local account that owns what principals of other domains create in the shares (see pando share --id-rules)")
	cmd.Flags().BoolVar(&allowSetID, "allow-setid", false, "let clients make setuid and setgid files in the shares")
	cmd.Flags().StringVar(&relayAddr, "relay", "", "serve the shares only through the relay at HOST:PORT (pando relay): they dial out to it and open no port")
	mf.add(cmd)
	lf.add(cmd)
	return cmd
}

// installConfig makes the administrator's credentials the default client
// configuration, unless another domain's configuration is already there.
func installConfig(g *cli.Globals, admin *config.Config, bundle string, skip bool) (string, string) {
	if g.ConfigPath != "" || skip {
		return bundle, fmt.Sprintf("\n  (use them with: export PANDO_CONFIG=%s)", bundle)
	}
	def := config.DefaultPath()
	if cur, err := config.Load(def); err == nil && cur.CA != admin.CA {
		return bundle, fmt.Sprintf("\n  (%s belongs to another domain and was left alone; use: export PANDO_CONFIG=%s)", def, bundle)
	}
	if err := admin.Save(def); err != nil {
		return bundle, fmt.Sprintf("\n  (could not write %s: %v; use: export PANDO_CONFIG=%s)", def, err, bundle)
	}
	return def, ""
}

// shareName derives a share name from a directory's base name.
func shareName(dir string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(filepath.Base(dir)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.' && b.Len() > 0:
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	s := strings.Trim(b.String(), "-.")
	if s == "" {
		s = "data"
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func firstName(m map[string]string) string {
	best := ""
	for k := range m {
		if best == "" || k < best {
			best = k
		}
	}
	return best
}

// limitFlags are a share's limits per principal.
type limitFlags struct {
	l       share.Limits
	pending string
}

func (f *limitFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.l.Handles, "max-open", share.DefaultMaxHandles, "files one principal may have open at a share")
	fl.IntVar(&f.l.Conns, "max-conns", share.DefaultMaxConns, "connections one principal may have open to a share")
	fl.IntVar(&f.l.Requests, "max-requests", share.DefaultMaxRequests, "requests of one principal a share serves at once")
	fl.StringVar(&f.pending, "max-pending-writes", "256MiB", "write data of one principal a share holds received and not yet written")
	fl.IntVar(&f.l.TotalHandles, "max-open-total", 0, "files all principals together may have open at a share (default half the descriptors the process may open)")
}

func (f *limitFlags) limits() (share.Limits, error) {
	n, err := cli.ParseSize(f.pending)
	if err != nil || n < wire.MaxData {
		return share.Limits{}, cli.Usagef("--max-pending-writes %q: give a size of at least 16MiB (one write's most), such as 256MiB", f.pending)
	}
	l := f.l
	l.PendingWrites = n
	for _, v := range []struct {
		name string
		n    int
	}{{"--max-open", l.Handles}, {"--max-conns", l.Conns}, {"--max-requests", l.Requests}} {
		if v.n < 1 {
			return share.Limits{}, cli.Usagef("%s %d: give a number of at least 1", v.name, v.n)
		}
	}
	if l.TotalHandles < 0 {
		return share.Limits{}, cli.Usagef("--max-open-total %d: give a positive number, or 0 for the default", l.TotalHandles)
	}
	return l, nil
}

// reloadOnHangUp has the shares read their identity rules again on
// SIGHUP, until ctx ends; a file that is refused is logged, and the rules
// in force stay.
func reloadOnHangUp(ctx context.Context, log *slog.Logger, shares []*share.Running) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				for _, s := range shares {
					if err := s.ReloadIDRules(); err != nil {
						log.Error(err.Error())
					} else {
						log.Info("identity rules read again")
					}
				}
			}
		}
	}()
}
