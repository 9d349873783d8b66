package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/gateway"
	"pando.dev/pando/internal/vfs"
)

// gatewayFlags are a gateway's flags.
type gatewayFlags struct {
	listen, cacheDir, cacheSize, memory, consistency, write string
	passwords, tlsCert, tlsKey                              string
	s3Keys, hostSuffix, buckets, metrics                    string
	insecure                                                bool
	exports, allow                                          []string // NFS
}

func (f *gatewayFlags) add(cmd *cobra.Command, addr string, proto string) {
	s3 := proto == "s3"
	if proto == "nfs" {
		cmd.Flags().StringSliceVar(&f.exports, "export", nil, "PATH=PRINCIPAL: serve the global PATH to NFS clients, every request made as PRINCIPAL (repeatable or comma-separated; required)")
		cmd.Flags().StringSliceVar(&f.allow, "allow", nil, "client networks served, CIDR or address (repeatable or comma-separated; required): NFS clients are not authenticated")
	} else if s3 {
		cmd.Flags().StringVar(&f.s3Keys, "keys", "", "an S3 access key file (pando serve s3-key) instead of the keys the controller keeps (pando user s3-key)")
		cmd.Flags().StringVar(&f.hostSuffix, "host-suffix", "", "also take virtual-host-style requests: the bucket named in the host name BUCKET.SUFFIX")
		cmd.Flags().StringVar(&f.buckets, "buckets", "", "the global path of a folder whose folders are the buckets, made and removed over S3 by users with the rights to (default: the names below the domain, its mounts)")
	} else {
		cmd.Flags().StringVar(&f.passwords, "passwords", "", "a password file (pando serve passwd) instead of the passwords the controller keeps (pando user passwd), for HTTP Basic authentication over TLS")
	}
	f.addCommon(cmd, addr)
	if proto == "nfs" {
		return // no TLS in NFSv3
	}
	cmd.Flags().StringVar(&f.tlsCert, "tls-cert", "", "the certificate to serve TLS with (default: one the gateway makes and keeps in --cache-dir as gateway.crt)")
	cmd.Flags().StringVar(&f.tlsKey, "tls-key", "", "the key of --tls-cert")
	cmd.Flags().BoolVar(&f.insecure, "insecure", false, "serve plain HTTP, without TLS (only on a loopback address)")
}

// addCommon adds the flags every gateway has.
func (f *gatewayFlags) addCommon(cmd *cobra.Command, addr string) {
	cmd.Flags().StringVar(&f.listen, "listen", addr, "address to listen on")
	cmd.Flags().StringVar(&f.cacheDir, "cache-dir", agent.DefaultCacheDir()+"-gateway", "where the gateway keeps its cache (one per user it serves, below it)")
	cmd.Flags().StringVar(&f.cacheSize, "cache-size", "1GiB", "disk space each user's cache may use")
	cmd.Flags().StringVar(&f.memory, "memory", "64MiB", "memory each user's cache may use")
	cmd.Flags().StringVar(&f.consistency, "consistency", consistency.Default.String(), "consistency mode: strict, window=D, poll=D or immutable")
	cmd.Flags().StringVar(&f.write, "write", "close", "write mode: close (a PUT returns once the share has the file) or through")
	cmd.Flags().StringVar(&f.metrics, "metrics", "", "also serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9751)")
}

// start starts a gateway and its front end for proto (http, webdav or
// s3), with the gateway's credentials creds (nil: those of --config).
// config is the gateway's configuration from the flags, with the
// gateway's credentials creds (nil: those of --config).
func (f *gatewayFlags) config(g *cli.Globals, creds *config.Config) (gateway.Config, error) {
	cfg := gateway.Config{Log: g.Logger(), Client: creds}
	var err error
	if cfg.Client == nil {
		if cfg.Client, err = g.Config(); err != nil {
			return cfg, err
		}
	}
	cfg.Cache = cache.Options{Dir: f.cacheDir}
	if cfg.Cache.DiskBytes, err = cli.ParseSize(f.cacheSize); err != nil {
		return cfg, cli.Usagef("--cache-size: %v", err)
	}
	if cfg.Cache.MemoryBytes, err = cli.ParseSize(f.memory); err != nil {
		return cfg, cli.Usagef("--memory: %v", err)
	}
	if cfg.VFS.Consistency, err = consistency.Parse(f.consistency); err != nil {
		return cfg, cli.Usagef("--consistency: %v", err)
	}
	if cfg.VFS.Write, err = vfs.ParseWriteMode(f.write); err != nil {
		return cfg, cli.Usagef("--write: %v", err)
	}
	if err := cfg.VFS.Check(); err != nil {
		return cfg, cli.Usagef("--write: %v", err)
	}
	return cfg, nil
}

