package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// loginClient finds the login socket of the agent mounted at dir (or of
// the only agent that accepts logins, if dir is ""). Only the kernel's
// list of mounts is believed: a socket is used only if the process
// serving it is of the uid that mounted the file system (a socket
// another local user planted where the agent's would be gets nothing).
func loginClient(dir string) (*http.Client, error) {
	abs := ""
	if dir != "" {
		var err error
		if abs, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
	}
	type found struct {
		sock  string
		owner uint32
	}
	var socks []found
	mounted := false
	var impostor error
	for _, m := range mount.Agents() {
		if abs != "" && m.Dir != abs {
			continue
		}
		mounted = true
		for _, d := range []string{agent.LoginSocketDir(int(m.Owner)), filepath.Join("/tmp", fmt.Sprintf("pando-login-%d", m.Owner))} {
			s := agent.LoginSocket(d, m.Dir)
			if uid, ok := agent.SocketServer(s); ok && uid == m.Owner {
				socks = append(socks, found{s, m.Owner})
				break
			} else if ok {
				impostor = agent.NotTheAgent(s, m.Owner)
			}
		}
	}
	switch {
	case len(socks) == 1:
		return agent.LoginClient(socks[0].sock, socks[0].owner, 30*time.Second), nil
	case abs != "" && len(socks) == 0 && (mounted || mount.Mounted(abs)):
		if !mounted {
			return nil, fmt.Errorf("%s is not a pando mount", abs)
		}
		if impostor != nil {
			return nil, impostor
		}
		return nil, fmt.Errorf("the mount at %s does not accept logins (its agent was started without --logins)", abs)
	case abs != "" && len(socks) == 0:
		return nil, fmt.Errorf("no pando agent is mounted at %s", abs)
	case len(socks) == 0:
		return nil, errors.New("no pando agent on this host accepts logins (an agent does when mounted with --logins)")
	default:
		return nil, cli.Usagef("%d pando mounts on this host accept logins: name one with --mount DIR", len(socks))
	}
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
