package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"pando.dev/pando/internal/testenv"
)

// artefacts is where the web page's screenshots are kept.
func artefacts(t *testing.T) string {
	dir := os.Getenv("PANDO_ARTEFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "pando-artefacts")
	}
	dir = filepath.Join(dir, "webpage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser opens a tab of a headless Chromium that signs in as user with
// a password.
func (e *env) browser(t *testing.T, alloc context.Context, user string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + user + "-secret-pw"))
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Basic " + auth}})
		return err
	}))
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(artefacts(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// TestWebPage drives the web page in headless Chromium: alice browses,
// uploads a file through the page's file picker with its progress bar,
// makes a folder, downloads, reads her rights and the status page; bob,
// who may not write, is refused an upload and the share is unchanged.
func TestWebPage(t *testing.T) {
	exe, err := exec.LookPath("chromium")
	if err != nil {
		needTool(t, "chromium")
	}
	e := newEnv(t, false)
	os.WriteFile(filepath.Join(e.root, "keep.txt"), []byte("kept"), 0o644)
	os.Mkdir(filepath.Join(e.root, "docs"), 0o755)
	up := filepath.Join(e.dir, "up.txt")
	os.WriteFile(up, []byte(strings.Repeat("uploaded through the page\n", 40000)), 0o644)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), chromedp.WindowSize(1200, 900))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	alloc, cancel2 := context.WithTimeout(alloc, 60*time.Second)
	defer cancel2()

	ctx := e.browser(t, alloc, "alice")
	text := func(ctx context.Context, sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	// wait polls cond through page loads (the page reloads after an
	// upload), for at most 30 s.
	wait := func(ctx context.Context, what, cond string) {
		t.Helper()
		var err error
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			var ok bool
			if ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")")); err == nil && ok {
				return
			}
		}
		t.Fatalf("waiting for %s: %v", what, err)
	}
	const listed = `document.querySelector("#listing") && document.querySelector("#listing").innerText.includes(%q)`
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/d/data/"), chromedp.WaitVisible("#listing")); err != nil {
		t.Fatal(err)
	}
	listing, effective := text(ctx, "#listing"), text(ctx, "#effective")
	if !strings.Contains(listing, "keep.txt") || !strings.Contains(listing, "docs/") || effective != "rlidwk" {
		t.Errorf("the listing shows %q and rights %q", listing, effective)
	}
	shot(t, ctx, "1-listing.png")

	// Upload through the file picker; the page reloads when it is done.
	if err := chromedp.Do(ctx, chromedp.SetUploadFiles("#file", []string{up})); err != nil {
		t.Fatalf("upload: %v", err)
	}
	wait(ctx, "the upload", fmt.Sprintf(listed, "up.txt"))
	want, _ := os.ReadFile(up)
	if got, _ := os.ReadFile(filepath.Join(e.root, "up.txt")); string(got) != string(want) {
		t.Errorf("the share holds %d bytes of the upload, want %d", len(got), len(want))
	}
	shot(t, ctx, "2-uploaded.png")

	// A folder.
	if err := chromedp.Do(ctx, chromedp.SendKeys("#dirname", "made here"), chromedp.Click("#mkdir button")); err != nil {
		t.Fatalf("folder: %v", err)
	}
	wait(ctx, "the folder", fmt.Sprintf(listed, "made here/"))
	if fi, err := os.Stat(filepath.Join(e.root, "made here")); err != nil || !fi.IsDir() {
		t.Errorf("no folder at the share: %v", err)
	}
	// Download, as the page's link does.
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.querySelector('a[download][href*="keep.txt"]').href).then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil || got != "kept" {
		t.Errorf("download: %q %v", got, err)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/.pando/status"), chromedp.WaitVisible("#shares")); err != nil {
		t.Fatal(err)
	}
	shares, figures := text(ctx, "#shares"), text(ctx, "#figures")
	if !strings.Contains(shares, "data") || !strings.Contains(shares, "online") || !strings.Contains(figures, "requests") {
		t.Errorf("status: shares %q figures %q", shares, figures)
	}
	shot(t, ctx, "3-status.png")

	// bob may read, not write.
	before := testenv.Tree(t, e.root)
	bctx := e.browser(t, alloc, "bob")
	if err := chromedp.Do(bctx, chromedp.Navigate(e.url+"/d/data/"), chromedp.WaitVisible("#listing"),
		chromedp.SetUploadFiles("#file", []string{up})); err != nil {
		t.Fatalf("bob's upload: %v", err)
	}
	wait(bctx, "bob's refusal", `document.querySelector("#msg").textContent.includes("refused")`)
	if msg, effective := text(bctx, "#msg"), text(bctx, "#effective"); !strings.Contains(msg, "403") || effective != "rl" {
		t.Errorf("bob's upload: %q, rights %q", msg, effective)
	}
	shot(t, bctx, "4-refused.png")
	sameTree(t, "the share after bob's upload", before, testenv.Tree(t, e.root))
}
