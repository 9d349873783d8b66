package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// The integrity worker runs in a second process (this test binary, re-run
// with these variables set): see TestMain.
const (
	envWorker = "PANDO_INTEGRITY_WORKER" // "seed,ops,mountdir,refdir,prefix"
)

// runWorkerFromEnv runs an integrity worker if the environment asks for
// one, and reports whether it did.
func runWorkerFromEnv() bool {
	spec := os.Getenv(envWorker)
	if spec == "" {
		return false
	}
	var seed, ops int
	var mnt, ref, prefix string
	if _, err := fmt.Sscanf(spec, "%d %d %s %s %s", &seed, &ops, &mnt, &ref, &prefix); err != nil {
		fmt.Fprintln(os.Stderr, "bad worker spec:", err)
		os.Exit(2)
	}
	if err := integrityWorker(uint64(seed), ops, mnt, ref, prefix); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return true
}

// integrityWorker applies ops random operations to files named prefix* in
// mnt and in ref alike, checking every read against ref.
func integrityWorker(seed uint64, ops int, mnt, ref, prefix string) error {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	const nfiles = 6
	const maxSize = 700 << 10
	name := func() string { return fmt.Sprintf("%s%d", prefix, rng.IntN(nfiles)) }
	buf := make([]byte, 256<<10)
	got := make([]byte, 256<<10)
	for i := 0; i < ops; i++ {
		op := rng.IntN(100)
		n := name()
		m, r := filepath.Join(mnt, n), filepath.Join(ref, n)
		switch {
		case op < 40: // write at a random offset, across block boundaries
			off := rng.Int64N(maxSize)
			l := 1 + rng.IntN(len(buf))
			for j := range l {
				buf[j] = byte(rng.Uint32())
			}
			for _, p := range []string{m, r} {
				f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					return fmt.Errorf("op %d open %s: %w", i, p, err)
				}
				if _, err := f.WriteAt(buf[:l], off); err != nil {
					f.Close()
					return fmt.Errorf("op %d write %s: %w", i, p, err)
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("op %d close %s: %w", i, p, err)
				}
			}
		case op < 52: // truncate
			size := rng.Int64N(maxSize)
			em, er := os.Truncate(m, size), os.Truncate(r, size)
			if (em == nil) != (er == nil) {
				return fmt.Errorf("op %d truncate %s: mount %v, reference %v", i, n, em, er)
			}
		case op < 90: // read at a random offset and compare
			off := rng.Int64N(maxSize)
			l := 1 + rng.IntN(len(got))
			a, ea := readAt(m, got[:l], off)
			b, eb := readAt(r, buf[:l], off)
			if (ea == nil) != (eb == nil) {
				return fmt.Errorf("op %d read %s: mount %v, reference %v", i, n, ea, eb)
			}
			if !bytes.Equal(got[:a], buf[:b]) {
				first := 0
				for first < min(a, b) && got[first] == buf[first] {
					first++
				}
				return fmt.Errorf("op %d read %s at %d: %d bytes differ from the reference's %d, first at offset %d (file offset %d)", i, n, off, a, b, first, off+int64(first))
			}
		case op < 97: // rename, often over an existing file
			to := name()
			em := os.Rename(m, filepath.Join(mnt, to))
			er := os.Rename(r, filepath.Join(ref, to))
			if (em == nil) != (er == nil) {
				return fmt.Errorf("op %d rename %s %s: mount %v, reference %v", i, n, to, em, er)
			}
		default: // remove
			em, er := os.Remove(m), os.Remove(r)
			if (em == nil) != (er == nil) {
				return fmt.Errorf("op %d remove %s: mount %v, reference %v", i, n, em, er)
			}
		}
	}
	return nil
}

func readAt(p string, b []byte, off int64) (int, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.ReadAt(b, off)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// compareTrees checks that dir a and dir b hold the same files and bytes.
func compareTrees(t *testing.T, a, b string) {
	t.Helper()
	list := func(d string) []string {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		return names
	}
	na, nb := list(a), list(b)
	if !slices.Equal(na, nb) {
		t.Fatalf("listings differ:\n%v\n%v", na, nb)
	}
	for _, n := range na {
		x, err1 := os.ReadFile(filepath.Join(a, n))
		y, err2 := os.ReadFile(filepath.Join(b, n))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs: %d bytes (%v) vs %d bytes (%v)", n, len(x), err1, len(y), err2)
		}
	}
}

// TestRandomIntegrity: two processes run seeded random writes, truncates,
// reads and renames at random offsets across block boundaries through one
// mount, each against its own reference directory; the mount, the share
// and the references must agree byte for byte.
func TestRandomIntegrity(t *testing.T) {
	const opsPerProcess = 10000
	seed := uint64(20261122)
	if s := os.Getenv("PANDO_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set PANDO_SEED to reproduce)", seed)
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	for _, mode := range []string{"close", "through"} {
		t.Run(mode, func(t *testing.T) {
			a := mountAgent(t, d.admin, "--write", mode, "--block-size", "64KiB")
			mnt := filepath.Join(a.dir, "uva", "alpha", mode)
			os.Mkdir(mnt, 0o755)
			ref := t.TempDir()
			a.settle(t, mnt)
			ops := opsPerProcess
			if mode == "through" {
				ops /= 4 // the same code paths, fewer round trips; close mode carries the 20,000
			}
			child := exec.Command(os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s %s", envWorker, seed+1, ops, mnt, ref, "b"))
			var stderr bytes.Buffer
			child.Stderr = &stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			errA := integrityWorker(seed, ops, mnt, ref, "a")
			errB := child.Wait()
			if errA != nil {
				t.Errorf("process 1: %v", errA)
			}
			if errB != nil {
				t.Errorf("process 2: %v: %s", errB, stderr.String())
			}
			compareTrees(t, mnt, ref)
			compareTrees(t, filepath.Join(root, mode), ref)
			if t.Failed() {
				t.Logf("the agent said:\n%s", a.proc.output())
			}
		})
	}
}
