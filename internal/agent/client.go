package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/mount"
)

// The client side of a running agent's two Unix sockets: the control
// socket in its cache directory (pando stats, pando cache), which only
// the agent's own user may open, and the login socket of its mount
// (pando login, pando logout), which every local user may open and which
// must therefore prove to be the agent's before a credential is sent.

// Client talks HTTP to a running agent over one of its sockets.
type Client struct {
	hc *http.Client
	// unreachable is how an error names the agent that does not answer.
	unreachable string
}

// Dial returns a client of the control socket of the agent whose cache is
// in dir.
func Dial(dir string) (*Client, error) {
	sock := filepath.Join(dir, SocketName)
	if _, err := os.Stat(sock); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no pando agent runs with the cache in %s (start one with pando mount, or pass --cache-dir)", dir)
	}
	return &Client{hc: SocketClient(sock, 10*time.Second), unreachable: "the agent with the cache in " + dir + " does not answer"}, nil
}

// ErrSeveralLogins is FindLogin's answer when no mount is named and more
// than one accepts logins.
var ErrSeveralLogins = errors.New("name one with --mount DIR")

// FindLogin returns a client of the login socket of the agent mounted at
// dir, or of the only agent on this host that accepts logins if dir is "".
// Only the kernel's list of mounts is believed: a socket is used only if
// the process serving it is of the uid that mounted the file system, and
// that is checked again at each connection (a socket another local user
// planted where the agent's would be gets nothing).
func FindLogin(dir string) (*Client, error) {
	abs := ""
	if dir != "" {
		var err error
		if abs, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
	}
	return findLogin(abs, mount.Agents(), mount.Mounted, loginSocketDirs)
}

// loginSocketDirs are where the agent of a mount uid made keeps its login
// socket: LoginSocketDir, or /tmp's own where TMPDIR differs.
func loginSocketDirs(uid uint32) []string {
	return []string{LoginSocketDir(int(uid)), filepath.Join("/tmp", fmt.Sprintf("pando-login-%d", uid))}
}

// findLogin is FindLogin over the pando mounts agents, with mounted
// telling whether a directory is a mount point at all and dirs where an
// agent of a uid keeps its login sockets.
func findLogin(abs string, agents []mount.Agent, mounted func(string) bool, dirs func(uint32) []string) (*Client, error) {
	type found struct {
		sock  string
		owner uint32
	}
	var socks []found
	known := false
	var impostor error
	for _, m := range agents {
		if abs != "" && m.Dir != abs {
			continue
		}
		known = true
		for _, d := range dirs(m.Owner) {
			s := LoginSocket(d, m.Dir)
			if uid, ok := socketServer(s); ok && uid == m.Owner {
				socks = append(socks, found{s, m.Owner})
				break
			} else if ok {
				impostor = notTheAgent(s, m.Owner)
			}
		}
	}
	switch {
	case len(socks) == 1:
		return &Client{hc: loginHTTP(socks[0].sock, socks[0].owner, 30*time.Second), unreachable: "cannot reach the pando agent"}, nil
	case abs != "" && len(socks) == 0 && (known || mounted(abs)):
		if !known {
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
		return nil, fmt.Errorf("%d pando mounts on this host accept logins: %w", len(socks), ErrSeveralLogins)
	}
}

// Stats returns the agent's counters (control socket).
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := c.call(ctx, "GET", "/stats", nil, &st)
	return st, err
}

// Metrics writes the agent's metrics, in the Prometheus text format, to w
// (control socket).
func (c *Client) Metrics(ctx context.Context, w io.Writer) error {
	return c.call(ctx, "GET", "/metrics", nil, w)
}

// Cache lists the agent's cached files, most recently used first
// (control socket).
func (c *Client) Cache(ctx context.Context) ([]cache.Entry, error) {
	var es []cache.Entry
	err := c.call(ctx, "GET", "/cache", nil, &es)
	return es, err
}

// Drop forgets the cached data of the files at or below the global path p
// and returns how many there were (control socket).
func (c *Client) Drop(ctx context.Context, p string) (int, error) {
	var r struct{ Dropped int }
	err := c.call(ctx, "POST", "/cache/drop?path="+url.QueryEscape(p), nil, &r)
	return r.Dropped, err
}

// Logins lists the local users logged in (login socket).
func (c *Client) Logins(ctx context.Context) ([]Login, error) {
	var ls []Login
	err := c.call(ctx, "GET", "/logins", nil, &ls)
	return ls, err
}

// Login hands the agent a credential (login socket).
func (c *Client) Login(ctx context.Context, req LoginRequest) (Login, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Login{}, err
	}
	var l Login
	err = c.call(ctx, "POST", "/login", strings.NewReader(string(body)), &l)
	return l, err
}

// Logout ends the caller's login, or uid's if not nil (root only; login
// socket).
func (c *Client) Logout(ctx context.Context, uid *int) (Login, error) {
	path := "/logout"
	if uid != nil {
		path += "?uid=" + strconv.Itoa(*uid)
	}
	var l Login
	err := c.call(ctx, "POST", path, nil, &l)
	return l, err
}

// call sends a request and decodes the JSON answer into out, or copies it
// to out if out is an io.Writer; a refusal is an error of the agent's
// sentence.
func (c *Client) call(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", c.unreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return errors.New(strings.TrimSpace(string(b)))
	}
	if w, ok := out.(io.Writer); ok {
		_, err := io.Copy(w, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("the agent's answer to %s %s: %w", method, path, err)
	}
	return nil
}

// SocketClient is an HTTP client of the agent's socket sock.
func SocketClient(sock string, timeout time.Duration) *http.Client {
	return unixHTTP(sock, timeout, nil)
}

// notTheAgent is the refusal to use a login socket that a process of
// another uid than the mount's owner serves.
func notTheAgent(sock string, owner uint32) error {
	return fmt.Errorf("%s is not served by the mount's agent (uid %d): refusing to send it a credential", sock, owner)
}

// socketServer reports the uid of the process serving the Unix socket
// sock, if one answers.
func socketServer(sock string) (uint32, bool) {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	return peerUid(c)
}

// loginHTTP is an HTTP client of the login socket sock that talks only
// to a process of uid owner (the uid that mounted the file system, as the
// kernel names it): a credential is sent to the mount's agent, never to a
// socket another local user put where the agent's would be.
func loginHTTP(sock string, owner uint32, timeout time.Duration) *http.Client {
	return unixHTTP(sock, timeout, &owner)
}

// unixHTTP is an HTTP client of the Unix socket sock; if owner is not
// nil, each connection is dropped before a byte is sent unless the
// process serving it is of uid *owner (SO_PEERCRED).
func unixHTTP(sock string, timeout time.Duration, owner *uint32) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil || owner == nil {
				return c, err
			}
			if uid, ok := peerUid(c); !ok || uid != *owner {
				c.Close()
				return nil, notTheAgent(sock, *owner)
			}
			return c, nil
		},
	}}
}
