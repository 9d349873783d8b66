package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/transfer"
	"pando.dev/pando/internal/wan"
)

// runTransfer: pando cp of one large file, memory to memory (tmpfs at both
// ends) and disk to disk, with 1 and 4 streams, through a link of the given
// RTTs and a shared rate cap, beside the raw link, Go's TLS stream and
// globus-url-copy (where installed); then many small files at 40 ms.
func runTransfer(ctx context.Context, o Options) ([]Row, error) {
	size := int64(1 << 30)
	rtts := o.RTTs
	if len(rtts) == 0 {
		rtts = []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}
	}
	rate := o.Rate
	if rate == 0 {
		rate = 1e9
	}
	files, smallRTT := 10000, 40*time.Millisecond
	if o.Quick {
		size, files, smallRTT = 32<<20, 300, rtts[len(rtts)-1]
	}
	reps := 5
	if o.Quick {
		reps = 1
	}
	var rows []Row
	tlsRef, err := rawTLS(size)
	if err != nil {
		return nil, err
	}
	for _, kind := range []string{"mem", "disk"} {
		base := os.TempDir()
		if kind == "mem" {
			base = "/dev/shm"
		}
		for _, rtt := range rtts {
			link := wan.Config{RTT: rtt, Rate: rate, Shared: true}
			raw, err := rawLink(link, min(size, 256<<20))
			if err != nil {
				return nil, err
			}
			for _, p := range []int{1, 4} {
				o.say("transfer: %s to %s, %d stream(s), rtt %v", sizeName(size), kind, p, rtt)
				mbs, _, err := cpOnce(ctx, base, &link, size, p, kind == "disk", "private", false)
				if err != nil {
					return nil, err
				}
				cs := fmt.Sprintf("%s -p %d rtt %v", kind, p, rtt)
				rows = append(rows, Row{Scenario: "transfer", Case: cs, Metric: "cp", Value: mbs, Unit: "MB/s",
					Ref: "raw link", RefValue: raw, HigherBetter: true, Note: fmt.Sprintf("cap %s shared by all streams; data private (TLS)", wan.FormatRate(rate))})
			}
		}
		// Loopback, no emulated link: pando beside Go's TLS and GridFTP.
		// globus-url-copy never syncs: pando cp --no-sync beside it, and
		// the durable copy (synced at each checkpoint) beside
		// globus-url-copy followed by an fsync.
		for _, p := range []int{1, 4} {
			o.say("transfer: %s to %s, %d stream(s), loopback", sizeName(size), kind, p)
			mbs, _, err := cpOnce(ctx, base, nil, size, p, kind == "disk", "private", false)
			if err != nil {
				return nil, err
			}
			cs := fmt.Sprintf("%s -p %d loopback", kind, p)
			rows = append(rows, Row{Scenario: "transfer", Case: cs, Metric: "cp private vs Go TLS", Value: mbs, Unit: "MB/s",
				Ref: "one Go TLS 1.3 stream, memory", RefValue: tlsRef, HigherBetter: true, Note: "data private (TLS)"})
			// Both tools' rates swing between runs on a shared machine:
			// each figure is the median of reps runs, the two tools'
			// runs taking turns.
			var clears, cpus, gs, gcpus []float64
			var gerr error
			for range reps {
				clear, cpu, err := cpOnce(ctx, base, nil, size, p, kind == "disk", "clear", true)
				if err != nil {
					return nil, err
				}
				clears, cpus = append(clears, clear), append(cpus, cpu)
				if gerr == nil {
					g, gcpu, err := globusCopy(base, size, p, kind == "disk", false)
					gerr = err
					gs, gcpus = append(gs, g), append(gcpus, gcpu)
				}
			}
			row := Row{Scenario: "transfer", Case: cs, Metric: "cp --no-sync clear vs globus-url-copy", Value: median(clears), Unit: "MB/s",
				HigherBetter: true, Note: fmt.Sprintf("same stream count, both clear, neither syncs; median of %d runs each", reps)}
			// CPU time per GiB moved: what the copy costs the machine,
			// steadier than a rate on a shared one. pando's share and
			// client both run in this process; globus's server and client
			// are two processes.
			cpuRow := Row{Scenario: "transfer", Case: cs, Metric: "cp --no-sync clear CPU vs globus-url-copy", Value: median(cpus), Unit: "CPU-s/GiB",
				Note: "share and client together, user and system time"}
			if gerr == nil {
				row.Ref, row.RefValue = "globus-url-copy -fast, clear", median(gs)
				cpuRow.Ref, cpuRow.RefValue = "globus-gridftp-server and globus-url-copy", median(gcpus)
			} else {
				row.Note = "no globus-url-copy reference: " + gerr.Error()
				o.say("transfer: %s", row.Note)
			}
			rows = append(rows, row, cpuRow)
			if kind != "disk" {
				continue
			}
			var durables, gfs []float64
			for range reps {
				durable, _, err := cpOnce(ctx, base, nil, size, p, true, "clear", false)
				if err != nil {
					return nil, err
				}
				durables = append(durables, durable)
				if gerr == nil {
					g, _, err := globusCopy(base, size, p, true, true)
					if err != nil {
						gerr = err
					}
					gfs = append(gfs, g)
				}
			}
			row = Row{Scenario: "transfer", Case: cs, Metric: "cp clear vs globus-url-copy + fsync", Value: median(durables), Unit: "MB/s",
				HigherBetter: true, Note: fmt.Sprintf("both durable at the end (cp syncs each checkpoint); median of %d runs each", reps)}
			if gerr == nil {
				row.Ref, row.RefValue = "globus-url-copy -fast, then fsync", median(gfs)
			} else {
				row.Note = "no globus-url-copy reference: " + gerr.Error()
			}
			rows = append(rows, row)
		}
	}
	o.say("transfer: %d files of 4 KiB through rtt %v", files, smallRTT)
	took, ref, err := smallFiles(ctx, files, wan.Config{RTT: smallRTT, Rate: rate, Shared: true})
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{Scenario: "transfer", Case: fmt.Sprintf("%d x 4KiB rtt %v", files, smallRTT), Metric: "small files", Value: took, Unit: "s",
		Ref: "local copy", RefValue: ref, Note: "target for 10,000 files at 40 ms: under 10 s"})
	return rows, nil
}

