package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// writeDir creates a Dir for dest holding one file with the given text.
func writeDir(t *testing.T, dest, text string) *Dir {
	t.Helper()
	d, err := CreateDir(dest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Path, "f"), []byte(text), 0o666); err != nil {
		t.Fatal(err)
	}
	return d
}

func readF(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// entries lists a directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestDirCommit(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "missing", "parent") // created as needed
	dest := filepath.Join(parent, "model")
	d := writeDir(t, dest, "new")
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Discard() // a no-op after Commit
	if got := readF(t, dest); got != "new" {
		t.Errorf("dest holds %q", got)
	}
	if names := entries(t, dest); len(names) != 1 {
		t.Errorf("dest holds %v, want only f (no marker)", names)
	}
	if names := entries(t, parent); len(names) != 1 {
		t.Errorf("parent holds %v, want only the model", names)
	}
}

func TestDirCommitNeverReplaces(t *testing.T) {
	for _, appeared := range []string{"empty dir", "dir", "file"} {
		t.Run(appeared, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "model")
			d := writeDir(t, dest, "new")
			switch appeared { // something appears at dest while d is written
			case "empty dir":
				os.Mkdir(dest, 0o777)
			case "dir":
				os.Mkdir(dest, 0o777)
				os.WriteFile(filepath.Join(dest, "f"), []byte("theirs"), 0o666)
			case "file":
				os.WriteFile(dest, []byte("theirs"), 0o666)
			}
			err := d.Commit()
			if !errors.Is(err, ErrExist) {
				t.Fatalf("Commit onto a %s: %v, want ErrExist", appeared, err)
			}
			d.Discard()
			if _, err := os.Stat(d.Path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Discard left %s", d.Path)
			}
			if appeared == "dir" && readF(t, dest) != "theirs" {
				t.Errorf("their directory changed")
			}
		})
	}
}

func TestDirReplace(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "model")
	old := writeDir(t, dest, "old")
	if err := old.Commit(); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("not ours")
	d := writeDir(t, dest, "new")
	if err := d.Replace(func(string) error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("a refused Replace: %v", err)
	}
	if readF(t, dest) != "old" || len(entries(t, dest)) != 1 {
		t.Fatalf("a refused Replace changed the destination: %v", entries(t, dest))
	}
	if err := d.Replace(func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := readF(t, dest); got != "new" {
		t.Errorf("dest holds %q", got)
	}
	if names := entries(t, filepath.Dir(dest)); len(names) != 1 {
		t.Errorf("parent holds %v: the old directory was not removed", names)
	}
	if names := entries(t, dest); len(names) != 1 {
		t.Errorf("dest holds %v, want only f", names)
	}
	// Replace with nothing there is a Commit.
	dest2 := filepath.Join(filepath.Dir(dest), "other")
	if err := writeDir(t, dest2, "x").Replace(func(string) error { return refuse }); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveStale(t *testing.T) {
	parent := t.TempDir()
	live := writeDir(t, filepath.Join(parent, "a"), "live")
	defer live.Discard()
	// A dead writer's directory: its marker is there, nobody holds its lock.
	dead := filepath.Join(parent, ".b"+partialInfix+"dead")
	os.Mkdir(dead, 0o777)
	os.WriteFile(filepath.Join(dead, marker), nil, 0o666)
	// Directories that merely look alike, without a marker, are not ours.
	lookalike := filepath.Join(parent, ".c"+partialInfix+"user")
	os.Mkdir(lookalike, 0o777)
	// A marker that is a link is not ours either.
	linked := filepath.Join(parent, ".d"+partialInfix+"link")
	os.Mkdir(linked, 0o777)
	os.Symlink(filepath.Join(dead, marker), filepath.Join(linked, marker))

	RemoveStale(parent)
	want := map[string]bool{filepath.Base(live.Path): true, filepath.Base(lookalike): true, filepath.Base(linked): true}
	got := entries(t, parent)
	if len(got) != len(want) {
		t.Fatalf("after RemoveStale: %v", got)
	}
	for _, n := range got {
		if !want[n] {
			t.Errorf("%s should have been removed", n)
		}
	}
	if readF(t, live.Path) != "live" {
		t.Error("the live writer's file is gone")
	}
}

// TestCreateDirConcurrent has many writers create directories in one parent
// at once: each one's RemoveStale must never take another's live directory,
// however the creations interleave.
func TestCreateDirConcurrent(t *testing.T) {
	parent := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			for j := range 20 {
				d, err := CreateDir(filepath.Join(parent, fmt.Sprintf("d%d-%d", i, j)))
				if err == nil {
					err = os.WriteFile(filepath.Join(d.Path, "f"), []byte("x"), 0o666)
				}
				if err == nil {
					err = d.Commit()
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if got := entries(t, parent); len(got) != 16*20 {
		t.Errorf("%d entries, want %d", len(got), 16*20)
	}
}

func TestRemove(t *testing.T) {
	parent := t.TempDir()
	dest := filepath.Join(parent, "model")
	if err := writeDir(t, dest, "old").Commit(); err != nil {
		t.Fatal(err)
	}
	// A remover that died midway: its directory holds the model and a
	// marker nobody holds.
	dead := filepath.Join(parent, ".other"+partialInfix+"dead")
	os.MkdirAll(filepath.Join(dead, "other"), 0o777)
	os.WriteFile(filepath.Join(dead, marker), nil, 0o666)
	if err := Remove(dest); err != nil {
		t.Fatal(err)
	}
	if names := entries(t, parent); len(names) != 0 {
		t.Errorf("after Remove the parent holds %v", names)
	}
	if err := Remove(dest); err == nil {
		t.Error("removing what is not there succeeded")
	}
}
