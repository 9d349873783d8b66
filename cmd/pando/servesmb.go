package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/gateway"
)

// smbFlags are the SMB gateway's flags.
type smbFlags struct {
	gatewayFlags
	encrypt string
}

// start starts a gateway and Samba in front of it, with the gateway's
// credentials creds (nil: those of --config).
func (f *smbFlags) start(g *cli.Globals, creds *config.Config) (*gateway.Gateway, *gateway.SMB, error) {
	if f.passwords == "" {
		return nil, nil, cli.Usagef("the SMB gateway needs its password file: --passwords FILE, or --smb-passwords FILE with pando up (pando serve smb-passwd --passwords FILE USER adds a user)")
	}
	cfg, err := f.config(g, creds)
	if err != nil {
		return nil, nil, err
	}
	if _, err := gateway.ReadSMBUsers(f.passwords); err != nil {
		return nil, nil, err
	}
	exports, err := gateway.ParseSMBExports(cfg.Client.Domain, f.exports)
	if err != nil {
		return nil, nil, cli.Usagef("--export: %v", err)
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	smb, err := gw.StartSMB(gateway.SMBConfig{Listen: f.listen, Passwords: f.passwords, Encrypt: f.encrypt, Exports: exports})
	if err != nil {
		gw.Close()
		return nil, nil, err
	}
	return gw, smb, nil
}

func newServeSMBCmd(g *cli.Globals) *cobra.Command {
	var f smbFlags
	cmd := &cobra.Command{
		Use:   "smb",
		Short: "Serve the namespace and folders of it over SMB 3 through Samba, each user through a mount of their own",
		Long: `Serve the namespace to Windows and macOS desktops over SMB 3: runs Debian's
Samba (smbd and samba-dcerpcd, with a configuration, users and files of their
own below --cache-dir) over one pando mount per user of --passwords, each
acting with that user's rights. The domain is a share, \\HOST\DOMAIN, and
each --export NAME=PATH serves the folder PATH as the share \\HOST\NAME.
Needs root, FUSE, and the packages samba and libnss-wrapper. Add users with
pando serve smb-passwd. See docs/gateways.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gw, smb, err := f.start(g, nil)
			if err != nil {
				return err
			}
			defer gw.Close()
			defer smb.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "smb gateway %s of domain %s at smb://%s/%s (users: %s)\n", gw.Identity(), gw.Domain(), smb.Addr(), gw.Domain(),
				strings.Join(smb.Users(), ", "))
			printSMBExports(cmd, smb)
			stopMetrics, err := f.serveMetrics(cmd, gw)
			if err != nil {
				return err
			}
			defer stopMetrics()
			select {
			case <-cmd.Context().Done():
				return nil
			case <-smb.Exited():
				return errors.New("Samba (smbd) ended; the SMB gateway stops")
			}
		},
	}
	cmd.Flags().StringVar(&f.passwords, "passwords", "", "the SMB password file (pando serve smb-passwd; required): its users are served, each with their rights")
	cmd.Flags().StringSliceVar(&f.exports, "export", nil, "NAME=PATH: serve the global PATH (a folder of the domain) as the share NAME (repeatable or comma-separated)")
	cmd.Flags().StringVar(&f.encrypt, "encrypt", "required", "SMB 3 encryption: required, or desired (clients without it are served signed, in clear)")
	f.addCommon(cmd, "127.0.0.1:445")
	return cmd
}

// printSMBExports says where each export of smb is served.
func printSMBExports(cmd *cobra.Command, smb *gateway.SMB) {
	for _, ex := range smb.Exports() {
		fmt.Fprintf(cmd.OutOrStdout(), "smb share %s at smb://%s/%s\n", ex.Path, smb.Addr(), ex.Name)
	}
}

func newSMBPasswdCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "smb-passwd USER",
		Short: "Set a user's SMB password in an SMB gateway's password file (read from standard input)",
		Long: `Set a user's SMB password in the SMB gateway's password file (Samba's
smbpasswd format, mode 0600): SMB signs in with NTLMv2, for which Samba keeps
the NT hash of the password (MD4, unsalted), so keep the file as secret as the
passwords. A running pando serve smb serves a user added here within seconds.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return cli.Usagef("name the SMB password file with --passwords FILE")
			}
			return setPassword(cmd, "SMB password", file, args[0], gateway.SetSMBPassword)
		},
	}
	cmd.Flags().StringVar(&file, "passwords", "", "the SMB password file (made, mode 0600, if missing)")
	return cmd
}
