//go:build unix

package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestModesFollowUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	dest := filepath.Join(t.TempDir(), "model")
	d, err := CreateDir(dest)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(d.Path, "m.json"), 0o666, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dest: 0o750, filepath.Join(dest, "m.json"): 0o640} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
}
