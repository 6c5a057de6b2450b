package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestDemo(t *testing.T) {
	embedded, err := demoFS.ReadFile("demo/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	weights := func(s Store) string { return filepath.Join(s.DemoDir(), "model.safetensors") }
	cases := []struct {
		name string
		// damage changes a first extraction before Demo runs again.
		damage  func(t *testing.T, s Store)
		wantErr string
	}{
		{name: "reused as it is", damage: func(*testing.T, Store) {}},
		{name: "a changed file is replaced", damage: func(t *testing.T, s Store) {
			write(t, weights(s), []byte("not the weights"))
		}},
		{name: "a missing file is restored", damage: func(t *testing.T, s Store) {
			if err := os.Remove(filepath.Join(s.DemoDir(), "config.json")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a foreign file is refused", damage: func(t *testing.T, s Store) {
			write(t, weights(s), []byte("changed"))
			write(t, filepath.Join(s.DemoDir(), "notes.txt"), []byte("mine"))
		}, wantErr: "holds notes.txt, which lowbit did not put there"},
		{name: "a file in its place is refused", damage: func(t *testing.T, s Store) {
			if err := os.RemoveAll(s.DemoDir()); err != nil {
				t.Fatal(err)
			}
			write(t, s.DemoDir(), []byte("mine"))
		}, wantErr: "is not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Store{Root: t.TempDir()}
			dir, err := s.Demo()
			if err != nil || dir != s.DemoDir() {
				t.Fatalf("first extraction: %q, %v", dir, err)
			}
			c.damage(t, s)
			before, _ := os.ReadFile(filepath.Join(s.DemoDir(), "notes.txt"))
			dir, err = s.Demo()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Demo = %v, want an error saying %q", err, c.wantErr)
				}
				if after, _ := os.ReadFile(filepath.Join(s.DemoDir(), "notes.txt")); !bytes.Equal(before, after) {
					t.Error("the refused directory was changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := checkDemo(dir, mustSums(t)); err != nil {
				t.Errorf("after Demo: %v", err)
			}
			if got, _ := os.ReadFile(weights(s)); !bytes.Equal(got, embedded) {
				t.Error("the weights are not the embedded ones")
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "LICENSE")); !bytes.Contains(got, []byte("MIT License")) {
				t.Error("the license does not travel with the model")
			}
		})
	}
}

// TestDemoConcurrent extracts from several goroutines at once: every one
// gets the whole demo, and no temporary directory is left beside it.
func TestDemoConcurrent(t *testing.T) {
	s := Store{Root: t.TempDir()}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Demo() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("extraction %d: %v", i, err)
		}
	}
	if err := checkDemo(s.DemoDir(), mustSums(t)); err != nil {
		t.Error(err)
	}
	ents, err := os.ReadDir(s.SourcesDir())
	if err != nil || len(ents) != 1 {
		t.Errorf("sources holds %v (%v), want only demo", ents, err)
	}
}

func mustSums(t *testing.T) map[string]string {
	t.Helper()
	sums, err := demoSums()
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
