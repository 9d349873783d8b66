package client_test

import (
	"context"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

const benchSize = 1 << 30

// BenchmarkShareRead reads a 1 GiB file from a share over loopback through
// the client library (pipelined 1 MiB reads), beside the reference: a plain
// TLS 1.3 stream of the same number of bytes between the same kind of
// certificates, in the same run.
func BenchmarkShareRead(b *testing.B) {
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	testenv.MakeFile(b, filepath.Join(root, "big"), benchSize)
	c := d.Client(d.Admin)
	ctx := context.Background()

	b.Run("reference=tls-stream", func(b *testing.B) {
		cert, err := d.Admin.Certificate()
		if err != nil {
			b.Fatal(err)
		}
		pool, _ := auth.PoolFromPEM([]byte(d.Admin.CA))
		ln, err := tls.Listen("tcp", "127.0.0.1:0", auth.ServerConfig(cert, pool))
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			buf := make([]byte, 1<<20)
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				for sent := 0; sent < benchSize; sent += len(buf) {
					if _, err := conn.Write(buf); err != nil {
						break
					}
				}
				conn.Close()
			}
		}()
		b.SetBytes(benchSize)
		for b.Loop() {
			conn, err := tls.Dial("tcp", ln.Addr().String(), auth.ClientConfig(cert, pool, nil))
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.CopyBuffer(io.Discard, conn, make([]byte, 1<<20))
			conn.Close()
			if n != benchSize {
				b.Fatalf("stream moved %d bytes", n)
			}
		}
	})
	b.Run("pando-read", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			f, err := c.Open(ctx, "/bench/data/big", wire.OpenRead)
			if err != nil {
				b.Fatal(err)
			}
			n, err := f.WriteTo(ctx, io.Discard)
			f.Close(ctx)
			if err != nil || n != benchSize {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}

// BenchmarkOpenStat measures open + stat of a file through the library on
// loopback (the Avaki paper's open latency: 3.5 ms; NFSv3 1.1 ms) and
// reports the median and p99.
func BenchmarkOpenStat(b *testing.B) {
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644)
	c := d.Client(d.Admin)
	ctx := context.Background()
	if _, err := c.Stat(ctx, "/bench/data/f"); err != nil { // warm the token and connections
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		f, err := c.Open(ctx, "/bench/data/f", wire.OpenRead)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Stat(ctx, "/bench/data/f"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		f.Close(ctx)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
