package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"pando.dev/pando/internal/wire"
)

// web is a read-only endpoint: files served over http(s), read in ranges.
type web struct{ hc *http.Client }

func newWeb() web {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return web{hc: &http.Client{Transport: t}}
}

var errReadOnly = errors.New("a web server is a source only: copy from an http(s) URL, not to one")

func (w web) do(ctx context.Context, method, url, rng string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%s: %w (HTTP 404)", url, errNotFound)
		}
		return nil, fmt.Errorf("%s: the server answered %s", url, resp.Status)
	}
	return resp, nil
}

var errNotFound = errors.New("not found")

func (w web) Stat(ctx context.Context, url string) (Info, error) {
	resp, err := w.do(ctx, http.MethodHead, url, "")
	if err != nil {
		return Info{}, err
	}
	resp.Body.Close()
	if resp.ContentLength < 0 {
		return Info{}, fmt.Errorf("%s: the server does not say how large it is (no Content-Length)", url)
	}
	in := Info{Size: resp.ContentLength, Mode: 0o644}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		in.Mtime = t.UnixNano()
	}
	if et := resp.Header.Get("ETag"); et != "" {
		for _, c := range et {
			in.Version = in.Version*31 + uint64(c)
		}
	}
	return in, nil
}

func (web) List(_ context.Context, dir string) ([]Entry, error) {
	return nil, fmt.Errorf("%s: a web server's directories cannot be listed; copy its files by URL", dir)
}

func (web) Join(dir, name string) string { return strings.TrimSuffix(dir, "/") + "/" + name }
func (web) Name(p string) string         { return p }

type webFile struct {
	w   web
	url string
}

func (f webFile) ReadBlock(ctx context.Context, p []byte, off int64) (int, uint32, error) {
	resp, err := f.w.do(ctx, http.MethodGet, f.url, "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+int64(len(p))-1, 10))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, 0, fmt.Errorf("%s: the server does not serve byte ranges (answered %s to a range request)", f.url, resp.Status)
	}
	n, err := io.ReadFull(resp.Body, p)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return n, wire.CRC(p[:n]), err
}

func (webFile) Close() error { return nil }

func (w web) OpenRead(_ context.Context, url string) (Reader, error) { return webFile{w, url}, nil }

func (web) OpenWrite(context.Context, string, uint32) (Writer, error) { return nil, errReadOnly }

func (w web) ReadSmall(ctx context.Context, url string, buf []byte) ([]byte, Info, bool, error) {
	resp, err := w.do(ctx, http.MethodGet, url, "")
	if err != nil {
		return nil, Info{}, false, err
	}
	defer resp.Body.Close()
	n, err := io.ReadFull(resp.Body, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, Info{}, false, err
	}
	var probe [1]byte
	k, _ := resp.Body.Read(probe[:])
	in := Info{Size: int64(n), Mode: 0o644}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		in.Mtime = t.UnixNano()
	}
	return buf[:n], in, k == 0, nil
}

func (web) WriteSmall(context.Context, string, []byte, uint32, int64, uint32) error {
	return errReadOnly
}
func (web) Mkdir(context.Context, string, uint32) error   { return errReadOnly }
func (web) Rename(context.Context, string, string) error  { return errReadOnly }
func (web) Remove(context.Context, string) error          { return errReadOnly }
func (web) SetMtime(context.Context, string, int64) error { return errReadOnly }
