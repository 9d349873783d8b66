package controller

import (
	"context"
	"testing"
)

// TestCloseTwice: a controller closed twice (a benchmark that stops one
// to measure failover, then closes its tier) does not panic, and says the
// same both times.
func TestCloseTwice(t *testing.T) {
	c, err := Start(context.Background(), Config{StateDir: t.TempDir(), Domain: "twice", Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	first := c.Close()
	if second := c.Close(); second != first {
		t.Errorf("closed again: %v, first %v", second, first)
	}
}
