package client_test

import (
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ops runs what a program on a mount does (stat, list, read, write a new
// file) through c, and fails the test on any error; n names the new file.
func ops(t *testing.T, c *client.Client, root, n string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Stat(ctx, "/uva/alpha/f"); err != nil {
		t.Fatalf("stat: %v", err)
	}
	if _, err := c.ReadDir(ctx, "/uva/alpha"); err != nil {
		t.Fatalf("list: %v", err)
	}
	if names, err := c.ReadDir(ctx, "/uva"); err != nil || len(names) != 1 {
		t.Fatalf("list of the namespace above the mount: %v %v", names, err)
	}
	buf := make([]byte, 1<<16)
	if data, _, _, err := c.GetFile(ctx, "/uva/alpha/f", buf); err != nil || string(data) != "content" {
		t.Fatalf("read: %q %v", data, err)
	}
	data := []byte("written " + n)
	if _, err := c.PutFile(ctx, "/uva/alpha/"+n, data, 0o644, 0, crc32.Checksum(data, castagnoli)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(root, n)); err != nil || string(got) != string(data) {
		t.Fatalf("the share holds %q (%v), want %q", got, err, data)
	}
}

// TestControllerDownKeepsTable: with the controller gone, a client whose
// mount table is long past its TTL keeps working on it and on its tokens
// (reads, lists, writes to the live share), says the controller is down,
// and reads the table again once the controller is back.
func TestControllerDownKeepsTable(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(d.Admin, client.Options{MountTTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops(t, c, root, "before")
	if st := c.ControllerStatus(); st.State != "up" || st.Addr != d.Admin.Controller || st.Tokens != 1 || st.MountTableAt.IsZero() {
		t.Fatalf("status with the controller up: %+v", st)
	}

	d.StopController()
	stopped := time.Now()
	for i := range 10 {
		time.Sleep(150 * time.Millisecond) // past the table's TTL each time
		ops(t, c, root, "down-"+string(rune('a'+i)))
	}
	st := c.ControllerStatus()
	if st.State != "down" || st.Since.Before(stopped) || st.Errors == 0 || st.LastError == "" {
		t.Fatalf("status with the controller down: %+v", st)
	}
	if !strings.Contains(st.LastError, "cannot connect to the controller of uva") {
		t.Errorf("last error %q does not say the controller cannot be reached", st.LastError)
	}
	if !st.MountTableAt.Before(stopped) {
		t.Errorf("mount table read at %v, after the controller stopped at %v", st.MountTableAt, stopped)
	}

	d.RestartController(0)
	back := time.Now()
	deadline := back.Add(30 * time.Second)
	for i := 0; c.ControllerStatus().State != "up"; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the client did not notice the controller back in 30s: %+v", c.ControllerStatus())
		}
		time.Sleep(150 * time.Millisecond)
		ops(t, c, root, "back-"+string(rune('a'+i%26)))
	}
	time.Sleep(150 * time.Millisecond)
	ops(t, c, root, "after")
	if st := c.ControllerStatus(); st.State != "up" || st.Since.Before(back) || st.MountTableAt.Before(back) {
		t.Errorf("status once the controller is back: %+v", st)
	}
}

// TestTokensWithoutController: tokens are renewed ahead of expiry; while
// the controller is away a token past its renewal point stays in use until
// it expires; then requests are refused, saying why, and change nothing;
// they work again once the controller is back.
func TestTokensWithoutController(t *testing.T) {
	const ttl = 9 * time.Second
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.RestartController(ttl)
	c, err := client.New(d.Admin, client.Options{KeepFresh: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Stat(ctx, "/uva/alpha/f"); err != nil {
		t.Fatal(err)
	}
	first := c.ControllerStatus().TokenExpires

	// Renewed in the background, ahead of expiry, with no request asking.
	var renewed time.Time
	for renewed.IsZero() {
		st := c.ControllerStatus()
		switch {
		case st.TokenExpires.After(first):
			renewed = st.TokenExpires
			if now := time.Now(); !now.Before(first) {
				t.Errorf("token renewed at %v, after it expired at %v", now, first)
			}
		case time.Now().After(first.Add(5 * time.Second)):
			t.Fatalf("token not renewed 5s after it expired: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Past its renewal point with the controller gone: still in use.
	d.StopController()
	time.Sleep(time.Until(renewed.Add(-ttl / 3).Add(500 * time.Millisecond)))
	if _, err := c.Stat(ctx, "/uva/alpha/f"); err != nil {
		t.Fatalf("stat past the renewal point, controller down: %v", err)
	}
	if st := c.ControllerStatus(); st.State != "down" || !st.TokenExpires.Equal(renewed) {
		t.Errorf("status past the renewal point, controller down: %+v", st)
	}

	// Expired: refused, with the reason, and nothing written.
	time.Sleep(time.Until(renewed.Add(500 * time.Millisecond)))
	_, err = c.Stat(ctx, "/uva/alpha/f")
	if !errors.Is(err, client.ErrControllerUnreachable) || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "no controller of uva answers") {
		t.Fatalf("stat with an expired token and no controller: %v", err)
	}
	data := []byte("new")
	if _, err := c.PutFile(ctx, "/uva/alpha/f", data, 0o644, 0, crc32.Checksum(data, castagnoli)); !errors.Is(err, client.ErrControllerUnreachable) {
		t.Fatalf("write with an expired token and no controller: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "content" {
		t.Fatalf("a refused write changed the file: %q", got)
	}

	// Back: requests work again (after the back-off at most).
	d.RestartController(ttl)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.Stat(ctx, "/uva/alpha/f")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stat 20s after the controller came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := c.ControllerStatus(); st.State != "up" || !st.TokenExpires.After(renewed) {
		t.Errorf("status once the controller is back: %+v", st)
	}
}

// TestControllerAddresses: a configuration with several controller
// addresses reaches the one that answers; with none answering, a client
// holding nothing fails at once with one sentence naming them all, and
// writes nothing.
func TestControllerAddresses(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	dead := testenv.FreePort(t)
	cfg := *d.Admin
	cfg.Controller, cfg.Controllers = dead, []string{d.Admin.Controller}
	c, err := client.New(&cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops(t, c, root, "g")
	if st := c.ControllerStatus(); st.State != "up" || st.Addr != d.Admin.Controller {
		t.Errorf("status: %+v", st)
	}

	dead2 := testenv.FreePort(t)
	cfg.Controllers = []string{dead2}
	c2, err := client.New(&cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	data := []byte("new")
	_, err = c2.PutFile(context.Background(), "/uva/alpha/f", data, 0o644, 0, crc32.Checksum(data, castagnoli))
	if !errors.Is(err, client.ErrControllerUnreachable) || !strings.Contains(err.Error(), "cannot connect to any controller of uva ("+dead+", "+dead2+")") {
		t.Fatalf("write with no controller reachable: %v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error of more than one line: %q", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "content" {
		t.Fatalf("a refused write changed the file: %q", got)
	}
	if st := c2.ControllerStatus(); st.State != "down" || st.Tokens != 0 || !st.MountTableAt.IsZero() {
		t.Errorf("status with no controller reachable: %+v", st)
	}
}

// TestMountTableReadAgain: with the controller up, a mount added elsewhere
// is seen by the first request after the table's TTL (it waits for the
// table being read again, rather than going on with the old one).
func TestMountTableReadAgain(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(d.Admin, client.Options{MountTTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Stat(ctx, "/uva/alpha/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "/uva/beta"); err == nil {
		t.Fatal("/uva/beta exists before it is mounted")
	}
	d.AddShare("beta") // through another client
	time.Sleep(150 * time.Millisecond)
	if _, err := c.ReadDir(ctx, "/uva/beta"); err != nil {
		t.Fatalf("the first request after the TTL does not see the new mount: %v", err)
	}
}
