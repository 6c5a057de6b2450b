package hub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// repoFolder is huggingface_hub's folder name for a model repo.
func repoFolder(repoID string) string {
	return "models--" + strings.ReplaceAll(repoID, "/", "--")
}

// cachePaths are the folders of one repo in the cache.
type cachePaths struct {
	root, blobs, snapshots, refs, locks string
}

func pathsFor(cacheDir, repoID string) cachePaths {
	root := filepath.Join(cacheDir, repoFolder(repoID))
	return cachePaths{
		root:      root,
		blobs:     filepath.Join(root, "blobs"),
		snapshots: filepath.Join(root, "snapshots"),
		refs:      filepath.Join(root, "refs"),
		locks:     filepath.Join(cacheDir, ".locks", repoFolder(repoID)),
	}
}

// commitFor returns the commit of a revision: the revision itself when it is
// a commit sha, else what refs/{revision} holds.
func (p cachePaths) commitFor(revision string) (string, error) {
	if isHex(revision, 40) {
		return revision, nil
	}
	b, err := os.ReadFile(filepath.Join(p.refs, filepath.FromSlash(revision)))
	if err != nil {
		return "", err
	}
	c := strings.TrimSpace(string(b))
	if !isHex(c, 40) {
		return "", fmt.Errorf("hub: %s holds %q, not a commit sha", filepath.Join(p.refs, revision), c)
	}
	return c, nil
}

// writeRef records revision -> commit, as huggingface_hub does (no newline).
func (p cachePaths) writeRef(revision, commit string) error {
	if revision == commit {
		return nil
	}
	path := filepath.Join(p.refs, filepath.FromSlash(revision))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// link points snapshots/{commit}/{path} at ../../blobs/{etag} (relative,
// with one more ../ for each folder of path).
func (p cachePaths) link(commit, path, etag string) error {
	dst := filepath.Join(p.snapshots, commit, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	depth := strings.Count(path, "/")
	target := strings.Repeat("../", depth+2) + "blobs/" + etag
	if cur, err := os.Readlink(dst); err == nil && cur == target {
		return nil
	}
	tmp := dst + ".lowbit-tmp"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// lock takes the per-blob lock file that huggingface_hub also uses
// (.locks/models--org--name/{etag}.lock), so processes never write one blob at once.
func (p cachePaths) lock(etag string) (func(), error) {
	if err := os.MkdirAll(p.locks, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(p.locks, etag+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("hub: lock %s: %w", f.Name(), err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// CachedSnapshot finds a revision in the cache without the network. It
// reports what is missing: the repo, the revision, or files.
func CachedSnapshot(cacheDir, repoID, revision string, include []string) (*Snapshot, error) {
	if revision == "" {
		revision = "main"
	}
	p := pathsFor(cacheDir, repoID)
	if _, err := os.Stat(p.root); err != nil {
		return nil, fmt.Errorf("%w: %s is not in the cache %s (run `lowbit download %s` while online)", ErrOffline, repoID, cacheDir, repoID)
	}
	commit, err := p.commitFor(revision)
	if err != nil {
		return nil, fmt.Errorf("%w: %s has no cached revision %q (refs/%s is missing)", ErrOffline, repoID, revision, revision)
	}
	dir := filepath.Join(p.snapshots, commit)
	s := &Snapshot{Dir: dir, RepoID: repoID, Revision: revision, Commit: commit}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if !matches(rel, include) {
			return nil
		}
		st, err := os.Stat(path) // follows the link: a dangling one is missing data
		if err != nil {
			return fmt.Errorf("%w: %s@%s: %s points at a missing blob", ErrOffline, repoID, revision, rel)
		}
		s.Files = append(s.Files, FileInfo{Path: rel, Size: st.Size()})
		return nil
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s@%s: snapshot %s is missing", ErrOffline, repoID, revision, commit)
		}
		return nil, err
	}
	if !hasFile(s.Files, "config.json") && include == nil {
		return nil, fmt.Errorf("%w: %s@%s is cached without config.json", ErrOffline, repoID, revision)
	}
	return s, nil
}

func hasFile(files []FileInfo, path string) bool {
	for _, f := range files {
		if f.Path == path {
			return true
		}
	}
	return false
}

// matches reports whether a repo path matches any include glob (nil:
// DefaultInclude), with fnmatch semantics as huggingface_hub's
// allow_patterns: '*' also matches '/'.
func matches(path string, include []string) bool {
	if include == nil {
		include = DefaultInclude()
	}
	for _, g := range include {
		if fnmatch(g, path) {
			return true
		}
	}
	return false
}

// fnmatch matches name against a shell pattern where '*' matches any run of
// characters (slashes included) and '?' any one; other characters literally.
func fnmatch(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
