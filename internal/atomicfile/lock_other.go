//go:build !unix

package atomicfile

import "os"

// lock has nothing to take here; the marker alone marks the directory.
func lock(f *os.File) bool { return true }

// abandoned cannot tell a live writer from a dead one here, so leftovers are
// kept rather than risk a live writer's work.
func abandoned(f *os.File) bool { return false }
