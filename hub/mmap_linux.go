//go:build linux

package hub

import (
	"os"
	"syscall"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault the pages of
// a range in writable, in one call instead of one fault per page.
const madvPopulateWrite = 23

// mapFile maps the first size bytes of f (already that long) shared and
// writable, so that a parallel download reads the network straight into
// the page cache and the hash reads it from there: no pwrite copy and no
// pread copy per byte. The blocks are reserved first (fallocate), so that a
// full disk fails here with an error instead of at writeback; where the
// file system cannot reserve them, or the mapping fails, it returns nil and
// the caller writes with WriteAt. Only the holder of the blob's lock maps
// the file, and nobody truncates it while the mapping lives.
func mapFile(f *os.File, size int64) []byte {
	if size <= 0 || int64(int(size)) != size {
		return nil
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return nil
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return mem
}

// populate faults mem in writable ahead of the bytes arriving; failure
// (an older kernel) only costs the per-page faults.
func populate(mem []byte) {
	if len(mem) > 0 {
		_ = syscall.Madvise(mem, madvPopulateWrite)
	}
}

// unmapFile releases a mapping from mapFile.
func unmapFile(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
