package share

import (
	"os"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// readSummed is f.ReadAt(p, off) that also returns the CRC32C of the bytes
// read, summed piece by piece as they are read, while they are in cache.
func readSummed(f *os.File, p []byte, off int64) (int, uint32, error) {
	var sum uint32
	n := 0
	for n < len(p) {
		k, err := f.ReadAt(p[n:min(n+wire.CRCChunk, len(p))], off+int64(n))
		sum = wire.UpdateCRC(sum, p[n:n+k])
		n += k
		if err != nil {
			return n, sum, err
		}
	}
	return n, sum, nil
}

// sendFileMin is the smallest read a clear data channel serves with
// sendfile; a smaller one is cheaper copied.
const sendFileMin = 64 << 10

// sumRange returns the CRC32C of the (at most n) bytes of f at off and how
// many there are, reading them piece by piece through one small buffer
// that stays in cache: for a reply sent straight from the file (sendfile),
// whose frame carries the sum ahead of the data. The read also brings the
// bytes into the page cache, from which they are then sent.
func sumRange(f *os.File, off int64, n int) (int, uint32, error) {
	buf, release := rpc.DataBuf(min(n, wire.CRCChunk))
	defer release()
	var sum uint32
	done := 0
	for done < n {
		k, err := f.ReadAt(buf[:min(len(buf), n-done)], off+int64(done))
		sum = wire.UpdateCRC(sum, buf[:k])
		done += k
		if err != nil {
			return done, sum, err
		}
	}
	return done, sum, nil
}
