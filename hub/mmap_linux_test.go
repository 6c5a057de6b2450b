//go:build linux

package hub

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMapFile checks that the temp dir's file system takes the mapped
// path that parallel downloads use on Linux (else the fault tests would
// only cover the WriteAt fallback), and that bytes written through the
// mapping are the file's.
func TestMapFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "blob.incomplete"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 3<<20 + 5
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	mem := mapFile(f, size)
	if mem == nil {
		t.Skip("this file system cannot fallocate or map files: downloads use WriteAt here")
	}
	populate(mem[1<<20 : 2<<20])
	mem[0], mem[size-1] = 0xab, 0xcd
	unmapFile(mem)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != size || got[0] != 0xab || got[size-1] != 0xcd || got[1<<20] != 0 {
		t.Fatalf("file after the mapped writes: %d bytes, first %#x, last %#x", len(got), got[0], got[len(got)-1])
	}
}
