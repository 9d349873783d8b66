package vfs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

func TestConflictName(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 5, 7, 0, time.FixedZone("CET", 3600))
	if got := ConflictName("/uva/data/report.txt", "node1", at, 1); got != "/uva/data/report.txt.conflict-node1-20261123-080507" {
		t.Errorf("first name: %s", got)
	}
	if got := ConflictName("/uva/data/report.txt", "node1", at, 3); got != "/uva/data/report.txt.conflict-node1-20261123-080507-3" {
		t.Errorf("third try: %s", got)
	}
	long := "/uva/" + strings.Repeat("x", 255)
	got := ConflictName(long, "node1", at, 12)
	if b := path.Base(got); len(b) > 255 || !strings.HasSuffix(b, ".conflict-node1-20261123-080507-12") || path.Dir(got) != "/uva" {
		t.Errorf("long name: %s (%d bytes)", got, len(path.Base(got)))
	}
}

func TestConflictNameKeepsCharacters(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 5, 7, 0, time.UTC)
	long := "/uva/" + strings.Repeat("é", 127) // 254 bytes
	got := path.Base(ConflictName(long, "node1", at, 1))
	if len(got) > 255 || !utf8.ValidString(got) {
		t.Errorf("long name cut inside a character or too long: %q (%d bytes)", got, len(got))
	}
}

func TestHostLabel(t *testing.T) {
	h := hostLabel()
	if h == "" || strings.ContainsAny(h, "/. ") {
		t.Errorf("host label %q", h)
	}
}

// TestOpenWhileReplaySettles: an open of a file whose unsent data the
// replay is settling waits for it, and then reads the share's version.
// The replay pins the file while it compares the data with the share's
// bytes (and while it copies it beside a changed file), and then drops
// the cache entry: an open that took the pin for an open file's and went
// ahead read from an entry the cache no longer held, and got nothing (an
// agent killed after its write-back reached the share, restarted and read
// at once).
func TestOpenWhileReplaySettles(t *testing.T) {
	for _, changed := range []bool{false, true} {
		name := "sent before the crash"
		if changed {
			name = "changed at the share"
		}
		t.Run(name, func(t *testing.T) {
			d := testenv.New(t, "uva")
			root, slowDown := proxiedShare(t, d)
			local := pattern(3<<20+5, 1)
			atShare := local
			if changed {
				atShare = pattern(len(local), 2)
			}
			if err := os.WriteFile(filepath.Join(root, "f"), atShare, 0o644); err != nil {
				t.Fatal(err)
			}
			// Attributes trusted for an hour: the open below asks the
			// share nothing before it looks at the unsent data.
			v, c := newFSWith(t, d, client.Options{Streams: 1}, Options{Consistency: consistency.Consistency{Mode: consistency.ModeWindow, Period: time.Hour}})
			ctx := context.Background()
			const p = "/uva/alpha/f"
			a, err := v.GetAttr(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			key, err := v.Key(ctx, p, a)
			if err != nil {
				t.Fatal(err)
			}
			// What a killed agent leaves: the data dirty in the cache,
			// written against a version the share has moved past.
			v.cache.Validate(key, a.Version-1, 0, p)
			if err := v.cache.WriteAt(ctx, key, local, 0, nil); err != nil {
				t.Fatal(err)
			}

			// From now on every round trip to the share takes 200 ms.
			slowDown(c, p, 200*time.Millisecond)
			done := make(chan ReplayResult, 1)
			go func() { done <- v.Replay(ctx, slog.New(slog.DiscardHandler)) }()
			for !v.cache.Pinned(key) {
				select {
				case r := <-done:
					t.Fatalf("the replay ended (%+v) before it pinned the file", r)
				default:
					time.Sleep(time.Millisecond)
				}
			}
			h, err := v.Open(ctx, p, syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			r := <-done
			if changed && r.Conflicts != 1 || !changed && r.Clean != 1 {
				t.Fatalf("replay: %+v", r)
			}
			got := make([]byte, len(atShare)+1)
			n, err := h.Read(ctx, got, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:n], atShare) {
				t.Fatalf("the file opened while the replay settled it reads %s", testenv.Diff(got[:n], atShare))
			}
		})
	}
}
