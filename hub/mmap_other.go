//go:build !linux

package hub

import "os"

// mapFile is Linux only; elsewhere parallel downloads write with WriteAt.
func mapFile(f *os.File, size int64) []byte { return nil }

// populate does nothing where mapFile maps nothing.
func populate(mem []byte) {}

// unmapFile does nothing where mapFile maps nothing.
func unmapFile(mem []byte) {}
