package web

import (
	"context"
	_ "embed"
	"fmt"
	"html"
	"io"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// The web page: a directory's listing, with a drop zone to upload into it
// (with a progress bar), a field to make a folder, delete buttons, and
// the ACLs of the path; and /.pando/status, with the shares and their
// health, the gateway's cache and RPC figures, and the transfers under
// way. Pages are rendered here; one small script (/.pando/app.js) does
// the uploads, folders and deletes with PUT, MKCOL and DELETE.

//go:embed app.js
var appJS string

// pandoPrefix is the path of the gateway's own pages: no domain begins
// with a dot.
const pandoPrefix = "/.pando/"

// Pages is what the page shows beyond files.
type Pages interface {
	// ACL returns the ACLs on p that apply, and user's rights there.
	ACL(ctx context.Context, user, p string) (wire.ACLResp, error)
	// Status returns the gateway's figures and the domain's shares.
	Status(ctx context.Context, user string) (PageStatus, error)
}

// PageStatus is what /.pando/status shows.
type PageStatus struct {
	Gateway string
	Figures [][2]string
	RPCs    map[string]uint64
	Shares  []wire.ShareInfo
	Health  []vfs.ShareState
}

// transfer is a GET or PUT of a file under way.
type transfer struct {
	user, method, path string
	size               int64
	done               atomic.Int64
	start              time.Time
}

type transfers struct {
	mu sync.Mutex
	m  map[*transfer]bool
}

func (ts *transfers) add(t *transfer) func() {
	ts.mu.Lock()
	if ts.m == nil {
		ts.m = map[*transfer]bool{}
	}
	ts.m[t] = true
	ts.mu.Unlock()
	return func() {
		ts.mu.Lock()
		delete(ts.m, t)
		ts.mu.Unlock()
	}
}

func (ts *transfers) list() []*transfer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]*transfer, 0, len(ts.m))
	for t := range ts.m {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

type countingWriter struct {
	http.ResponseWriter
	t *transfer
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.t.done.Add(int64(n))
	return n, err
}

// ReadFrom lets net/http send a file with sendfile (counted when done).
func (c countingWriter) ReadFrom(src io.Reader) (int64, error) {
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(src)
		c.t.done.Add(n)
		return n, err
	}
	return io.Copy(struct{ io.Writer }{c}, src)
}

type countingReader struct {
	io.ReadCloser
	t *transfer
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.t.done.Add(int64(n))
	return n, err
}

const pageCSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'"

const pageStyle = `<style>body{font:14px sans-serif;margin:1.5em;max-width:70em}table{border-collapse:collapse}
td,th{padding:.2em .8em;text-align:left}tr:nth-child(even){background:#f4f4f4}#drop{border:2px dashed #888;padding:1.2em;margin:1em 0}
#drop.over{background:#eef}progress{width:20em}.err{color:#b00}nav a{margin-right:1em}</style>`

func (s *Server) pageHead(b *strings.Builder, title, user string) {
	fmt.Fprintf(b, "<!doctype html><meta charset=utf-8><title>%s</title>%s<script src=\"/.pando/app.js\" defer></script>\n", html.EscapeString(title), pageStyle)
	fmt.Fprintf(b, "<nav><a href=\"/\">namespace</a><a href=\"/.pando/status\">status</a><span>signed in as <b id=user>%s</b></span></nav>\n", html.EscapeString(user))
}

func (s *Server) writePage(w http.ResponseWriter, r *http.Request, b *strings.Builder) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method != http.MethodHead {
		io.WriteString(w, b.String())
	}
}

// own serves the gateway's own pages below /.pando/.
func (s *Server) own(ctx context.Context, w http.ResponseWriter, r *http.Request, user string) {
	switch r.URL.Path {
	case pandoPrefix + "app.js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		io.WriteString(w, appJS)
	case pandoPrefix + "status":
		s.statusPage(ctx, w, r, user)
	default:
		s.fail(w, http.StatusNotFound, r.URL.Path+": no such page")
	}
}

