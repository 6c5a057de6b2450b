package atomicfile

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// errNotEmpty is what renaming onto a directory with contents gives.
var errNotEmpty = syscall.ENOTEMPTY

func renameNoReplace(from, to string) error {
	return osErr("rename", from, to, unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE))
}

func exchange(a, b string) error {
	return osErr("exchange", a, b, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE))
}
