package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// runRecall measures the recall of a write delegation on a large file
// whose data one agent keeps back (write mode back): another agent reads
// one block near its end. The share recalls the delegation; the holder
// writes the wanted block and the final size first, and the reader goes
// on while the rest is written. Beside it: the time to read the whole
// file, which a recall that sent everything first would make the reader
// wait for.
func runRecall(ctx context.Context, o Options) ([]Row, error) {
	size := int64(256 << 20)
	rtt := 40 * time.Millisecond
	if len(o.RTTs) > 0 {
		rtt = o.RTTs[0]
	}
	if o.Quick {
		size = 32 << 20
	}
	link := &wan.Config{RTT: rtt, Rate: o.Rate}
	e, _, _, err := startWith(ctx, link)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	cb, err := consistency.Parse("callback")
	if err != nil {
		return nil, err
	}
	holder, err := e.Mount(vfs.Options{Consistency: cb, Write: vfs.WriteBack}, 0)
	if err != nil {
		return nil, err
	}
	defer holder.Unmount()
	reader, err := e.Mount(vfs.Options{Consistency: cb}, 0)
	if err != nil {
		return nil, err
	}
	defer reader.Unmount()
	dir := "/bench/data"
	// The back channels: a first look through each agent starts them.
	for range 2 {
		os.ReadDir(holder.Path(dir))
		os.ReadDir(reader.Path(dir))
		time.Sleep(300 * time.Millisecond)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>20)
	}
	o.say("recall: %v kept back by one agent, read by another through a %v link", mib(size), rtt)
	if err := os.WriteFile(holder.Path(dir+"/big"), data, 0o644); err != nil {
		return nil, err
	}
	if holder.FS().Delegations().Held != 1 {
		return nil, fmt.Errorf("recall: the share granted no write delegation to the writer")
	}
	t0 := time.Now()
	f, err := os.Open(reader.Path(dir + "/big"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	block := make([]byte, 4096)
	off := size - 1<<20
	if _, err := f.ReadAt(block, off); err != nil {
		return nil, err
	}
	first := time.Since(t0)
	if !bytes.Equal(block, data[off:off+4096]) {
		return nil, fmt.Errorf("recall: the reader's block differs from what was written")
	}
	got, err := os.ReadFile(reader.Path(dir + "/big"))
	if err != nil {
		return nil, err
	}
	whole := time.Since(t0)
	if !bytes.Equal(got, data) {
		return nil, fmt.Errorf("recall: the reader's copy differs from what was written")
	}
	cs := fmt.Sprintf("%s, rtt %v", mib(size), rtt)
	return []Row{{Scenario: "recall", Case: cs, Metric: "first block", Value: ms(first), Unit: "ms",
		Ref: "whole file", RefValue: ms(whole),
		Note: "a block near the end, read by another agent while the holder still keeps the file back"}}, nil
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
