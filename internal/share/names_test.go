package share

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// TestListingPages: a directory larger than a page is listed in pages of
// bounded size, in order, each name once, and names that were there
// throughout are all listed even when the directory changes between
// pages.
func TestListingPages(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "big")
	os.Mkdir(dir, 0o755)
	const n = 3*wire.ReadDirPage + 17
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	seen := map[string]int{}
	after, pages := "", 0
	for {
		var page wire.ReadDirResp
		if err := serveAs(t, s, sc, wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: "big", After: after}, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Entries) > wire.ReadDirPage {
			t.Fatalf("a page of %d entries", len(page.Entries))
		}
		for _, e := range page.Entries {
			if e.Name <= after {
				t.Fatalf("%s after %s: out of order", e.Name, after)
			}
			after = e.Name
			seen[e.Name]++
		}
		if pages == 2 {
			// Between pages: a name added before the cookie, one after
			// it, and one removed after it.
			os.WriteFile(filepath.Join(dir, "a-new"), nil, 0o644)
			os.WriteFile(filepath.Join(dir, "z-new"), nil, 0o644)
			os.Remove(filepath.Join(dir, fmt.Sprintf("f%06d", n-1)))
		}
		if !page.More {
			break
		}
	}
	for i := 0; i < n-1; i++ {
		if name := fmt.Sprintf("f%06d", i); seen[name] != 1 {
			t.Errorf("%s listed %d times", name, seen[name])
		}
	}
	if seen["z-new"] != 1 || seen["a-new"] != 0 {
		t.Errorf("names added during the listing: after the cookie %d, before it %d", seen["z-new"], seen["a-new"])
	}
	if pages != 4 {
		t.Errorf("%d pages for %d names", pages, n)
	}
}
