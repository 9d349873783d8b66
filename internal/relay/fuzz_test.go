package relay

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzRequest: any bytes a peer sends as its request line are read within
// MaxLine and parsed without panic; what parses encodes back to itself.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(Magic + " CONNECT share:data@uva\n"))
	f.Add([]byte(Magic + " REGISTER controller@tacc\n"))
	f.Add([]byte(Magic + " ACCEPT 00112233445566778899aabbccddeeff\n"))
	f.Add([]byte(Magic + " ACCEPT 0011\n"))
	f.Add([]byte("\x16\x03\x01\x02\x00"))
	f.Add([]byte(strings.Repeat("A", MaxLine+1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		line, err := ReadLine(r)
		if err != nil {
			return
		}
		if len(line) >= MaxLine || int(r.Size())-r.Len() != len(line)+1 {
			t.Fatalf("read %d bytes for a line of %d", int(r.Size())-r.Len(), len(line))
		}
		req, err := ParseRequest(line)
		if err != nil {
			return
		}
		if req.String() != line {
			t.Fatalf("%q parsed as %+v, which encodes as %q", line, req, req.String())
		}
	})
}

// FuzzReply: the relay's answers and control lines, as a server or a
// client reads them.
func FuzzReply(f *testing.F) {
	f.Add("OK")
	f.Add("ERR no server named share:x@uva is registered at this relay")
	f.Add("ERR ")
	f.Add("PING")
	f.Add("DIAL 00112233445566778899aabbccddeeff")
	f.Add("DIAL zz112233445566778899aabbccddeeff")
	f.Fuzz(func(t *testing.T, line string) {
		if err := ParseReply(line); err != nil {
			if ref, ok := err.(*Refused); ok && ref.Reason == "" {
				t.Fatalf("%q: a refusal without a reason", line)
			}
		}
		nonce, dial, err := ParseControl(line)
		if dial && (err != nil || line != ctlDial+" "+hex.EncodeToString(nonce[:])) {
			t.Fatalf("%q: dial %x, %v", line, nonce, err)
		}
		if r := refusal(line); len(r) > MaxLine || strings.ContainsAny(r, "\n\r") {
			t.Fatalf("refusal %q is not one short line", r)
		}
	})
}

// FuzzAddr: addresses from a controller's share records, as a client's
// dialer reads them.
func FuzzAddr(f *testing.F) {
	f.Add("relay://127.0.0.1:7400/share:data@uva")
	f.Add("relay://[::1]:7400/controller@tacc")
	f.Add("relay://host/x")
	f.Add("relay://h:1/")
	f.Add("127.0.0.1:7070")
	f.Fuzz(func(t *testing.T, addr string) {
		relayAddr, name, err := ParseAddr(addr)
		if err != nil {
			return
		}
		if !IsAddr(addr) || Addr(relayAddr, name) != addr {
			t.Fatalf("%q parsed as %q and %q", addr, relayAddr, name)
		}
	})
}
