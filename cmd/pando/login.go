package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/mount"
)

// loginSocketDirs are where agents keep login sockets: root's, and those
// of agents run by other users.
func loginSocketDirs() []string {
	dirs := []string{"/run/pando/login"}
	more, _ := filepath.Glob(filepath.Join(os.TempDir(), "pando-login-*"))
	return append(dirs, more...)
}

// loginClient finds the login socket of the agent mounted at dir (or of
// the only agent that accepts logins, if dir is "").
func loginClient(dir string) (*http.Client, error) {
	var socks []string
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		for _, d := range loginSocketDirs() {
			if s := agent.LoginSocket(d, abs); live(s) {
				socks = append(socks, s)
			}
		}
		if len(socks) == 0 {
			if mount.Mounted(abs) {
				return nil, fmt.Errorf("the mount at %s does not accept logins (its agent was started without --logins)", abs)
			}
			return nil, fmt.Errorf("no pando agent is mounted at %s", abs)
		}
	} else {
		for _, d := range loginSocketDirs() {
			found, _ := filepath.Glob(filepath.Join(d, "*.sock"))
			for _, s := range found {
				if live(s) {
					socks = append(socks, s)
				}
			}
		}
		switch len(socks) {
		case 0:
			return nil, errors.New("no pando agent on this host accepts logins (an agent does when mounted with --logins)")
		case 1:
		default:
			return nil, cli.Usagef("%d pando mounts on this host accept logins: name one with --mount DIR", len(socks))
		}
	}
	return agent.SocketClient(socks[0], 30*time.Second), nil
}

// live reports whether an agent answers at sock.
func live(sock string) bool {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// loginCall sends a request to the login socket and decodes its answer.
func loginCall(hc *http.Client, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequest(method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the pando agent: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}

func newLoginCmd(g *cli.Globals) *cobra.Command {
	var dir string
	var status bool
	var uid int
	cmd := &cobra.Command{
		Use:   "login [--mount DIR]",
		Short: "Act on a pando mount with your own credential, not the host's",
		Long: `Hands your pando credential (the configuration pando uses for you: --config,
$PANDO_CONFIG or ~/.config/pando/config.json) to the agent of a mount started
with --logins, as AFS's aklog does: from then on everything you do through that
mount runs with your own rights. The agent learns which local user you are from
the kernel, keeps the credential in memory only, and checks it with the
controller first. pando logout ends it; --status lists who is logged in.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := loginClient(dir)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if status {
				var ls []agent.Login
				if err := loginCall(hc, "GET", "/logins", nil, &ls); err != nil {
					return err
				}
				if len(ls) == 0 {
					fmt.Fprintln(w, "nobody is logged in")
				}
				for _, l := range ls {
					fmt.Fprintf(w, "uid %d\t%s\tsince %s\n", l.Uid, l.Principal, l.Since)
				}
				return nil
			}
			cfg, err := g.Config()
			if err != nil {
				return err
			}
			req := agent.LoginRequest{Cert: cfg.Cert, Key: cfg.Key}
			if cmd.Flags().Changed("uid") {
				if os.Geteuid() != 0 {
					return cli.Usagef("--uid logs another local user in, which only root may do")
				}
				req.Uid = &uid
			}
			body, _ := json.Marshal(req)
			var l agent.Login
			if err := loginCall(hc, "POST", "/login", strings.NewReader(string(body)), &l); err != nil {
				return err
			}
			fmt.Fprintf(w, "logged in: uid %d acts as %s on this mount\n", l.Uid, l.Principal)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "mount", "", "the mount point (needed when several mounts accept logins)")
	cmd.Flags().BoolVar(&status, "status", false, "list the local users logged in, and as whom")
	cmd.Flags().IntVar(&uid, "uid", 0, "log in this local uid instead of yourself (root only)")
	return cmd
}

func newLogoutCmd() *cobra.Command {
	var dir string
	var uid int
	cmd := &cobra.Command{
		Use:   "logout [--mount DIR]",
		Short: "Stop acting on a pando mount with your own credential",
		Long: `Ends your pando login at a mount: the agent forgets your credential and removes
what it cached for you; you are served as any local user with no login again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := loginClient(dir)
			if err != nil {
				return err
			}
			path := "/logout"
			if cmd.Flags().Changed("uid") {
				if os.Geteuid() != 0 {
					return cli.Usagef("--uid logs another local user out, which only root may do")
				}
				path += "?uid=" + strconv.Itoa(uid)
			}
			var l agent.Login
			if err := loginCall(hc, "POST", path, nil, &l); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged out: uid %d no longer acts as %s\n", l.Uid, l.Principal)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "mount", "", "the mount point (needed when several mounts accept logins)")
	cmd.Flags().IntVar(&uid, "uid", 0, "log this local uid out instead of yourself (root only)")
	return cmd
}
