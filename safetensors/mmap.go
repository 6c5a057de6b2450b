package safetensors

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the file read-only; where mapping is not possible (an empty
// file, a file system without mmap) it reads the size it was given instead,
// so a file that grows meanwhile cannot make it read without bound.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size > 0 && int64(int(size)) == size {
		if b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			return b, func() error { return unix.Munmap(b) }, nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, size))
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