func (f *gatewayFlags) start(g *cli.Globals, creds *config.Config, proto string) (*gateway.Gateway, net.Listener, string, error) {
	cfg, err := f.config(g, creds)
	if err != nil {
		return nil, nil, "", err
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return nil, nil, "", cli.Usagef("--listen %q: %v (e.g. 127.0.0.1:8443)", f.listen, err)
	}
	if ip := net.ParseIP(host); f.insecure && (ip == nil || !ip.IsLoopback()) {
		return nil, nil, "", cli.Usagef("--insecure serves in clear text, which is allowed only on a loopback address (e.g. 127.0.0.1:8080), not %s", f.listen)
	}
	if proto == "nfs" {
		return f.startNFS(cfg)
	}
	var pw *gateway.Passwords
	if f.passwords != "" {
		if pw, err = gateway.OpenPasswords(f.passwords); err != nil {
			return nil, nil, "", err
		}
	}
	var keys *gateway.S3Keys
	if proto == "s3" {
		if f.s3Keys != "" {
			if keys, err = gateway.OpenS3Keys(f.s3Keys); err != nil {
				return nil, nil, "", err
			}
		}
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	var certp *tlsCertRef
	if !f.insecure {
		hosts := []string{host, "localhost", "127.0.0.1"}
		cert, file, err := gateway.ServingCert(f.tlsCert, f.tlsKey, f.cacheDir, hosts)
		if err != nil {
			gw.Close()
			return nil, nil, "", err
		}
		certp = &tlsCertRef{cert: cert, file: file}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		gw.Close()
		return nil, nil, "", err
	}
	var cert *tls.Certificate
	scheme := "http"
	if certp != nil {
		scheme, cert = "https", &certp.cert
	}
	if proto == "s3" {
		if err := gw.StartS3(ln, cert, gateway.S3Options{Keys: keys, HostSuffix: f.hostSuffix, Buckets: f.buckets}); err != nil {
			ln.Close()
			gw.Close()
			return nil, nil, "", err
		}
	} else {
		go gw.Serve(ln, cert, gw.NewAuthenticator(pw), proto == "webdav")
	}
	note := ""
	if certp != nil {
		note = " (its certificate: " + certp.file + ")"
	}
	return gw, ln, fmt.Sprintf("%s://%s/%s", scheme, ln.Addr(), note), nil
}

func newServeCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the namespace over HTTP(S), WebDAV, S3 or NFSv3, each request with its user's rights",
		Long: `Serve the namespace to clients that cannot mount it. The gateway runs with
credentials of the gateway role (pando user add NAME --gateway, given with
--config), which have no rights of their own: people sign in with their pando
user certificate or a password of --passwords, and every request is made in
their name, with their rights. NFS clients cannot be authenticated: each NFS
export is served as one principal, to the client networks listed. See
docs/gateways.md.`,
	}
	for _, proto := range []struct {
		name, short, addr string
	}{
		{"http", "Serve the namespace over HTTP(S): GET with ranges, HEAD, listings, PUT, DELETE", "127.0.0.1:8443"},
		{"webdav", "Serve the namespace over WebDAV (class 1 and 2) and HTTP(S)", "127.0.0.1:8444"},
		{"s3", "Serve the namespace over S3: the names below the domain as buckets, requests signed with SigV4", "127.0.0.1:8445"},
		{"nfs", "Serve the namespace over NFSv3 to listed client networks, each export as one principal", "127.0.0.1:2049"},
	} {
		var f gatewayFlags
		c := &cobra.Command{
			Use:   proto.name,
			Short: proto.short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				gw, ln, url, err := f.start(g, nil, proto.name)
				if err != nil {
					return err
				}
				defer gw.Close()
				defer ln.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "%s gateway %s of domain %s at %s\n", proto.name, gw.Identity(), gw.Domain(), url)
				stopMetrics, err := f.serveMetrics(cmd, gw)
				if err != nil {
					return err
				}
				defer stopMetrics()
				<-cmd.Context().Done()
				return nil
			},
		}
		f.add(c, proto.addr, proto.name)
		cmd.AddCommand(c)
	}
	var file string
	passwd := &cobra.Command{
		Use:   "passwd USER",
		Short: "Set a user's password in a gateway's password file (read from standard input)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return cli.Usagef("name the password file with --passwords FILE")
			}
			return setPassword(cmd, "password", file, args[0], gateway.SetPassword)
		},
	}
	passwd.Flags().StringVar(&file, "passwords", "", "the password file (made, mode 0600, if missing)")
	var keyFile string
	s3key := &cobra.Command{
		Use:   "s3-key USER",
		Short: "Make an S3 access key for a user in a gateway's key file, and show it with its secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" {
				return cli.Usagef("name the key file with --keys FILE")
			}
			access, secret, err := gateway.NewS3Key(keyFile, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "access key %s for %s\nsecret key %s\n", access, args[0], secret)
			return nil
		},
	}
	s3key.Flags().StringVar(&keyFile, "keys", "", "the key file (made, mode 0600, if missing)")
	cmd.AddCommand(passwd, s3key, newServeSMBCmd(g), newSMBPasswdCmd())
	return cmd
}

