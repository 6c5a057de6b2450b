package atomicfile

import "golang.org/x/sys/unix"

// renameNoReplace and exchange are renamex_np with RENAME_EXCL and
// RENAME_SWAP: each one atomic step.
func renameNoReplace(from, to string) error {
	return osErr("rename", from, to, unix.RenamexNp(from, to, unix.RENAME_EXCL))
}

func exchange(a, b string) error {
	return osErr("exchange", a, b, unix.RenamexNp(a, b, unix.RENAME_SWAP))
}
