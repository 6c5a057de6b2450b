// Package store is where lowbit keeps models on this machine, so that a
// model is named once and found by that name: converted models in
// $LOWBIT_HOME/models/<name>, the sources lowbit makes itself (the embedded
// demo) in $LOWBIT_HOME/sources, and a view of the HuggingFace cache it
// shares with huggingface_hub. It lists and removes only what it recognises.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"lowbit/internal/atomicfile"
	"lowbit/manifest"
)

// EnvHome names the variable that moves the store (default: lowbit in the
// user's cache directory, as os.UserCacheDir finds it).
const EnvHome = "LOWBIT_HOME"

// Store is one store's root directory. The zero Store has no root: its
// methods say how to give it one.
type Store struct {
	Root string
}

// errNoRoot is what a Store without a root answers.
var errNoRoot = errors.New("no model store: set " + EnvHome + " (the user cache directory is unknown: $XDG_CACHE_HOME and $HOME are unset)")

// FromEnv is the store $LOWBIT_HOME names, else lowbit in the user's cache
// directory (~/.cache/lowbit on Linux). The root is made absolute, so that
// paths recorded in manifests stay valid from any working directory.
func FromEnv() (Store, error) {
	root := os.Getenv(EnvHome)
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return Store{}, errNoRoot
		}
		root = filepath.Join(cache, "lowbit")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return Store{}, fmt.Errorf("%s=%s: %w", EnvHome, root, err)
	}
	return Store{Root: abs}, nil
}

// ModelsDir holds the converted models, one directory per name.
func (s Store) ModelsDir() string { return filepath.Join(s.Root, "models") }

// SourcesDir holds the source models lowbit makes itself (the demo).
func (s Store) SourcesDir() string { return filepath.Join(s.Root, "sources") }

// maxNameLen bounds a model name: one path element on every common filesystem.
const maxNameLen = 255

// CheckName accepts a model name that is one plain path element: not empty,
// no separator, not starting with a dot (the store's own temporary names do),
// no control characters. Anything else could reach outside the models
// directory or hide in it.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("a model name is empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("model name %.20q... is over %d bytes", name, maxNameLen)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("model name %q starts with a dot", name)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("model name %q holds a path separator", name)
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("model name %q holds a control character", name)
	}
	return nil
}

// ModelPath is where the model called name lives (whether or not it exists).
func (s Store) ModelPath(name string) (string, error) {
	if s.Root == "" {
		return "", errNoRoot
	}
	if err := CheckName(name); err != nil {
		return "", err
	}
	return filepath.Join(s.ModelsDir(), name), nil
}

// Find is the directory of the model called name when the store has one by
// that name; ok is false when it has none or name cannot be a model name.
func (s Store) Find(name string) (dir string, ok bool, err error) {
	if s.Root == "" || CheckName(name) != nil {
		return "", false, nil
	}
	dir = filepath.Join(s.ModelsDir(), name)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("model store: %w", err)
	case !st.IsDir():
		return "", false, fmt.Errorf("model store: %s is not a directory", dir)
	}
	return dir, true, nil
}

// Model is one entry of the models directory.
type Model struct {
	Name string
	Dir  string
	// Size is the bytes of its files on disk.
	Size int64
	// Manifest is nil when Problem says why the entry is not a lowbit model.
	Manifest *manifest.Manifest
	Problem  string
}

// Models lists the models directory by name. An entry that is not a lowbit
// model directory is listed with its Problem, never skipped silently; the
// store's own temporary entries (names starting with a dot) are left out.
func (s Store) Models() ([]Model, error) {
	if s.Root == "" {
		return nil, errNoRoot
	}
	ents, err := os.ReadDir(s.ModelsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model store: %w", err)
	}
	var models []Model
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m := Model{Name: e.Name(), Dir: filepath.Join(s.ModelsDir(), e.Name())}
		m.Manifest, err = manifest.ReadModelDir(m.Dir)
		if err != nil {
			m.Problem = err.Error()
		}
		if m.Size, err = DirSize(m.Dir); err != nil && m.Problem == "" {
			m.Problem = err.Error()
		}
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	return models, nil
}

// notDir says that path is not a directory, and what it is when that is
// not plain from a listing.
func notDir(path string, mode fs.FileMode) error {
	if mode&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is not a directory but a symbolic link", path)
	}
	return fmt.Errorf("%s is not a directory", path)
}

// Remove deletes the model called name, and only a lowbit model directory:
// anything else in the models directory is refused and left as it is. It
// returns the bytes freed.
func (s Store) Remove(name string) (int64, error) {
	dir, err := s.ModelPath(name)
	if err != nil {
		return 0, err
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%s: no model by that name in %s (lowbit list shows them)", name, s.ModelsDir())
	}
	if _, err := manifest.ReadModelDir(dir); err != nil {
		return 0, fmt.Errorf("%s is left as it is: %w", dir, err)
	}
	size, err := DirSize(dir)
	if err != nil {
		return 0, err
	}
	return size, atomicfile.Remove(dir)
}

// DirSize is the bytes of the regular files under dir (links not followed).
func DirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dir, err)
	}
	return n, nil
}