func (s *Server) listPage(ctx context.Context, w http.ResponseWriter, r *http.Request, user, p string, ents []Entry) {
	var b strings.Builder
	s.pageHead(&b, p, user)
	// Breadcrumbs.
	b.WriteString("<h1>")
	acc := ""
	fmt.Fprintf(&b, "<a href=\"/\">/</a>")
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if name == "" {
			continue
		}
		acc += "/" + name
		fmt.Fprintf(&b, "<a href=\"%s/\">%s</a>/", html.EscapeString(escapePath(acc)), html.EscapeString(name))
	}
	b.WriteString("</h1>\n<table id=listing><tr><th>name</th><th>size</th><th>modified</th><th></th></tr>\n")
	base := strings.TrimSuffix(p, "/") + "/"
	if p != "/" {
		fmt.Fprintf(&b, "<tr><td><a href=\"%s\">..</a></td></tr>\n", html.EscapeString(escapePath(path.Dir(p))+"/"))
	}
	for _, e := range ents {
		href := escapePath(base + e.Name)
		name, size, actions := e.Name, fmt.Sprint(e.Size), ""
		if e.Type == "dir" {
			href += "/"
			name += "/"
			size = ""
		} else if e.Type == "file" {
			actions = fmt.Sprintf("<a href=\"%s?download=1\" download>download</a> ", html.EscapeString(href))
		}
		actions += fmt.Sprintf("<button class=del data-url=\"%s\">delete</button>", html.EscapeString(href))
		fmt.Fprintf(&b, "<tr><td><a class=entry href=\"%s\">%s</a></td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			html.EscapeString(href), html.EscapeString(name), size, e.MTime.Format("2006-01-02 15:04:05"), actions)
	}
	b.WriteString("</table>\n")
	if p != "/" {
		fmt.Fprintf(&b, `<div id=drop data-base="%s">Drop files here to upload them into this folder, or <input type=file id=file multiple>
<br><progress id=progress max=100 value=0></progress> <span id=msg></span></div>
<form id=mkdir><input id=dirname placeholder="new folder name"> <button>create folder</button></form>
`, html.EscapeString(escapePath(base)))
	}
	if s.pages != nil && p != "/" {
		b.WriteString("<h2>Rights here</h2>\n")
		acl, err := s.pages.ACL(ctx, user, p)
		if err != nil {
			fmt.Fprintf(&b, "<p class=err>%s</p>\n", html.EscapeString(err.Error()))
		} else {
			fmt.Fprintf(&b, "<p>your rights on %s: <b id=effective>%s</b></p>\n<table id=acl><tr><th>set on</th><th>who</th><th>rights</th></tr>\n",
				html.EscapeString(acl.Path), html.EscapeString(acl.Effective))
			paths := []string{acl.Path}
			for q := range acl.Inherited {
				paths = append(paths, q)
			}
			slices.Sort(paths)
			for _, q := range paths {
				es := acl.Entries
				if q != acl.Path {
					es = acl.Inherited[q]
				}
				for _, e := range es {
					who := e.Who
					if e.Negative {
						who = "-" + who
					}
					fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", html.EscapeString(q), html.EscapeString(who), html.EscapeString(e.Rights))
				}
			}
			b.WriteString("</table>\n")
		}
	}
	s.writePage(w, r, &b)
}

func (s *Server) statusPage(ctx context.Context, w http.ResponseWriter, r *http.Request, user string) {
	var b strings.Builder
	s.pageHead(&b, "pando gateway status", user)
	b.WriteString("<h1>Status</h1>\n")
	if s.pages != nil {
		st, err := s.pages.Status(ctx, user)
		if err != nil {
			fmt.Fprintf(&b, "<p class=err>%s</p>\n", html.EscapeString(err.Error()))
		} else {
			fmt.Fprintf(&b, "<p>gateway %s</p>\n<h2>Shares</h2>\n<table id=shares><tr><th>share</th><th>registered</th><th>seen from here</th></tr>\n", html.EscapeString(st.Gateway))
			health := map[string]string{}
			for _, h := range st.Health {
				state := "up"
				if !h.Up {
					state = "down"
				}
				health[h.Share] = state
			}
			for _, sh := range st.Shares {
				reg := "offline"
				if sh.Online {
					reg = "online"
				}
				seen := health[sh.Name]
				if seen == "" {
					seen = "not used yet"
				}
				fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", html.EscapeString(sh.Name), reg, seen)
			}
			b.WriteString("</table>\n<h2>Cache and requests</h2>\n<table id=figures>\n")
			for _, f := range st.Figures {
				fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td></tr>\n", html.EscapeString(f[0]), html.EscapeString(f[1]))
			}
			b.WriteString("</table>\n<h2>RPCs</h2>\n<table id=rpcs>\n")
			ops := make([]string, 0, len(st.RPCs))
			for op := range st.RPCs {
				ops = append(ops, op)
			}
			slices.Sort(ops)
			for _, op := range ops {
				fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td></tr>\n", html.EscapeString(op), st.RPCs[op])
			}
			b.WriteString("</table>\n")
		}
	}
	// Only the user's own: the paths of others' transfers may lie where
	// this user has no right to look.
	all := s.active.list()
	mine := all[:0:0]
	for _, t := range all {
		if t.user == user {
			mine = append(mine, t)
		}
	}
	fmt.Fprintf(&b, "<h2>Transfers under way</h2>\n<p>yours below; %d of others</p>\n<table id=transfers><tr><th>user</th><th></th><th>path</th><th>done</th><th>for</th></tr>\n", len(all)-len(mine))
	for _, t := range mine {
		size := "?"
		if t.size >= 0 {
			size = fmt.Sprint(t.size)
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%d of %s bytes</td><td>%s</td></tr>\n", html.EscapeString(t.user), t.method,
			html.EscapeString(t.path), t.done.Load(), size, time.Since(t.start).Round(time.Second))
	}
	b.WriteString("</table>\n")
	s.writePage(w, r, &b)
}
