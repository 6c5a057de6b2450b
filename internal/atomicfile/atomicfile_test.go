package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.txt")
	if err := Write(path, 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "whole"); return err }); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	st, _ := os.Stat(path)
	if err != nil || string(b) != "whole" || !st.Mode().IsRegular() {
		t.Fatalf("%q %v %v", b, err, st.Mode()) // modes: umask_test.go
	}
	// A failed write keeps the old file and leaves no temporary behind.
	boom := errors.New("boom")
	if err := Write(path, 0o644, func(w io.Writer) error { io.WriteString(w, "ha"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if b, _ := os.ReadFile(path); string(b) != "whole" || len(entries) != 1 {
		t.Errorf("after a failed write: %q, %d entries", b, len(entries))
	}
}