// cpOnce copies a file of size from a share behind link to a local file,
// all below base, and returns MB/s and the CPU time this process (share
// and client) spent per GiB copied. With noSync, the copy is left to the
// page cache (pando cp --no-sync).
func cpOnce(ctx context.Context, base string, link *wan.Config, size int64, streams int, disk bool, protection string, noSync bool) (float64, float64, error) {
	e, err := NewEnvIn(ctx, base)
	if err != nil {
		return 0, 0, err
	}
	defer e.Close()
	root, _, err := e.AddShare(ctx, "data", link)
	if err != nil {
		return 0, 0, err
	}
	if err := pattern.WriteFile(filepath.Join(root, "f"), size); err != nil {
		return 0, 0, err
	}
	if disk {
		dropCache(filepath.Join(root, "f"))
	}
	c, err := client.New(e.Admin, client.Options{Streams: streams, Protection: protection})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	dst := filepath.Join(e.Dir, "copy")
	freshPages(size + 256<<20)
	cpu0 := selfCPU()
	s, err := transfer.Copy(ctx, []string{"pando://bench/data/f"}, dst, transfer.Options{Streams: streams, Retries: 2, NoSync: noSync,
		JournalDir: filepath.Join(e.Dir, "journal"), Grid: func() (*client.Client, error) { return c, nil }})
	if err != nil {
		return 0, 0, err
	}
	cpu := selfCPU() - cpu0
	if s.Moved != size {
		return 0, 0, fmt.Errorf("cp moved %d of %d bytes", s.Moved, size)
	}
	return s.MBps, cpu / (float64(size) / (1 << 30)), nil
}

