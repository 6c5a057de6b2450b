package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// errNotEmpty is what renaming onto a directory with contents gives.
var errNotEmpty = syscall.ENOTEMPTY

// ErrExist is returned by Commit when the destination appeared while the
// directory was being written: it is left as it was.
var ErrExist = errors.New("already exists")

// partialInfix marks the temporary directories this package creates; marker
// is the file inside each that its writer holds locked while it lives.
const (
	partialInfix = ".partial-"
	marker       = ".lowbit-partial"
)

// Dir is a directory being written under a temporary name beside its
// destination. Its writer holds a lock on a marker file inside it, so that
// the next writer into the same parent can tell a dead writer's leftovers
// (removed) from a live one's (kept).
type Dir struct {
	// Path is where to write the directory's contents.
	Path string
	dest string
	lock *os.File
}

// CreateDir makes an empty temporary directory for dest in dest's parent,
// creating the parent if needed, and first removes the temporary
// directories that dead writers left in that parent. Modes follow the umask.
func CreateDir(dest string) (*Dir, error) {
	dest = filepath.Clean(dest)
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o777); err != nil {
		return nil, fmt.Errorf("create %s: %w", parent, err)
	}
	RemoveStale(parent)
	for range 100 {
		p := filepath.Join(parent, "."+filepath.Base(dest)+partialInfix+randomSuffix())
		err := os.Mkdir(p, 0o777)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
		lock, err := lockMarker(filepath.Join(p, marker))
		if err != nil {
			os.RemoveAll(p)
			return nil, err
		}
		return &Dir{Path: p, dest: dest, lock: lock}, nil
	}
	return nil, fmt.Errorf("no free temporary name in %s", parent)
}

// lockMarker creates the marker file already locked: under another name
// first, renamed to path once locked, so that another writer's RemoveStale
// never finds it unlocked and takes this live directory for a dead one.
func lockMarker(path string) (*os.File, error) {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	if !lock(f) {
		f.Close()
		return nil, fmt.Errorf("lock %s: held by another process", tmp)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return f, nil
}

// IsInternal reports whether name (a base name) is this package's own
// bookkeeping inside a directory, which a listing of its contents skips.
func IsInternal(name string) bool { return name == marker }

// Commit moves the finished directory to its destination. It never replaces
// anything: when the destination exists (it appeared meanwhile, or another
// writer finished first) it returns an error wrapping ErrExist and the
// directory stays where it is for the caller to Discard.
func (d *Dir) Commit() error {
	if err := renameNoReplace(d.Path, d.dest); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, errNotEmpty) {
			return fmt.Errorf("%s: %w", d.dest, ErrExist)
		}
		return fmt.Errorf("move %s into place: %w", d.dest, err)
	}
	d.finish(d.dest)
	return nil
}

// Replace puts the finished directory in place of the existing destination in
// one step, so that at every instant the destination holds either the whole
// old directory or the whole new one, then removes the old one. check is
// called on the destination just before, and can refuse it. A destination
// that is not there is Committed instead.
func (d *Dir) Replace(check func(dest string) error) error {
	if _, err := os.Lstat(d.dest); errors.Is(err, fs.ErrNotExist) {
		return d.Commit()
	}
	if err := check(d.dest); err != nil {
		return err
	}
	// The old directory gets a marker of its own before the exchange: should
	// this writer die before removing it, it is a dead writer's leftover.
	oldMarker := filepath.Join(d.dest, marker)
	if err := os.WriteFile(oldMarker, nil, 0o666); err != nil {
		return fmt.Errorf("replace %s: %w", d.dest, err)
	}
	if err := exchange(d.Path, d.dest); err != nil {
		os.Remove(oldMarker)
		return fmt.Errorf("replace %s: %w", d.dest, err)
	}
	old := d.Path
	d.finish(d.dest)
	return os.RemoveAll(old)
}

// finish drops the marker from the directory, now at where, and its lock.
func (d *Dir) finish(where string) {
	os.Remove(filepath.Join(where, marker))
	d.lock.Close()
	d.lock = nil
	d.Path = where
}

// Discard removes the temporary directory and everything in it; after a
// Commit or Replace it does nothing.
func (d *Dir) Discard() {
	if d.lock == nil {
		return
	}
	os.RemoveAll(d.Path)
	d.lock.Close()
	d.lock = nil
}

// Remove deletes dir whole. It is first moved into a temporary directory
// beside it, so that no reader finds half of it under its name, and a
// remover that dies midway leaves a dead writer's leftover for the next
// RemoveStale.
func Remove(dir string) error {
	dir = filepath.Clean(dir)
	d, err := CreateDir(dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := os.Rename(dir, filepath.Join(d.Path, filepath.Base(dir))); err != nil {
		d.Discard()
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	err = os.RemoveAll(d.Path)
	d.lock.Close()
	d.lock = nil
	if err != nil {
		return fmt.Errorf("remove %s (now in %s): %w", dir, d.Path, err)
	}
	return nil
}

// RemoveStale removes from parent the temporary directories of writers that
// died (their marker's lock is free). A live writer's directory, and anything
// without a marker, is never touched. Failures are ignored: stale leftovers
// cost disk space, not correctness.
func RemoveStale(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ".") || !strings.Contains(e.Name(), partialInfix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		m := filepath.Join(p, marker)
		if st, err := os.Lstat(m); err != nil || !st.Mode().IsRegular() {
			continue
		}
		f, err := os.OpenFile(m, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if abandoned(f) {
			os.RemoveAll(p)
		}
		f.Close()
	}
}

// osErr wraps a rename's errno as os.Rename does.
func osErr(op, a, b string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: a, New: b, Err: err}
}
