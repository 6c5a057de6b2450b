package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	base := t.TempDir()
	cases := []struct {
		name                string
		lowbitHome, xdg, hm string
		want                string
		wantErr             string
	}{
		{name: "LOWBIT_HOME", lowbitHome: filepath.Join(base, "lb"), xdg: filepath.Join(base, "xdg"), want: filepath.Join(base, "lb")},
		{name: "XDG_CACHE_HOME", xdg: filepath.Join(base, "xdg"), hm: filepath.Join(base, "home"), want: filepath.Join(base, "xdg", "lowbit")},
		{name: "HOME", hm: filepath.Join(base, "home"), want: filepath.Join(base, "home", ".cache", "lowbit")},
		{name: "neither", wantErr: "set LOWBIT_HOME"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvHome, c.lowbitHome)
			t.Setenv("XDG_CACHE_HOME", c.xdg)
			t.Setenv("HOME", c.hm)
			s, err := FromEnv()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("FromEnv = %+v, %v; want an error saying %q", s, err, c.wantErr)
				}
				if _, err := s.ModelPath("x"); err == nil {
					t.Error("a store without a root gave a model path")
				}
				return
			}
			if err != nil || s.Root != c.want {
				t.Fatalf("FromEnv = %q, %v; want %q", s.Root, err, c.want)
			}
			if s.ModelsDir() != filepath.Join(c.want, "models") || s.DemoDir() != filepath.Join(c.want, "sources", "demo") {
				t.Errorf("models %s, demo %s", s.ModelsDir(), s.DemoDir())
			}
		})
	}
	t.Run("relative", func(t *testing.T) {
		t.Chdir(base)
		t.Setenv(EnvHome, "rel")
		s, err := FromEnv()
		if err != nil || s.Root != filepath.Join(base, "rel") {
			t.Errorf("FromEnv = %q, %v; want the absolute %s", s.Root, err, filepath.Join(base, "rel"))
		}
	})
}

func TestCheckName(t *testing.T) {
	cases := []struct {
		name    string
		wantErr string
	}{
		{"demo-q4", ""},
		{"TinyLlama-1.1B-Chat-v1.0-q4", ""},
		{"", "empty"},
		{".", "starts with a dot"},
		{"..", "starts with a dot"},
		{".demo-q4.partial-1", "starts with a dot"},
		{"a/b", "path separator"},
		{`a\b`, "path separator"},
		{"../etc", "starts with a dot"},
		{"a\nb", "control character"},
		{strings.Repeat("x", 256), "over 255 bytes"},
	}
	for _, c := range cases {
		err := CheckName(c.name)
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("CheckName(%q) = %v, want %q", c.name, err, c.wantErr)
		}
	}
}

// writeModel makes a lowbit model directory by copying a manifest-bearing
// directory's layout: only manifest.json matters to the store.
func writeModel(t *testing.T, dir, manifestJSON string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifestJSON), 0o644); err != nil {
		t.Fatal(err)
	}
}

const minimalManifest = `{"format_version": 1, "lowbit_version": "test", "source": {"files": []},
 "architecture": {"arch": "llama"}, "quantization": {"format": "q4", "embedding_format": "q8", "output_format": "q8", "search": true},
 "files": [], "tensors": [], "summary": {"parameters": 0, "source_bytes": 0, "output_bytes": 0, "bits_per_weight": 0, "mean_rel_l2_error": 0, "max_rel_l2_error": 0}}`

func TestModelsAndRemove(t *testing.T) {
	s := Store{Root: t.TempDir()}
	models := s.ModelsDir()
	writeModel(t, filepath.Join(models, "good"), minimalManifest)
	writeModel(t, filepath.Join(models, "bad-manifest"), `{"format_version": 99}`)
	if err := os.MkdirAll(filepath.Join(models, "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models, "plain", "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(models, "good"), filepath.Join(models, "link")); err != nil {
		t.Fatal(err)
	}
	// A hidden directory (a removal or conversion under way) is not listed.
	leftover := filepath.Join(models, ".gone.partial-123")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}

	list, err := s.Models()
	if err != nil {
		t.Fatal(err)
	}
	problems := map[string]string{}
	for _, m := range list {
		problems[m.Name] = m.Problem
	}
	want := map[string]string{"bad-manifest": "format_version 99", "good": "", "link": "not a directory but a symbolic link", "plain": "manifest.json is missing"}
	if len(problems) != len(want) {
		t.Errorf("listed %v, want %v", problems, want)
	}
	for name, p := range want {
		if got, ok := problems[name]; !ok || (p == "") != (got == "") || !strings.Contains(got, p) {
			t.Errorf("%s: problem %q, want %q", name, got, p)
		}
	}

	cases := []struct {
		name, wantErr string
	}{
		{"plain", "plain is left as it is"},
		{"bad-manifest", "format_version 99"},
		{"link", "not a directory"},
		{"missing", "no model by that name"},
		{"models/good", "path separator"},
		{"../good", "starts with a dot"},
		{".", "starts with a dot"},
		{"good", ""},
	}
	for _, c := range cases {
		n, err := s.Remove(c.name)
		if c.wantErr == "" {
			if err != nil || n <= 0 {
				t.Errorf("Remove(%s) = %d, %v", c.name, n, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("Remove(%s) = %v, want an error saying %q", c.name, err, c.wantErr)
		}
	}
	if _, err := os.Stat(filepath.Join(models, "good")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("good is still there: %v", err)
	}
	for _, kept := range []string{"plain/keep.txt", "bad-manifest/manifest.json", "link"} {
		if _, err := os.Lstat(filepath.Join(models, kept)); err != nil {
			t.Errorf("refused %s was touched: %v", kept, err)
		}
	}
	// Removal is atomicfile.Remove, whose tests cover a dead remover's
	// leftovers; a hidden directory that is no such leftover stays.
	if _, err := os.Stat(leftover); err != nil {
		t.Errorf("a hidden directory that is not a leftover was removed: %v", err)
	}
}
