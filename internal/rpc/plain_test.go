package rpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// TestMACConn: records pass intact, and a flipped bit, a dropped record or
// a replayed one is refused.
func TestMACConn(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	msg := bytes.Repeat([]byte("pando safe channel "), 10000) // several records
	wire := func(tamper func([]byte) []byte) ([]byte, error) {
		a, b := net.Pipe()
		var raw bytes.Buffer
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(&raw, b)
		}()
		w, _ := newMACConn(a, key, true)
		w.Write(msg[:100])
		w.Write(msg[100:])
		a.Close()
		<-done
		c, d := net.Pipe()
		go func() {
			c.Write(tamper(raw.Bytes()))
			c.Close()
		}()
		r, _ := newMACConn(d, key, false)
		return io.ReadAll(r)
	}
	got, err := wire(func(b []byte) []byte { return b })
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("intact stream: %d bytes, %v", len(got), err)
	}
	first := 4 + 100 + 16
	for name, tamper := range map[string]func([]byte) []byte{
		"flipped bit":     func(b []byte) []byte { b[first+50] ^= 1; return b },
		"dropped record":  func(b []byte) []byte { return b[first:] },
		"replayed record": func(b []byte) []byte { return append(append([]byte{}, b[:first]...), b...) },
	} {
		if _, err := wire(tamper); !errors.Is(err, ErrTampered) {
			t.Errorf("%s: %v, want ErrTampered", name, err)
		}
	}
	// The wrong direction's key (a reflected stream) fails too.
	a, b := net.Pipe()
	go func() {
		w, _ := newMACConn(a, key, false)
		w.Write(msg[:10])
		a.Close()
	}()
	r, _ := newMACConn(b, key, false)
	if _, err := io.ReadAll(r); !errors.Is(err, ErrTampered) {
		t.Errorf("reflected stream: %v", err)
	}
}
