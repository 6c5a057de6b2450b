//go:build !linux && !darwin

package atomicfile

import (
	"errors"
	"io/fs"
	"os"
)

// renameNoReplace has no atomic form here: the check and the rename are two
// steps. A directory's rename onto one with contents fails anyway.
func renameNoReplace(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: fs.ErrExist}
	}
	return os.Rename(from, to)
}

// exchange has no atomic form here: the old directory is moved aside first,
// and back if the new one cannot take its place.
func exchange(a, b string) error {
	aside := a + ".old"
	if err := os.Rename(b, aside); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		return errors.Join(err, os.Rename(aside, b))
	}
	return os.Rename(aside, a)
}
