package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/gateway"
)

// smbRows reads the large file cold and warm, and writes the small
// files, through an SMB gateway (Samba, over a mount of the
// administrator's vfs) with smbclient; mc and mw are the mount's cold and
// warm read times. Without Samba or smbclient it says so and measures
// nothing.
func smbRows(ctx context.Context, o Options, e *Env, size int64, nsmall int, mc, mw time.Duration) ([]Row, error) {
	if _, err := exec.LookPath("smbclient"); err != nil {
		o.say("gateways: smbclient is not installed: SMB is not measured (apt-get install samba smbclient libnss-wrapper)")
		return nil, nil
	}
	creds, err := gatewayCreds(ctx, e, "bench-smb")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.Dir, "gateway-smb")
	pw := filepath.Join(e.Dir, "smbpasswd")
	if err := gateway.SetSMBPassword(pw, "admin", "bench-password"); err != nil {
		return nil, err
	}
	g, err := gateway.New(gateway.Config{Client: creds, Cache: cache.Options{Dir: dir, DiskBytes: 4 << 30, MemoryBytes: 256 << 20}})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	smb, err := g.StartSMB(gateway.SMBConfig{Listen: "127.0.0.1:0", Passwords: pw})
	if err != nil {
		return nil, err
	}
	defer smb.Close()
	host, port, _ := strings.Cut(smb.Addr(), ":")
	run := func(cmds string) error {
		cmd := exec.CommandContext(ctx, "smbclient", "//"+host+"/"+e.Domain, "-p", port, "-U", "admin%bench-password", "-c", cmds)
		cmd.Dir = e.Dir
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "NT_STATUS_") {
			err = fmt.Errorf("smbclient %s: %s", cmds, strings.TrimSpace(string(out)))
		}
		return err
	}
	timeGet := func() (float64, error) {
		t0 := time.Now()
		err := run(`get data\big /dev/null`)
		return mbps(size, time.Since(t0)), err
	}
	o.say("gateways: smb (Samba, encrypted)")
	cold, err := timeGet()
	if err != nil {
		return nil, err
	}
	if _, err := timeGet(); err != nil {
		return nil, err
	}
	warm, err := timeGet()
	if err != nil {
		return nil, err
	}
	const name = "smb (Samba, SMB3 encrypted)"
	rows := []Row{
		{Scenario: "gateways", Case: name, Metric: "cold read " + sizeName(size), Value: cold, Unit: "MB/s", Ref: "mount, cold", RefValue: mbps(size, mc), HigherBetter: true},
		{Scenario: "gateways", Case: name, Metric: "warm read " + sizeName(size), Value: warm, Unit: "MB/s", Ref: "mount, warm", RefValue: mbps(size, mw), HigherBetter: true},
	}
	// Small files: one session puts them all.
	local := filepath.Join(e.Dir, "smb-small")
	if err := os.MkdirAll(local, 0o755); err != nil {
		return nil, err
	}
	body := make([]byte, 4096)
	for i := range nsmall {
		if err := os.WriteFile(filepath.Join(local, fmt.Sprintf("f%05d", i)), body, 0o644); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	if err := run(`lcd smb-small; cd data\small-smb; prompt off; mput *`); err != nil {
		return nil, err
	}
	rows = append(rows, Row{Scenario: "gateways", Case: name, Metric: fmt.Sprintf("%d x 4KiB written", nsmall),
		Value: float64(nsmall) / time.Since(t0).Seconds(), Unit: "files/s", HigherBetter: true})
	return rows, nil
}
