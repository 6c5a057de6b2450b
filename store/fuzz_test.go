package store

import (
	"path/filepath"
	"testing"
)

// FuzzRepoFromFolder reads cache folder names as huggingface_hub writes them:
// whatever a folder is called, a repo id read from it names that folder back
// and never reaches outside the cache.
func FuzzRepoFromFolder(f *testing.F) {
	for _, s := range []string{"models--org--name", "models--gpt2", "models--a--b--c", "datasets--x--y", "models----", "models--..--x", "models--org--na.me"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, folder string) {
		id, ok := RepoFromFolder(folder)
		if !ok {
			return
		}
		back, err := RepoFolder(id)
		if err != nil || back != folder {
			t.Fatalf("RepoFromFolder(%q) = %q, whose folder is %q (%v)", folder, id, back, err)
		}
		if filepath.Base(back) != back || back == "." || back == ".." {
			t.Fatalf("folder %q is not one path element", back)
		}
	})
}

// FuzzCheckName holds every accepted model name to one path element directly
// inside the models directory.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"demo-q4", "..", "a/b", ".x", "", "x\x00y", "é"} {
		f.Add(s)
	}
	s := Store{Root: "/store"}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := s.ModelPath(name)
		if err != nil {
			return
		}
		if filepath.Dir(p) != s.ModelsDir() || filepath.Base(p) != name {
			t.Fatalf("name %q lands at %q", name, p)
		}
	})
}
