package store

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"lowbit/internal/atomicfile"
)

// DemoAlias names the model built into lowbit: stories260K in HuggingFace's
// layout (store/demo/README.md says where it comes from), so that convert,
// run and validate work on a machine with no network.
const DemoAlias = "demo"

// demoFS holds the demo's files; its README stays in the source tree.
//
//go:embed demo/LICENSE demo/config.json demo/generation_config.json demo/model.safetensors demo/tokenizer.model demo/tokenizer_config.json
var demoFS embed.FS

// DemoDir is where Demo extracts the demo.
func (s Store) DemoDir() string { return filepath.Join(s.SourcesDir(), DemoAlias) }

// errDiffers marks a demo directory whose files are not the embedded ones.
var errDiffers = errors.New("differs from the demo built into lowbit")

// Demo returns the directory of the demo model, an ordinary HuggingFace model
// directory, extracting it first when it is not there. An existing copy is
// used when its files' checksums are the embedded files'; one that differs
// is replaced whole, but only when it holds nothing but the demo's file
// names, never anything lowbit did not put there. Extraction goes to a
// temporary directory renamed into place, so a reader sees the whole demo or
// none, and concurrent extractions agree.
func (s Store) Demo() (string, error) {
	if s.Root == "" {
		return "", errNoRoot
	}
	dir := s.DemoDir()
	want, err := demoSums()
	if err != nil {
		return "", err
	}
	err = checkDemo(dir, want)
	if err == nil {
		return dir, nil
	}
	exists := errors.Is(err, errDiffers)
	if !exists && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	tmp, err := atomicfile.CreateDir(dir)
	if err != nil {
		return "", fmt.Errorf("extract the demo: %w", err)
	}
	defer tmp.Discard() // a no-op once in place
	if err := writeDemo(tmp.Path); err != nil {
		return "", err
	}
	if exists {
		err = tmp.Replace(func(old string) error { return onlyDemoNames(old, want) })
	} else {
		err = tmp.Commit()
	}
	if errors.Is(err, atomicfile.ErrExist) {
		// Another lowbit extracted it meanwhile: use that copy if it is whole.
		err = checkDemo(dir, want)
	}
	if err != nil {
		return "", fmt.Errorf("extract the demo: %w", err)
	}
	return dir, nil
}

// demoNames lists the embedded files' names.
func demoNames() ([]string, error) {
	ents, err := demoFS.ReadDir("demo")
	if err != nil {
		return nil, fmt.Errorf("embedded demo: %w", err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// demoSums maps each embedded file's name to its sha256.
func demoSums() (map[string]string, error) {
	names, err := demoNames()
	if err != nil {
		return nil, err
	}
	sums := make(map[string]string, len(names))
	for _, name := range names {
		f, err := demoFS.Open(path.Join("demo", name))
		if err != nil {
			return nil, fmt.Errorf("embedded demo: %w", err)
		}
		sums[name], err = sha256Hex(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("embedded demo: %s: %w", name, err)
		}
	}
	return sums, nil
}

func sha256Hex(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeDemo writes the embedded files into dir.
func writeDemo(dir string) error {
	names, err := demoNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		b, err := demoFS.ReadFile(path.Join("demo", name))
		if err != nil {
			return fmt.Errorf("embedded demo: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("extract the demo: %w", err)
		}
	}
	return nil
}

// checkDemo says whether dir holds exactly the demo's files with their
// checksums: nil, an error wrapping fs.ErrNotExist when dir is absent, one
// wrapping errDiffers when it holds something else.
func checkDemo(dir string, want map[string]string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("demo: %w: remove it and lowbit extracts the demo there", notDir(dir, st.Mode()))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	seen := 0
	for _, e := range ents {
		if atomicfile.IsInternal(e.Name()) {
			continue
		}
		sum, ok := want[e.Name()]
		if !ok || !e.Type().IsRegular() {
			return fmt.Errorf("%s: %s %w", dir, e.Name(), errDiffers)
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		got, err := sha256Hex(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("demo: %s: %w", f.Name(), err)
		}
		if got != sum {
			return fmt.Errorf("%s: %s (sha256 %s) %w (%s)", dir, e.Name(), got, errDiffers, sum)
		}
		seen++
	}
	if seen != len(want) {
		return fmt.Errorf("%s lacks files and %w", dir, errDiffers)
	}
	return nil
}

// onlyDemoNames accepts a directory to be replaced only when all it holds
// is files named as the demo's: a damaged demo, not something of the user's.
func onlyDemoNames(dir string, want map[string]string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var foreign []string
	for _, e := range ents {
		if _, ok := want[e.Name()]; (!ok || !e.Type().IsRegular()) && !atomicfile.IsInternal(e.Name()) {
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) > 0 {
		slices.Sort(foreign)
		return fmt.Errorf("%s holds %s, which lowbit did not put there: it is left as it is (remove the directory and lowbit extracts the demo again)", dir, strings.Join(foreign, ", "))
	}
	return nil
}
