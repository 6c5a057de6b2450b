package atomicfile

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// errNotEmpty is what renaming onto a directory with contents gives.
var errNotEmpty = syscall.ENOTEMPTY

func renameNoReplace(from, to string) error {
	return osErr("rename", from, to, unix.RenamexNp(from, to, unix.RENAME_EXCL))
}

func exchange(a, b string) error {
	return osErr("exchange", a, b, unix.RenamexNp(a, b, unix.RENAME_SWAP))
}
