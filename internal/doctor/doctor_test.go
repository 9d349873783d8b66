package doctor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/config"
)

func TestKernelVersion(t *testing.T) {
	for _, c := range []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"6.18.44-fc-v595", 6, 18, true}, {"6.9", 6, 9, true}, {"5.15.0-91-generic", 5, 15, true},
		{"6.8rc1", 6, 8, true}, {"6", 0, 0, false}, {"x.y", 0, 0, false},
	} {
		ma, mi, ok := kernelVersion(c.in)
		if ok != c.ok || ok && (ma != c.major || mi != c.minor) {
			t.Errorf("kernelVersion(%q) = %d, %d, %v; want %d, %d, %v", c.in, ma, mi, ok, c.major, c.minor, c.ok)
		}
	}
}

func TestClockResult(t *testing.T) {
	sent := time.Unix(1000, 0)
	rtt := 20 * time.Millisecond
	mid := sent.Add(rtt / 2)
	for _, c := range []struct {
		ctrl time.Time
		want Status
		say  string
	}{
		{mid, OK, "0s ahead of"},
		{mid.Add(-3 * time.Second), Warn, "3s ahead of"},
		{mid.Add(10 * time.Second), Fail, "10s behind"},
	} {
		r := clockResult(c.ctrl.UnixNano(), sent, rtt)
		if r.Status != c.want || !strings.Contains(r.Msg, c.say) {
			t.Errorf("controller at %v: %v %q, want %v saying %q", c.ctrl.Sub(mid), r.Status, r.Msg, c.want, c.say)
		}
		if r.Status != OK && !strings.Contains(r.Msg, "NTP") {
			t.Errorf("%q does not say what to do", r.Msg)
		}
	}
	if r := clockResult(0, sent, rtt); r.Status != Warn {
		t.Errorf("a controller without a clock: %v, want a warning", r.Status)
	}
}

func TestCheckCert(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice@uva"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
	for _, c := range []struct {
		at   time.Time
		want Status
		say  string
	}{
		{now, OK, "valid until"},
		{now.Add(20 * 24 * time.Hour), Warn, "days: ask"},
		{now.Add(31 * 24 * time.Hour), Fail, "expired"},
		{now.Add(-2 * time.Hour), Fail, "clock is behind"},
	} {
		r := checkCert(cfg, c.at)
		if r.Status != c.want || !strings.Contains(r.Msg, c.say) {
			t.Errorf("at %v: %v %q, want %v saying %q", c.at.Sub(now), r.Status, r.Msg, c.want, c.say)
		}
	}
	if r := checkCert(&config.Config{Cert: "junk"}, now); r.Status != Fail {
		t.Errorf("a certificate that is not PEM: %v, want a failure", r.Status)
	}
}
