package relay

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
)

// The relay's own protocol is a handful of text lines, each at most
// MaxLine bytes and ended by "\n", exchanged before a splice begins (see
// docs/protocol.md, "Relay"). After "OK" the bytes are the peers' own.
const (
	// Magic opens every request.
	Magic = "PANDO-RELAY/1"
	// MaxLine bounds every line the relay or its peers read.
	MaxLine = 256
	// NonceSize is the length of a dial-back nonce, in bytes.
	NonceSize = 16
	// Scheme opens an address served through a relay.
	Scheme = "relay://"
)

// Verbs of a request.
const (
	VerbConnect  = "CONNECT"  // a client: splice me to the server NAME
	VerbRegister = "REGISTER" // a server, over mutual TLS: serve NAME through me
	VerbAccept   = "ACCEPT"   // a server, dialling back: this connection is for NONCE
)

// Lines the relay sends a registered server on its control connection.
const (
	ctlDial = "DIAL" // DIAL NONCE: dial back for a client
	ctlPing = "PING" // keeps the connection and its NAT mapping alive
)

// ErrLine reports a line that is too long, empty or not text.
var ErrLine = errors.New("malformed relay line")

// Request is a parsed request line.
type Request struct {
	Verb string
	Name string // CONNECT and REGISTER: the server's identity
	// Nonce is ACCEPT's dial-back nonce.
	Nonce [NonceSize]byte
}

// String is the request as it goes on the wire, without the newline.
func (r Request) String() string {
	if r.Verb == VerbAccept {
		return Magic + " " + r.Verb + " " + hex.EncodeToString(r.Nonce[:])
	}
	return Magic + " " + r.Verb + " " + r.Name
}

// ParseRequest decodes a request line (without its newline).
func ParseRequest(line string) (Request, error) {
	f := strings.Split(line, " ")
	if len(f) != 3 || f[0] != Magic {
		return Request{}, fmt.Errorf("%w: a request is %q VERB ARGUMENT", ErrLine, Magic)
	}
	r := Request{Verb: f[1]}
	switch r.Verb {
	case VerbConnect, VerbRegister:
		if err := ValidName(f[2]); err != nil {
			return Request{}, err
		}
		r.Name = f[2]
	case VerbAccept:
		n, err := parseNonce(f[2])
		if err != nil {
			return Request{}, err
		}
		r.Nonce = n
	default:
		return Request{}, fmt.Errorf("%w: unknown verb %q", ErrLine, r.Verb)
	}
	return r, nil
}

func parseNonce(s string) ([NonceSize]byte, error) {
	var n [NonceSize]byte
	if len(s) != 2*NonceSize {
		return n, fmt.Errorf("%w: a nonce is %d hex digits", ErrLine, 2*NonceSize)
	}
	if _, err := hex.Decode(n[:], []byte(s)); err != nil || hex.EncodeToString(n[:]) != s {
		return n, fmt.Errorf("%w: a nonce is %d lower-case hex digits", ErrLine, 2*NonceSize)
	}
	return n, nil
}

// ValidName checks a server's name as the relay knows it: a pando
// identity as people see it (share:data@uva, controller@uva): lower-case
// letters, digits and . _ - : @, at most 200 bytes.
func ValidName(s string) error {
	if s == "" || len(s) > 200 {
		return fmt.Errorf("%w: a server name is 1 to 200 bytes", ErrLine)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("._-:@", c) >= 0) {
			return fmt.Errorf("%w: %q may hold only lower-case letters, digits and . _ - : @", ErrLine, s)
		}
	}
	return nil
}

// Refused is the relay's answer "ERR SENTENCE": it refused the request
// and says why.
type Refused struct{ Reason string }

func (e *Refused) Error() string { return e.Reason }

// ParseReply decodes the relay's answer to a request: nil for "OK", a
// *Refused for "ERR SENTENCE".
func ParseReply(line string) error {
	if line == "OK" {
		return nil
	}
	if reason, ok := strings.CutPrefix(line, "ERR "); ok && reason != "" {
		return &Refused{Reason: reason}
	}
	return fmt.Errorf("%w: the relay answered neither OK nor ERR", ErrLine)
}

// refusal is the ERR line for reason: one sentence, on one line.
func refusal(reason string) string {
	reason = strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return ' '
		}
		return r
	}, reason)
	if len(reason) > MaxLine-5 {
		reason = reason[:MaxLine-5]
	}
	return "ERR " + reason
}

// ParseControl decodes a line the relay sends a registered server: a
// dial-back nonce, or ok=false for a ping.
func ParseControl(line string) (nonce [NonceSize]byte, dial bool, err error) {
	if line == ctlPing {
		return nonce, false, nil
	}
	arg, ok := strings.CutPrefix(line, ctlDial+" ")
	if !ok {
		return nonce, false, fmt.Errorf("%w: unknown control line", ErrLine)
	}
	nonce, err = parseNonce(arg)
	return nonce, err == nil, err
}

// ReadLine reads one line of at most MaxLine bytes, a byte at a time: not
// one byte past the newline is taken from r, since what follows belongs
// to the peers of a splice.
func ReadLine(r io.Reader) (string, error) {
	var b [MaxLine]byte
	for n := 0; n < len(b); n++ {
		if _, err := io.ReadFull(r, b[n:n+1]); err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		switch c := b[n]; {
		case c == '\n':
			return string(b[:n]), nil
		case c < ' ' || c > '~':
			return "", fmt.Errorf("%w: a line holds printable ASCII only", ErrLine)
		}
	}
	return "", fmt.Errorf("%w: a line is at most %d bytes", ErrLine, MaxLine)
}

func writeLine(w io.Writer, line string) error {
	_, err := io.WriteString(w, line+"\n")
	return err
}

// Addr is the address of server name reached through the relay at
// relayAddr (host:port): relay://HOST:PORT/NAME. Shares register it with
// their controller like any other address; clients dial it with Dial.
func Addr(relayAddr, name string) string { return Scheme + relayAddr + "/" + name }

// IsAddr reports whether addr is a relay address (see Addr).
func IsAddr(addr string) bool { return strings.HasPrefix(addr, Scheme) }

// ParseAddr splits a relay address into the relay's host:port and the
// server's name.
func ParseAddr(addr string) (relayAddr, name string, err error) {
	rest, ok := strings.CutPrefix(addr, Scheme)
	if !ok {
		return "", "", fmt.Errorf("%q is not a relay address (%sHOST:PORT/NAME)", addr, Scheme)
	}
	relayAddr, name, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", fmt.Errorf("%q names no server after the relay (%sHOST:PORT/NAME)", addr, Scheme)
	}
	if _, _, err := net.SplitHostPort(relayAddr); err != nil {
		return "", "", fmt.Errorf("relay address %q: %w", addr, err)
	}
	if err := ValidName(name); err != nil {
		return "", "", fmt.Errorf("relay address %q: %w", addr, err)
	}
	return relayAddr, name, nil
}
