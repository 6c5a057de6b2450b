package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"lowbit/internal/atomicfile"
)

// CachedRepo is one model repo in the HuggingFace cache, as huggingface_hub's
// scan-cache reports it.
type CachedRepo struct {
	RepoID string `json:"repo_id"`
	Path   string `json:"path"`
	// Size is the bytes of its blobs on disk (a blob shared by revisions counts once).
	Size      int64            `json:"size"`
	Revisions []CachedRevision `json:"revisions"`
}

// CachedRevision is one snapshot of a cached repo.
type CachedRevision struct {
	Commit string `json:"commit"`
	// Refs are the branches and tags (refs/) pointing at the commit.
	Refs  []string `json:"refs,omitempty"`
	Files int      `json:"files"`
	// Size is the bytes of the snapshot's files.
	Size int64 `json:"size"`
}

// repoPrefix begins huggingface_hub's folder of a model repo: models--org--name.
const repoPrefix = "models--"

// RepoFolder is huggingface_hub's folder name for a model repo id ("org/name"
// or "name"), or an error when id cannot name one.
func RepoFolder(id string) (string, error) {
	parts := strings.Split(id, "/")
	if len(parts) > 2 {
		return "", fmt.Errorf("%q is not a repo id (want org/name)", id)
	}
	for _, p := range parts {
		if err := checkRepoPart(p); err != nil {
			return "", fmt.Errorf("%q is not a repo id: %w", id, err)
		}
	}
	return repoPrefix + strings.Join(parts, "--"), nil
}

// RepoFromFolder is the repo id a cache folder's name stands for; ok is
// false for anything but a model repo's folder.
func RepoFromFolder(folder string) (id string, ok bool) {
	rest, found := strings.CutPrefix(folder, repoPrefix)
	if !found {
		return "", false
	}
	parts := strings.Split(rest, "--")
	if len(parts) > 2 {
		return "", false
	}
	for _, p := range parts {
		if checkRepoPart(p) != nil {
			return "", false
		}
	}
	return strings.Join(parts, "/"), true
}

// checkRepoPart accepts an org or name as the Hub does: letters, digits, '-',
// '_' and '.', not empty, not a dot path, not starting or ending with '-'
// or '.', no "--" (the cache's separator).
func checkRepoPart(p string) error {
	switch {
	case p == "" || p == "." || p == "..":
		return fmt.Errorf("%q is not an org or name", p)
	case strings.Contains(p, "--") || strings.Contains(p, ".."):
		return fmt.Errorf("%q holds -- or ..", p)
	case strings.HasPrefix(p, "-") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, "-") || strings.HasSuffix(p, "."):
		return fmt.Errorf("%q starts or ends with - or .", p)
	case len(p) > 96:
		return fmt.Errorf("%.20q... is over 96 characters", p)
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q has the character %q", p, r)
		}
	}
	return nil
}

// repoEntries are what huggingface_hub keeps in a repo's folder.
var repoEntries = map[string]bool{"blobs": true, "refs": true, "snapshots": true, ".no_exist": true}

// ScanCache lists the model repos of the HuggingFace cache at cacheDir,
// sorted by repo id. A cache that does not exist is empty; folders that are
// not model repos (datasets, spaces, .locks, strangers) are left out.
func ScanCache(cacheDir string) ([]CachedRepo, error) {
	ents, err := os.ReadDir(cacheDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("HF cache: %w", err)
	}
	var repos []CachedRepo
	for _, e := range ents {
		id, ok := RepoFromFolder(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		r, err := scanRepo(filepath.Join(cacheDir, e.Name()), id)
		if err != nil {
			return nil, err
		}
		repos = append(repos, r)
	}
	sort.Slice(repos, func(i, j int) bool { return repos[i].RepoID < repos[j].RepoID })
	return repos, nil
}

// scanRepo reads one repo folder: its refs, its snapshots and its blobs' size.
func scanRepo(dir, id string) (CachedRepo, error) {
	r := CachedRepo{RepoID: id, Path: dir}
	refs := readRefs(filepath.Join(dir, "refs"))
	snaps, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("HF cache %s: %w", dir, err)
	}
	for _, s := range snaps {
		if !s.IsDir() {
			continue
		}
		rev := CachedRevision{Commit: s.Name(), Refs: refs[s.Name()]}
		if rev.Files, rev.Size, err = snapshotSize(filepath.Join(dir, "snapshots", s.Name())); err != nil {
			return r, err
		}
		r.Revisions = append(r.Revisions, rev)
	}
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("HF cache %s: %w", dir, err)
	}
	for _, b := range blobs {
		if !b.Type().IsRegular() {
			continue
		}
		if info, err := b.Info(); err == nil {
			r.Size += info.Size()
		}
	}
	return r, nil
}

// maxRefSize bounds what is read of a ref file: a commit sha is 40 bytes.
const maxRefSize = 256

// readRefs maps each commit to the refs naming it (refs/main, refs/pr/1).
// A ref that does not hold a commit sha is left out.
func readRefs(dir string) map[string][]string {
	refs := map[string][]string{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(f, maxRefSize))
		f.Close()
		commit := strings.TrimSpace(string(b))
		if err != nil || !isCommit(commit) {
			return nil
		}
		name, _ := filepath.Rel(dir, path)
		refs[commit] = append(refs[commit], filepath.ToSlash(name))
		return nil
	})
	for _, names := range refs {
		sort.Strings(names)
	}
	return refs
}

func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// snapshotSize counts a snapshot's files and their bytes, following each
// file's link into blobs (a dangling link counts as a file of no bytes).
func snapshotSize(dir string) (files int, size int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		files++
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
			size += st.Size()
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("HF cache %s: %w", dir, err)
	}
	return files, size, nil
}

// RemoveCached deletes a model repo's folder from the HuggingFace cache, as
// huggingface_hub's delete-cache does, and returns the bytes freed. It
// deletes only a folder that is a model repo's (models--org--name, holding
// nothing but blobs, refs, snapshots and .no_exist); anything else is
// refused and left as it is.
func RemoveCached(cacheDir, repoID string) (int64, error) {
	folder, err := RepoFolder(repoID)
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(cacheDir, folder)
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%s is not in the HF cache %s", repoID, cacheDir)
	}
	if err != nil {
		return 0, fmt.Errorf("HF cache: %w", err)
	}
	if !st.IsDir() {
		return 0, fmt.Errorf("%w, so it is left as it is", notDir(dir, st.Mode()))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("HF cache: %w", err)
	}
	known := 0
	for _, e := range ents {
		if !repoEntries[e.Name()] || !e.IsDir() {
			return 0, fmt.Errorf("%s holds %s, which huggingface_hub does not keep there, so it is left as it is", dir, e.Name())
		}
		known++
	}
	if known == 0 {
		return 0, fmt.Errorf("%s holds no blobs, refs or snapshots, so it is left as it is", dir)
	}
	size, err := DirSize(dir)
	if err != nil {
		return 0, err
	}
	return size, atomicfile.Remove(dir)
}
