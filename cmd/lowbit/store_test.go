package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"lowbit/hub"
	"lowbit/hub/hubtest"
	"lowbit/internal/fixture"
	"lowbit/manifest"
)

// storeEnv points the store and the HF cache at fresh directories and cuts
// the network: HF_ENDPOINT names a port nothing listens on, and the Hub is
// offline besides.
func storeEnv(t *testing.T) (home, cache string) {
	t.Helper()
	home = t.TempDir()
	cache = filepath.Join(t.TempDir(), "hub")
	t.Setenv("LOWBIT_HOME", home)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:9")
	t.Setenv("HF_TOKEN", "")
	return home, cache
}

// fixtureFiles is a small Llama's HF files (config, weights, tokenizer) by name.
func fixtureFiles(t *testing.T) map[string][]byte {
	t.Helper()
	src := t.TempDir()
	if err := fixture.Llama().Write(src); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// cacheRepos downloads the fixture model under each repo id into the HF
// cache from an in-process Hub, which is gone when it returns; it returns
// each repo's snapshot directory.
func cacheRepos(t *testing.T, cache string, repos ...string) map[string]string {
	t.Helper()
	s := hubtest.New()
	defer s.Close()
	files := fixtureFiles(t)
	for _, r := range repos {
		s.AddRepo(r, &hubtest.Repo{Files: files})
	}
	c, err := hub.New(hub.Options{Endpoint: s.Hub.URL, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for _, r := range repos {
		snap, err := c.Snapshot(context.Background(), r, "main", nil)
		if err != nil {
			t.Fatal(err)
		}
		dirs[r] = snap.Dir
	}
	return dirs
}

// TestDemoOffline is the README's first command in-process: with a fresh
// store and HF cache and no network, the built-in model converts (validated),
// runs, validates and benches by name.
func TestDemoOffline(t *testing.T) {
	home, _ := storeEnv(t)
	out, _, err := runIn(t, "", "convert", "demo", "--bits", "4", "--quiet")
	if err != nil {
		t.Fatalf("convert demo: %v\n%s", err, out)
	}
	stored := filepath.Join(home, "models", "demo-q4")
	if !strings.Contains(out, "wrote "+stored) || !strings.Contains(out, "result: PASS") {
		t.Errorf("convert output:\n%s", out)
	}
	m, err := manifest.Read(stored)
	if err != nil {
		t.Fatal(err)
	}
	if m.Validation == nil || m.Validation.Status != "PASS" || m.Source.Dir != filepath.Join(home, "sources", "demo") {
		t.Errorf("manifest validation %+v, source %+v", m.Validation, m.Source)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"run the converted model", []string{"run", "demo-q4", "Once upon a time", "-n", "8", "--temp", "0", "--device", "cpu"}, ","},
		{"run the float demo", []string{"run", "demo", "Once upon a time", "-n", "8", "--temp", "0", "--device", "cpu"}, ","},
		{"validate", []string{"validate", "demo-q4", "--device", "cpu"}, "result: PASS"},
		{"bench", []string{"bench", "demo-q4", "-p", "8", "-n", "4", "-r", "1", "--device", "cpu"}, "| demo-q4 | q4 |"},
		{"convert without validation", []string{"convert", "demo", "--bits", "8", "--no-validate", "--quiet"}, "not validated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runIn(t, "", c.args...)
			if err != nil || !strings.Contains(out, c.want) {
				t.Errorf("%v: %v, output lacks %q:\n%s", c.args, err, c.want, out)
			}
		})
	}
	if _, _, err := runIn(t, "", "convert", "demo", "--bits", "4"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second convert: %v, want already exists", err)
	}
	if _, _, err := runIn(t, "", "download", "demo"); err == nil || !strings.Contains(err.Error(), "demo is built into lowbit") {
		t.Errorf("download demo: %v", err)
	}
}

// TestConvertDefaultOut converts each kind of source without --out: the
// model lands in the store as <alias or repo name>-<format>.
func TestConvertDefaultOut(t *testing.T) {
	home, cache := storeEnv(t)
	cacheRepos(t, cache, "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "org/tiny")
	local := filepath.Join(t.TempDir(), "my-model")
	if err := fixture.Llama().Write(local); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		source, bits, want string
	}{
		{"demo", "2", "demo-q2"},
		{"tinyllama", "4", "tinyllama-q4"},
		{"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "8", "tinyllama-q8"},
		{"org/tiny", "4", "tiny-q4"},
		{local, "8", "my-model-q8"},
	}
	for _, c := range cases {
		out, _, err := runIn(t, "", "convert", c.source, "--bits", c.bits, "--no-validate", "--quiet", "--json")
		if err != nil {
			t.Fatalf("convert %s: %v", c.source, err)
		}
		var res struct {
			OutDir string `json:"out_dir"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.OutDir != filepath.Join(home, "models", c.want) {
			t.Errorf("convert %s: out %q (%v), want %s in the store", c.source, res.OutDir, err, c.want)
		}
	}
}

// TestDefaultHome leaves LOWBIT_HOME unset: the store is lowbit in the user
// cache directory, and without one convert still works with --out.
func TestDefaultHome(t *testing.T) {
	storeEnv(t)
	t.Setenv("LOWBIT_HOME", "")
	xdg, home := t.TempDir(), t.TempDir()
	cases := []struct {
		name, xdg, home, want string
	}{
		{"XDG_CACHE_HOME", xdg, home, filepath.Join(xdg, "lowbit", "models", "demo-q8")},
		{"HOME", "", home, filepath.Join(home, ".cache", "lowbit", "models", "demo-q8")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", c.xdg)
			t.Setenv("HOME", c.home)
			if _, _, err := runIn(t, "", "convert", "demo", "--bits", "8", "--no-validate", "--quiet"); err != nil {
				t.Fatal(err)
			}
			if _, err := manifest.Read(c.want); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("neither", func(t *testing.T) {
		t.Setenv("XDG_CACHE_HOME", "")
		t.Setenv("HOME", "")
		_, _, err := runIn(t, "", "convert", "demo", "--bits", "8", "--no-validate")
		if err == nil || !strings.Contains(err.Error(), "set LOWBIT_HOME") {
			t.Errorf("convert with no store: %v", err)
		}
		local := t.TempDir()
		if err := fixture.Llama().Write(local); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out")
		if _, _, err := runIn(t, "", "convert", local, "--out", out, "--no-validate", "--quiet"); err != nil {
			t.Errorf("convert --out with no store: %v", err)
		}
	})
}

// TestResolveModel tries each step of a model argument's resolution, and
// that an earlier step wins over a later one.
func TestResolveModel(t *testing.T) {
	_, cache := storeEnv(t)
	snaps := cacheRepos(t, cache, "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "org/tiny")
	cases := []struct {
		name, arg string
		// cwdDirs and storeDirs are made in the working directory and the store first.
		cwdDirs, storeDirs []string
		cwdFile            string
		want               func(home string) string
		wantErr            string
	}{
		{name: "a path before the store", arg: "m", cwdDirs: []string{"m"}, storeDirs: []string{"m"}, want: func(string) string { return "m" }},
		{name: "the store", arg: "m", storeDirs: []string{"m"}, want: func(h string) string { return filepath.Join(h, "models", "m") }},
		{name: "the store before an alias", arg: "demo", storeDirs: []string{"demo"}, want: func(h string) string { return filepath.Join(h, "models", "demo") }},
		{name: "the built-in alias", arg: "demo", want: func(h string) string { return filepath.Join(h, "sources", "demo") }},
		{name: "an alias through the HF cache", arg: "tinyllama", want: func(string) string { return snaps["TinyLlama/TinyLlama-1.1B-Chat-v1.0"] }},
		{name: "a repo id through the HF cache", arg: "org/tiny", want: func(string) string { return snaps["org/tiny"] }},
		{name: "a file", arg: "f", cwdFile: "f", wantErr: "f is a file"},
		{name: "a GGUF file", arg: "m.gguf", cwdFile: "m.gguf", storeDirs: []string{"m.gguf"}, want: func(string) string { return "m.gguf" }},
		{name: "nothing by that name", arg: "nosuch", wantErr: "nosuch: no model found: tried a path (no such directory), the store (none by that name in "},
		{name: "a repo not cached", arg: "org/absent", wantErr: "tried a path (no such directory), the store (none by that name in "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("LOWBIT_HOME", home)
			t.Chdir(t.TempDir())
			for _, d := range c.cwdDirs {
				mkdir(t, d)
			}
			for _, d := range c.storeDirs {
				mkdir(t, filepath.Join(home, "models", d))
			}
			if c.cwdFile != "" {
				if err := os.WriteFile(c.cwdFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := resolveModelDir(context.Background(), c.arg, "", true, nil, nil)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("resolve %s = %q, %v; want an error saying %q", c.arg, got, err, c.wantErr)
				}
				return
			}
			if want := c.want(home); err != nil || got != want {
				t.Errorf("resolve %s = %q, %v; want %q", c.arg, got, err, want)
			}
		})
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// storeWithModels converts the demo twice (validated q4, unvalidated q8),
// copies q4 as a model from before validation was recorded (old-q4), adds a
// directory that is no model (junk) and caches org/tiny.
func storeWithModels(t *testing.T) (home, cache string, snaps map[string]string) {
	t.Helper()
	home, cache = storeEnv(t)
	for _, bits := range []string{"4", "8"} {
		args := []string{"convert", "demo", "--bits", bits, "--quiet"}
		if bits == "8" {
			args = append(args, "--no-validate")
		}
		if _, _, err := runIn(t, "", args...); err != nil {
			t.Fatal(err)
		}
	}
	models := filepath.Join(home, "models")
	old := filepath.Join(models, "old-q4")
	mkdir(t, old)
	ents, err := os.ReadDir(filepath.Join(models, "demo-q4"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(models, "demo-q4", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(old, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := manifest.Read(old)
	if err != nil {
		t.Fatal(err)
	}
	m.Validation = nil
	if err := m.Write(old); err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(models, "junk"))
	if err := os.WriteFile(filepath.Join(models, "junk", "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	return home, cache, cacheRepos(t, cache, "org/tiny")
}

func TestListShow(t *testing.T) {
	home, cache, snaps := storeWithModels(t)
	commit := filepath.Base(snaps["org/tiny"])

	out, errOut, err := runIn(t, "", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^NAME +FORMAT +BITS/W +SIZE +VALIDATION +SOURCE$`,
		`(?m)^demo-q4 +q4 +\d+\.\d\d +\d+\.\d [KMG]iB +PASS +demo \(built in\)$`,
		`(?m)^demo-q8 +q8 +\d+\.\d\d +\d+\.\d [KMG]iB +NOT VALIDATED +demo \(built in\)$`,
		`(?m)^old-q4 +q4 +\d+\.\d\d +\d+\.\d [KMG]iB +- +demo \(built in\)$`,
		`(?m)^REPO +REVISION +COMMIT +FILES +SIZE$`,
		`(?m)^org/tiny +main +` + commit[:12] + ` +\d+ +\d+\.\d [KMG]iB$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("list lacks %s:\n%s", re, out)
		}
	}
	if !strings.Contains(errOut, "note: junk is not a lowbit model") || strings.Contains(out, "junk") {
		t.Errorf("junk: stdout\n%s\nstderr\n%s", out, errOut)
	}

	out, _, err = runIn(t, "", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var l listJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, m := range l.Models {
		status[m.Name] = m.Validation
		if m.Name == "junk" && m.Problem == "" {
			t.Error("junk has no problem in the JSON")
		}
	}
	want := map[string]string{"demo-q4": "PASS", "demo-q8": "NOT VALIDATED", "old-q4": "-", "junk": ""}
	if len(status) != len(want) {
		t.Errorf("JSON models %v, want %v", status, want)
	}
	for name, s := range want {
		if status[name] != s {
			t.Errorf("JSON %s validation %q, want %q", name, status[name], s)
		}
	}
	if l.Store != filepath.Join(home, "models") || l.HFCache != cache || len(l.Cached) != 1 || l.Cached[0].RepoID != "org/tiny" ||
		len(l.Cached[0].Revisions) != 1 || l.Cached[0].Revisions[0].Commit != commit || l.Cached[0].Size <= 0 {
		t.Errorf("JSON list %+v", l)
	}

	showCases := []struct {
		model string
		want  []string
	}{
		{"demo-q4", []string{"5 layers, hidden 64, intermediate 172, 8 heads (4 KV, head dim 8), vocab 512, context 512",
			"linear q4 (group 32), embeddings q8 (group 128), head tied to the embeddings", "260032 (260.03 K)",
			"bits/weight", "relative L2 mean", "validation    PASS: KLD mean 0.", "top-1 ", "PPL ratio 1.", "source        demo (built in)"}},
		{"demo-q8", []string{"validation    NOT VALIDATED", "not checked   conversion ran with --no-validate"}},
		{"old-q4", []string{"validation    - (converted before lowbit recorded it"}},
		{"demo", []string{"llama (LlamaForCausalLM): 5 layers", "not converted: a HuggingFace model directory"}},
		{"org/tiny", []string{"not converted"}},
	}
	for _, c := range showCases {
		out, _, err := runIn(t, "", "show", c.model)
		if err != nil {
			t.Fatalf("show %s: %v", c.model, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("show %s lacks %q:\n%s", c.model, w, out)
			}
		}
	}
	out, _, err = runIn(t, "", "show", "demo-q4", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var s showJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if !s.Converted || s.Config.NumLayers != 5 || s.Formats.Linear != "q4" || s.Formats.EmbeddingGroup != 128 || !s.Formats.HeadTied ||
		s.Validation == nil || s.Validation.Status != "PASS" || s.Validation.KLDMean == nil || s.SizeOnDisk <= 0 ||
		s.Source == nil || s.Source.Dir != filepath.Join(home, "sources", "demo") {
		t.Errorf("show --json: %s", out)
	}
	if _, _, err := runIn(t, "", "show", "junk"); err == nil || !strings.Contains(err.Error(), "neither a lowbit model") {
		t.Errorf("show junk: %v", err)
	}
}

func TestRm(t *testing.T) {
	home, cache, _ := storeWithModels(t)
	models := filepath.Join(home, "models")
	odd := filepath.Join(cache, "models--org--odd")
	mkdir(t, filepath.Join(odd, "blobs"))
	if err := os.WriteFile(filepath.Join(odd, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(models, "demo-q4"), filepath.Join(models, "link")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
		gone    []string
	}{
		{name: "not a model", args: []string{"rm", "junk"}, wantErr: "junk is left as it is: " + filepath.Join(models, "junk") + " is not a lowbit model directory"},
		{name: "a link", args: []string{"rm", "link"}, wantErr: "link is not a directory but a symbolic link"},
		{name: "a path", args: []string{"rm", "../models/demo-q4"}, wantErr: `model name "../models/demo-q4" starts with a dot`},
		{name: "a path inside", args: []string{"rm", "x/demo-q4"}, wantErr: "holds a path separator"},
		{name: "no such model", args: []string{"rm", "nosuch"}, wantErr: "nosuch: no model by that name in " + models},
		{name: "one of two", args: []string{"rm", "demo-q8", "nosuch"}, wantOut: "removed demo-q8 from " + models, wantErr: "rm nosuch", gone: []string{filepath.Join(models, "demo-q8")}},
		{name: "a model", args: []string{"rm", "old-q4"}, wantOut: "removed old-q4 from " + models + " (", gone: []string{filepath.Join(models, "old-q4")}},
		{name: "cached: unrecognised folder", args: []string{"rm", "--cached", "org/odd"}, wantErr: "holds notes.txt, which huggingface_hub does not keep there"},
		{name: "cached: not cached", args: []string{"rm", "--cached", "tinyllama"}, wantErr: "TinyLlama/TinyLlama-1.1B-Chat-v1.0 is not in the HF cache"},
		{name: "cached: built in", args: []string{"rm", "--cached", "demo"}, wantErr: "demo is built into lowbit"},
		{name: "cached: not a repo id", args: []string{"rm", "--cached", "../../etc"}, wantErr: "not a repo id"},
		{name: "cached repo", args: []string{"rm", "--cached", "org/tiny"}, wantOut: "removed org/tiny from the HF cache " + cache, gone: []string{filepath.Join(cache, "models--org--tiny")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runIn(t, "", c.args...)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
			}
			if !strings.Contains(out, c.wantOut) {
				t.Errorf("%v: output %q lacks %q", c.args, out, c.wantOut)
			}
			for _, g := range c.gone {
				if _, err := os.Stat(g); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is still there: %v", g, err)
				}
			}
		})
	}
	for _, kept := range []string{filepath.Join(models, "junk", "notes.txt"), filepath.Join(odd, "notes.txt"), filepath.Join(models, "link"), filepath.Join(models, "demo-q4", "manifest.json")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
}

// TestShowFallback: a model converted to a block format whose rows are
// not whole blocks shows how many linear weights took the fallback.
func TestShowFallback(t *testing.T) {
	storeEnv(t)
	out, _, err := runIn(t, "", "convert", "demo", "--bits", "q4k", "--quiet", "--no-validate")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "note: model.layers.0.mlp.down_proj.weight") || !strings.Contains(out, "not whole 256-weight blocks of q4k; stored as q4") {
		t.Errorf("convert output lacks the fallback notes:\n%s", out)
	}
	out, _, err = runIn(t, "", "show", "demo-q4k")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "linear q4k (35 as q4: rows not whole blocks), embeddings q8 (group 128)") {
		t.Errorf("show:\n%s", out)
	}
}
