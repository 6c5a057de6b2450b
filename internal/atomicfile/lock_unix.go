//go:build unix

package atomicfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// lock takes f's exclusive lock without waiting; the kernel drops it when
// the holder dies, however it dies.
func lock(f *os.File) bool {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// abandoned reports whether no live process holds f's lock (and takes it).
func abandoned(f *os.File) bool { return lock(f) }
