package client_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// TestEarlyDataConcurrentFirstRequests: many first requests at once, on a
// client that opens its data channels in the background, all get served
// (callers that find a channel being dialled wait for that dial).
func TestEarlyDataConcurrentFirstRequests(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	testenv.MakeFile(t, filepath.Join(root, "f"), 3<<20)
	want, err := os.ReadFile(filepath.Join(root, "f"))
	if err != nil {
		t.Fatal(err)
	}
	for _, early := range []bool{false, true} {
		c, err := client.New(d.Admin, client.Options{Streams: 3, EarlyData: early})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				f, err := c.Open(ctx, "/uva/alpha/f", wire.OpenRead)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close(ctx)
				got := make([]byte, len(want))
				if _, err := f.ReadAt(ctx, got, 0); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, want) {
					t.Error("read the wrong bytes")
				}
			})
		}
		wg.Wait()
		c.Close()
	}
}
