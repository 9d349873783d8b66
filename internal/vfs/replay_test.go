package vfs

import (
	"path"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
