// Package atomicfile puts files and directories in place whole: each is
// written under a temporary name beside its destination and renamed into
// place only when complete, so a reader never sees half of one and a failed
// or killed writer leaves nothing that looks finished.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write creates path from what write produces. The file's mode is perm less
// the process's umask, as os.Create gives.
func Write(path string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := createTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-", perm)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// createTemp is os.CreateTemp with a mode: the kernel applies the umask to
// perm, which CreateTemp's fixed 0600 would hide.
func createTemp(dir, prefix string, perm os.FileMode) (*os.File, error) {
	for range 100 {
		f, err := os.OpenFile(filepath.Join(dir, prefix+randomSuffix()), os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no free temporary name in %s", dir)
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
