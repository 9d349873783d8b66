// Package pattern writes test and benchmark files of data that does not
// repeat, so that nothing on the way (compression, deduplication, a
// zero-page shortcut) can make a transfer look faster than it is.
package pattern

import "os"

// WriteFile creates path with size bytes of the pattern.
func WriteFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>9)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		buf[0], buf[1] = byte(off>>20), byte(off>>28)
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