type tlsCertRef struct {
	cert tls.Certificate
	file string
}

// upServe is what pando up's flags say of its gateways.
type upServe struct {
	specs                        []string // PROTO=ADDR
	passwords, s3Keys, s3Buckets string
	smbPasswords                 string
	nfsExports, nfsAllow         []string
	smbExports                   []string // NAME=PATH
	consistency                  string   // the mount's, which the gateways keep too
}

// upGateways starts the gateways asked for with pando up --serve
// PROTO=ADDR, with credentials of a gateway "gateway" it makes at first
// use and keeps in state/gateway.json. It returns a function that stops
// them.
func upGateways(cmd *cobra.Command, g *cli.Globals, cl *client.Client, admin *config.Config, state string, o upServe) (func(), error) {
	specs := o.specs
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	if len(specs) == 0 {
		return stop, nil
	}
	creds, err := gateway.Credentials(cmd.Context(), cl.Admin(), admin, filepath.Join(state, "gateway.json"), "gateway")
	if err != nil {
		return stop, err
	}
	for _, spec := range specs {
		proto, addr, ok := strings.Cut(spec, "=")
		if !ok || (proto != "http" && proto != "webdav" && proto != "s3" && proto != "nfs" && proto != "smb") || addr == "" {
			stop()
			return func() {}, cli.Usagef("--serve %q: give PROTO=ADDR with PROTO http, webdav, s3, nfs or smb, e.g. --serve webdav=127.0.0.1:8444", spec)
		}
		f := gatewayFlags{listen: addr, cacheDir: filepath.Join(state, "gateway-"+proto), cacheSize: "1GiB", memory: "64MiB",
			consistency: o.consistency, write: "close", passwords: o.passwords, s3Keys: o.s3Keys, buckets: o.s3Buckets,
			exports: o.nfsExports, allow: o.nfsAllow}
		if proto == "smb" {
			f.passwords, f.exports = o.smbPasswords, o.smbExports
			sf := smbFlags{gatewayFlags: f}
			gw, smb, err := sf.start(g, creds)
			if err != nil {
				stop()
				return func() {}, fmt.Errorf("--serve %s: %w", spec, err)
			}
			stops = append(stops, func() { smb.Close(); gw.Close() })
			fmt.Fprintf(cmd.OutOrStdout(), "smb gateway at smb://%s/%s\n", smb.Addr(), gw.Domain())
			printSMBExports(cmd, smb)
			continue
		}
		if proto == "nfs" && len(f.exports) == 0 {
			f.exports = []string{"/" + admin.Domain + "=" + admin.User}
		}
		if proto == "nfs" && len(f.allow) == 0 {
			f.allow = loopbackNets
		}
		gw, ln, url, err := f.start(g, creds, proto)
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("--serve %s: %w", spec, err)
		}
		stops = append(stops, func() { ln.Close(); gw.Close() })
		fmt.Fprintf(cmd.OutOrStdout(), "%s gateway at %s\n", proto, url)
	}
	return stop, nil
}

// setPassword reads user's password (what) from standard input and sets
// it in file with set.
func setPassword(cmd *cobra.Command, what, file, user string, set func(file, user, pw string) error) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s for %s: ", what, user)
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if err != nil && line == "" {
		return errors.New("no password was given on standard input")
	}
	if err := set(file, user, strings.TrimRight(line, "\r\n")); err != nil {
		return err
	}
	abs, _ := filepath.Abs(file)
	fmt.Fprintf(cmd.OutOrStdout(), "\n%s of %s set in %s\n", what, user, abs)
	return nil
}

// serveMetrics serves gw's metrics at --metrics, if given, until the
// function returned is called.
func (f *gatewayFlags) serveMetrics(cmd *cobra.Command, gw *gateway.Gateway) (func(), error) {
	if f.metrics == "" {
		return func() {}, nil
	}
	ml, err := gw.ServeMetrics(f.metrics)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "metrics at http://%s/metrics\n", ml.Addr())
	return func() { ml.Close() }, nil
}
