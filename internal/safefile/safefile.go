// Package safefile reads files that come from outside (a model directory, a
// text given on the command line) so that a hostile one ends in an error
// naming it: only regular files are opened, never a device, FIFO, socket or
// directory (a symlink to a regular file is fine: HuggingFace's cache is made
// of them), and a read stops at a limit the caller sets for that kind of file.
package safefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file over the caller's limit.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading if, after following symlinks, it is a regular
// file, and returns it with its FileInfo (from the open descriptor, so the
// file checked is the file read). The path is looked at before it is opened,
// so that no device is ever opened, and the open does not block, so that a
// FIFO swapped in between cannot hang it.
func Open(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRegular(path, st); err != nil {
		return nil, nil, err
	}
	// O_NONBLOCK makes opening a FIFO return at once; regular files ignore it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := checkRegular(path, st); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ReadFile reads the whole of path, a regular file of at most limit bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, tooLarge(path, st.Size(), limit)
	}
	buf := bytes.NewBuffer(make([]byte, 0, st.Size()+1))
	// One byte past the limit tells a file that grew while read from one that fits.
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, tooLarge(path, int64(buf.Len()), limit)
	}
	return buf.Bytes(), nil
}

func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s: %w: %d bytes is over the %s limit", path, ErrTooLarge, size, formatSize(limit))
}

// formatSize writes a byte count in the largest binary unit that divides it,
// as limits are written in code (16 MiB rather than 16777216 bytes).
func formatSize(n int64) string {
	for _, u := range []struct {
		name  string
		bytes int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

func checkRegular(path string, st fs.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(st.Mode()))
}

// kind names a file type for people.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "irregular file"
}
