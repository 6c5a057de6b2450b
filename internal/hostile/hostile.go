// Package hostile puts in place the files a hostile model directory may
// hold, for the tests of every reader of outside files: a symlink to
// /dev/zero (endless), a FIFO (blocks a reader), a directory, and a file over
// a size limit. Each replaces whatever is at the path, and skips the test
// where the system cannot make it.
package hostile

import (
	"os"
	"syscall"
	"testing"
)

// DevZero makes path a symlink to /dev/zero.
func DevZero(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skipf("no /dev/zero: %v", err)
	}
	replace(t, path, func() error { return os.Symlink("/dev/zero", path) })
}

// FIFO makes path a named pipe no one writes to.
func FIFO(t testing.TB, path string) {
	t.Helper()
	replace(t, path, func() error { return syscall.Mkfifo(path, 0o644) })
}

// Dir makes path an empty directory.
func Dir(t testing.TB, path string) {
	t.Helper()
	replace(t, path, func() error { return os.Mkdir(path, 0o755) })
}

// Oversized makes path a file of size bytes, sparse so that it costs
// neither disk nor time (readers refuse it on its size alone).
func Oversized(t testing.TB, path string, size int64) {
	t.Helper()
	replace(t, path, func() error {
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			return err
		}
		return os.Truncate(path, size)
	})
}

func replace(t testing.TB, path string, create func() error) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := create(); err != nil {
		t.Skipf("cannot make %s: %v", path, err)
	}
}
