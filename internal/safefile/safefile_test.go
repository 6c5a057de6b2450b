package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "config.json")
	if err := os.WriteFile(regular, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(path string) error
		limit int64
		want  string // error substring, "" for success
		is    error
	}{
		{"regular", func(p string) error { return os.WriteFile(p, []byte(`{"a":1}`), 0o644) }, 16, "", nil},
		{"at the limit", func(p string) error { return os.WriteFile(p, []byte(`{"a":1}`), 0o644) }, 7, "", nil},
		{"symlink to a regular file", func(p string) error { return os.Symlink(regular, p) }, 16, "", nil},
		{"over the limit", func(p string) error { return os.WriteFile(p, make([]byte, 2048), 0o644) }, 1 << 10, "2048 bytes is over the 1 KiB limit", ErrTooLarge},
		{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, 1 << 20, "not a regular file (character device)", ErrNotRegular},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, 1 << 20, "not a regular file (named pipe)", ErrNotRegular},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, 1 << 20, "not a regular file (directory)", ErrNotRegular},
		{"missing", func(p string) error { return nil }, 1 << 20, "no such file", os.ErrNotExist},
		{"dangling symlink", func(p string) error { return os.Symlink(filepath.Join(dir, "nowhere"), p) }, 1 << 20, "no such file", os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "symlink to /dev/zero" {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip("no /dev/zero")
				}
			}
			path := filepath.Join(t.TempDir(), "model.file")
			if err := tc.setup(path); err != nil {
				t.Skipf("cannot make the file: %v", err)
			}
			b, err := ReadFile(path, tc.limit)
			if tc.want == "" {
				if err != nil || string(b) != `{"a":1}` {
					t.Fatalf("ReadFile = %q, %v", b, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want one naming %s, saying %q and wrapping %v", err, path, tc.want, tc.is)
			}
		})
	}
}

func TestOpenRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	f, _, err := Open(path)
	if err == nil {
		f.Close()
		t.Fatal("a FIFO was opened")
	}
	if want := path + ": not a regular file (named pipe)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{16 << 20, "16 MiB"}, {3 << 30, "3 GiB"}, {1 << 10, "1 KiB"},
		{100_000_000, "100000000 bytes"}, {1536, "1536 bytes"}, {7, "7 bytes"},
	}
	for _, tc := range tests {
		if got := formatSize(tc.n); got != tc.want {
			t.Errorf("formatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
