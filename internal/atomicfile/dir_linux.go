package atomicfile

import "golang.org/x/sys/unix"

// renameNoReplace and exchange are renameat2 with RENAME_NOREPLACE and
// RENAME_EXCHANGE: each one atomic step.
func renameNoReplace(from, to string) error {
	return osErr("rename", from, to, unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE))
}

func exchange(a, b string) error {
	return osErr("exchange", a, b, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE))
}
