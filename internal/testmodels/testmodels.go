// Package testmodels finds the real model data in ../shared/models (beside the
// checkout) for tests, and skips a test with a clear message where it is absent.
package testmodels

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of shared/models, looked for in every parent
// of the working directory, or skips t when no such folder exists.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Skipf("shared models: %v", err)
	}
	for {
		p := filepath.Join(dir, "shared", "models")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("skipping: ../shared/models (real model data beside the checkout) is not present")
		}
		dir = parent
	}
}

// Path returns the path of a file under shared/models, skipping t when it is absent.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: %s is not present", p)
	}
	return p
}

// GGUF returns the path of a file in shared/gguf (GGUF files made by
// llama.cpp's own tools, beside shared/models), skipping t where it is
// absent.
func GGUF(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(Dir(t)), "gguf", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: %s (GGUF made by llama.cpp beside the checkout) is not present", p)
	}
	return p
}
