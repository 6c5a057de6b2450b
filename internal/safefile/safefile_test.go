package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/hostile"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "config.json")
	if err := os.WriteFile(regular, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(t testing.TB, p string) {
		if err := os.WriteFile(p, []byte(`{"a":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(to string) func(testing.TB, string) {
		return func(t testing.TB, p string) {
			if err := os.Symlink(to, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		setup func(t testing.TB, path string)
		limit int64
		want  string // error substring, "" for success
		is    error
	}{
		{"regular", write, 16, "", nil},
		{"at the limit", write, 7, "", nil},
		{"symlink to a regular file", symlink(regular), 16, "", nil},
		{"over the limit", func(t testing.TB, p string) { hostile.Oversized(t, p, 2048) }, 1 << 10, "2048 bytes is over the 1 KiB limit", ErrTooLarge},
		{"symlink to /dev/zero", hostile.DevZero, 1 << 20, "not a regular file (character device)", ErrNotRegular},
		{"fifo", hostile.FIFO, 1 << 20, "not a regular file (named pipe)", ErrNotRegular},
		{"directory", hostile.Dir, 1 << 20, "not a regular file (directory)", ErrNotRegular},
		{"missing", func(testing.TB, string) {}, 1 << 20, "no such file", os.ErrNotExist},
		{"dangling symlink", symlink(filepath.Join(dir, "nowhere")), 1 << 20, "no such file", os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "model.file")
			tc.setup(t, path)
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
	hostile.FIFO(t, path)
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
