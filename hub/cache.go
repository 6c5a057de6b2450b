package hub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// checkRevision refuses revisions that would reach outside refs/.
func checkRevision(rev string) error {
	if err := checkRelPath(rev); err != nil {
		return fmt.Errorf("hub: revision %q: %w", rev, err)
	}
	return nil
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
	tmp := tmpName(path)
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
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
	tmp := tmpName(dst)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// tmpName is a name next to path that no other process picks.
func tmpName(path string) string {
	return path + ".lowbit-tmp-" + strconv.FormatUint(rand.Uint64(), 36)
}

// lock takes the per-blob lock file that huggingface_hub also uses
// (.locks/models--org--name/{etag}.lock, an flock), so processes never
// write one blob at once. It polls, so a cancelled ctx stops the wait.
func (p cachePaths) lock(ctx context.Context, etag string) (func(), error) {
	if err := os.MkdirAll(p.locks, 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(p.locks, etag+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("cache: lock %s: %w", f.Name(), err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// CachedSnapshot finds a revision in the cache without the network, with
// the files matching include (nil: DefaultInclude). Its ErrOffline errors
// say what is missing: the repo, the revision, or which files.
func CachedSnapshot(cacheDir, repoID, revision string, include []string) (*Snapshot, error) {
	if revision == "" {
		revision = "main"
	}
	if err := validRepoID(repoID); err != nil {
		return nil, err
	}
	if err := checkRevision(revision); err != nil {
		return nil, err
	}
	p := pathsFor(cacheDir, repoID)
	if _, err := os.Stat(p.root); err != nil {
		return nil, newError(ErrOffline, "offline: %s is not in the cache %s (run `lowbit download %s` while online)", repoID, cacheDir, repoID)
	}
	commit, err := p.commitFor(revision)
	if err != nil {
		return nil, newError(ErrOffline, "offline: %s has no cached revision %q (refs/%s is missing; run `lowbit download` while online)", repoID, revision, revision)
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
			return newError(ErrOffline, "offline: %s@%s: %s points at a missing blob", repoID, revision, rel)
		}
		f := FileInfo{Path: rel, Size: st.Size()}
		if target, err := os.Readlink(path); err == nil {
			switch etag := filepath.Base(target); {
			case isHex(etag, 64):
				f.SHA256 = etag
			case isHex(etag, 40):
				f.BlobID = etag
			}
		}
		s.Files = append(s.Files, f)
		return nil
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, newError(ErrOffline, "offline: %s@%s: snapshot %s is missing", repoID, revision, commit)
		}
		return nil, err
	}
	var missing []string
	for _, g := range include {
		if !strings.ContainsAny(g, "*?[") && !hasFile(s.Files, g) {
			missing = append(missing, g)
		}
	}
	if include == nil {
		if !hasFile(s.Files, "config.json") {
			missing = append(missing, "config.json")
		}
		if !hasSafetensors(s.Files) {
			missing = append(missing, "*.safetensors")
		}
	}
	if len(missing) > 0 {
		return nil, newError(ErrOffline, "offline: %s@%s is cached without %s", repoID, revision, strings.Join(missing, ", "))
	}
	if len(s.Files) == 0 {
		return nil, newError(ErrOffline, "offline: %s@%s has no cached file matching %v", repoID, revision, include)
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
// DefaultInclude) as huggingface_hub's allow_patterns do: fnmatch, where
// '*' also matches '/', and a pattern ending in '/' means the whole folder.
func matches(path string, include []string) bool {
	if include == nil {
		include = DefaultInclude()
	}
	for _, g := range include {
		if strings.HasSuffix(g, "/") {
			g += "*"
		}
		if fnmatch(g, path) {
			return true
		}
	}
	return false
}

// fnmatch matches name against a shell pattern as Python's fnmatch does:
// '*' matches any run of characters (slashes included), '?' any one,
// [seq] / [!seq] (with ranges a-z) one in / not in the set; a '[' without
// its ']' is literal.
func fnmatch(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				star, mark = p, n
				p++
				continue
			case '?':
				p++
				n++
				continue
			case '[':
				if ok, width, valid := matchClass(pattern[p:], name[n]); valid {
					if ok {
						p += width
						n++
						continue
					}
				} else if name[n] == '[' {
					p++
					n++
					continue
				}
			default:
				if c == name[n] {
					p++
					n++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		p = star + 1
		mark++
		n = mark
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchClass matches c against the class at the start of pat ("[...]"),
// returning whether it matched, the class's width, and whether pat starts
// with a complete class at all.
func matchClass(pat string, c byte) (ok bool, width int, valid bool) {
	i := 1
	neg := i < len(pat) && pat[i] == '!'
	if neg {
		i++
	}
	if i < len(pat) && pat[i] == ']' { // a leading ']' is literal
		i++
	}
	end := strings.IndexByte(pat[i:], ']')
	if end < 0 {
		return false, 0, false
	}
	end += i
	set := pat[1:end]
	if neg {
		set = set[1:]
	}
	for k := 0; k < len(set); k++ {
		if k+2 < len(set) && set[k+1] == '-' {
			if set[k] <= c && c <= set[k+2] {
				ok = true
			}
			k += 2
		} else if set[k] == c {
			ok = true
		}
	}
	return ok != neg, end + 1, true
}

// checkSpace refuses a download that the file system of blobs cannot hold:
// the files' sizes, less the blobs and partial downloads already there. A
// file system that reports no size (some network ones) is not checked.
func checkSpace(blobs string, files []FileInfo) error {
	var st unix.Statfs_t
	if err := unix.Statfs(blobs, &st); err != nil || st.Blocks == 0 {
		return nil
	}
	var need int64
	seen := map[string]bool{}
	for _, f := range files {
		etag := f.etag()
		if seen[etag] {
			continue
		}
		seen[etag] = true
		blob := filepath.Join(blobs, etag)
		if blobDone(blob, f.Size) {
			continue
		}
		need += f.Size
		if pst, err := os.Stat(blob + ".incomplete"); err == nil && pst.Size() <= f.Size {
			need -= pst.Size()
		}
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	if need > 0 && uint64(need) > free {
		return fmt.Errorf("the download needs %s in %s, which has %s free", formatBytes(need), blobs, formatBytes(int64(min(free, 1<<62))))
	}
	return nil
}
