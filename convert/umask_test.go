//go:build unix

package convert

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"lowbit/internal/fixture"
)

// TestConvertCreatesParentsWithTheUmask: a missing parent of --out is
// created, and modes follow the umask, never a private 0700.
func TestConvertCreatesParentsWithTheUmask(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	src := writeSource(t, fixture.Llama(), nil)
	out := filepath.Join(t.TempDir(), "a", "b", "out")
	if _, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "8", NoValidate: true}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{out: 0o755, filepath.Dir(out): 0o755, filepath.Join(out, "manifest.json"): 0o644, filepath.Join(out, "model.safetensors"): 0o644} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
}