// smallFiles copies a tree of n files of 4 KiB to a share behind link and
// returns the seconds it took, and the seconds of the same copy on local
// disk.
func smallFiles(ctx context.Context, n int, link wan.Config) (float64, float64, error) {
	e, err := NewEnv(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer e.Close()
	if _, _, err := e.AddShare(ctx, "data", &link); err != nil {
		return 0, 0, err
	}
	src := filepath.Join(e.Dir, "tree")
	buf := make([]byte, 4096)
	for i := range n {
		dir := filepath.Join(src, fmt.Sprintf("d%02d", i%100))
		if i < 100 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return 0, 0, err
			}
		}
		buf[0], buf[1] = byte(i), byte(i>>8)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), buf, 0o644); err != nil {
			return 0, 0, err
		}
	}
	c, err := client.New(e.Admin, client.Options{Streams: 4})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	o := transfer.Options{Streams: 4, Recursive: true, Retries: 2, JournalDir: filepath.Join(e.Dir, "journal"),
		Grid: func() (*client.Client, error) { return c, nil }}
	t0 := time.Now()
	s, err := transfer.Copy(ctx, []string{src}, "pando://bench/data/", o)
	if err != nil {
		return 0, 0, err
	}
	took := time.Since(t0).Seconds()
	if s.Files != int64(n) {
		return 0, 0, fmt.Errorf("copied %d of %d files", s.Files, n)
	}
	t0 = time.Now()
	if _, err := transfer.Copy(ctx, []string{src}, filepath.Join(e.Dir, "localcopy"), o); err != nil {
		return 0, 0, err
	}
	return took, time.Since(t0).Seconds(), nil
}

// rawTLS measures one TLS 1.3 stream of size bytes, memory to memory, on
// loopback: what Go's TLS can do on this machine.
func rawTLS(size int64) (float64, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"bench"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return 0, err
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	go sendBytes(ln, size)
	return receive("TLS stream", size, func() (net.Conn, error) {
		return tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	})
}

// globusCopy runs globus-url-copy -fast -p streams from an anonymous
// globus-gridftp-server on loopback to a local file, below base; it
// returns MB/s and the CPU time of server and client per GiB, or an error
// when GridFTP is not installed. With syncDst, the clock stops only once
// the copy is on disk, as pando cp's is.
func globusCopy(base string, size int64, streams int, disk, syncDst bool) (float64, float64, error) {
	guc, err := exec.LookPath("globus-url-copy")
	if err != nil {
		return 0, 0, fmt.Errorf("globus-url-copy is not installed (apt-get install globus-gass-copy-progs globus-gridftp-server-progs)")
	}
	srv, err := exec.LookPath("globus-gridftp-server")
	if err != nil {
		srv = "/usr/sbin/globus-gridftp-server"
		if _, err := os.Stat(srv); err != nil {
			return 0, 0, fmt.Errorf("globus-gridftp-server is not installed")
		}
	}
	dir, err := os.MkdirTemp(base, "pando-bench-gridftp-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777) // the server's anonymous user writes here
	src := filepath.Join(dir, "src")
	if err := pattern.WriteFile(src, size); err != nil {
		return 0, 0, err
	}
	os.Chmod(src, 0o644)
	if disk {
		dropCache(src)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{"-aa", "-p", fmt.Sprint(port), "-d", "error", "-l", filepath.Join(dir, "log")}
	if os.Geteuid() == 0 {
		args = append(args, "-anonymous-user", "nobody")
	}
	server := exec.Command(srv, args...)
	if err := server.Start(); err != nil {
		return 0, 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			server.Process.Kill()
			server.Wait()
		}
	}()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if i > 50 {
			return 0, 0, fmt.Errorf("globus-gridftp-server did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	dst := filepath.Join(dir, "dst")
	freshPages(size + 256<<20)
	t0 := time.Now()
	client := exec.Command(guc, "-fast", "-p", fmt.Sprint(streams), fmt.Sprintf("ftp://127.0.0.1:%d%s", port, src), "file://"+dst)
	out, err := client.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("globus-url-copy: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if syncDst {
		if f, err := os.Open(dst); err == nil {
			f.Sync()
			f.Close()
		}
	}
	took := time.Since(t0)
	if fi, err := os.Stat(dst); err != nil || fi.Size() != size {
		return 0, 0, fmt.Errorf("globus-url-copy left %v bytes", fi)
	}
	// The server forks a process per session and collects it once it
	// ends; then its CPU time includes theirs.
	time.Sleep(300 * time.Millisecond)
	server.Process.Signal(syscall.SIGTERM)
	server.Wait()
	stopped = true
	cpu := client.ProcessState.UserTime() + client.ProcessState.SystemTime() +
		server.ProcessState.UserTime() + server.ProcessState.SystemTime()
	return mbps(size, took), cpu.Seconds() / (float64(size) / (1 << 30)), nil
}

// selfCPU is the user and system time this process has used, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
