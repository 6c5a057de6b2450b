package store

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRepoFolder(t *testing.T) {
	cases := []struct {
		id, folder, wantErr string
	}{
		{"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "models--TinyLlama--TinyLlama-1.1B-Chat-v1.0", ""},
		{"gpt2", "models--gpt2", ""},
		{"org/na_me.v2", "models--org--na_me.v2", ""},
		{"", "", "not an org or name"},
		{"a/b/c", "", "want org/name"},
		{"../x", "", "not an org or name"},
		{"org/..", "", "not an org or name"},
		{"org/a--b", "", "holds -- or .."},
		{"org/-x", "", "starts or ends"},
		{"org/x y", "", "has the character"},
	}
	for _, c := range cases {
		got, err := RepoFolder(c.id)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("RepoFolder(%q) = %q, %v; want an error saying %q", c.id, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.folder {
			t.Errorf("RepoFolder(%q) = %q, %v; want %q", c.id, got, err, c.folder)
		}
		if id, ok := RepoFromFolder(got); !ok || id != c.id {
			t.Errorf("RepoFromFolder(%q) = %q, %v", got, id, ok)
		}
	}
}

const (
	commitA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	commitB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// makeCache lays out a cache as huggingface_hub does, with the oddities a
// real one collects.
func makeCache(t *testing.T) string {
	t.Helper()
	cache := t.TempDir()
	files := map[string]string{
		"models--org--tiny/blobs/b1":                    "0123456789",
		"models--org--tiny/blobs/b2":                    "abc",
		"models--org--tiny/refs/main":                   commitA,
		"models--org--tiny/refs/pr/1":                   commitB + "\n",
		"models--org--tiny/refs/garbage":                "not a commit",
		"models--org--tiny/refs/huge":                   strings.Repeat("a", 1<<16),
		"models--gpt2/refs/main":                        commitB,
		"datasets--org--data/refs/main":                 commitA,
		"models--bad--name--extra/refs/main":            commitA,
		"models--file-not-dir":                          "x",
		".locks/models--org--tiny/b1.lock":              "",
		"models--odd--repo/blobs/b":                     "x",
		"models--odd--repo/notes.txt":                   "mine",
		"models--org--tiny/snapshots/" + commitB + "/x": "",
	}
	for name, body := range files {
		p := filepath.Join(cache, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"models--org--tiny/snapshots/" + commitA + "/config.json":        "../../blobs/b1",
		"models--org--tiny/snapshots/" + commitA + "/sub/tokenizer.json": "../../../blobs/b2",
		"models--org--tiny/snapshots/" + commitA + "/dangling":           "../../blobs/missing",
	}
	for name, target := range links {
		p := filepath.Join(cache, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return cache
}

func TestScanCache(t *testing.T) {
	cache := makeCache(t)
	repos, err := ScanCache(cache)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range repos {
		ids = append(ids, r.RepoID)
	}
	if want := []string{"gpt2", "odd/repo", "org/tiny"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("repos %v, want %v", ids, want)
	}
	tiny := repos[2]
	want := []CachedRevision{
		{Commit: commitA, Refs: []string{"main"}, Files: 3, Size: 13},
		{Commit: commitB, Refs: []string{"pr/1"}, Files: 1, Size: 0},
	}
	if tiny.Size != 13 || !reflect.DeepEqual(tiny.Revisions, want) {
		t.Errorf("org/tiny: size %d, revisions %+v; want 13, %+v", tiny.Size, tiny.Revisions, want)
	}
	if repos, err := ScanCache(filepath.Join(cache, "absent")); err != nil || len(repos) != 0 {
		t.Errorf("an absent cache: %v, %v", repos, err)
	}
}

func TestRemoveCached(t *testing.T) {
	cache := makeCache(t)
	cases := []struct {
		repo, wantErr string
	}{
		{"odd/repo", "holds notes.txt, which huggingface_hub does not keep there"},
		{"file-not-dir", "is not a directory"},
		{"org/absent", "is not in the HF cache"},
		{"../x", "not a repo id"},
		{"org/tiny", ""},
	}
	for _, c := range cases {
		n, err := RemoveCached(cache, c.repo)
		if c.wantErr == "" {
			// The blobs' 13 bytes and the refs' files; links count nothing.
			if want := int64(13 + 40 + 41 + 12 + 1<<16); err != nil || n != want {
				t.Errorf("RemoveCached(%s) = %d, %v", c.repo, n, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("RemoveCached(%s) = %v, want an error saying %q", c.repo, err, c.wantErr)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--tiny")); !os.IsNotExist(err) {
		t.Errorf("org/tiny is still cached: %v", err)
	}
	for _, kept := range []string{"models--odd--repo/notes.txt", "models--file-not-dir", ".locks/models--org--tiny/b1.lock"} {
		if _, err := os.Stat(filepath.Join(cache, kept)); err != nil {
			t.Errorf("%s was touched: %v", kept, err)
		}
	}
}
