package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/convert"
	"lowbit/hub/hubtest"
	"lowbit/manifest"
)

// run executes the CLI with args and returns stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestListModels(t *testing.T) {
	out, err := run(t, "convert", "--list-models")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tinyllama", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "mistral-7b-instruct", "gemma-2b", "llama2-7b", "bitnet-2b", "microsoft/bitnet-b1.58-2B-4T-bf16", "TERNARY", "qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", "Gemma3ForCausalLM", "mistral-nemo"} {
		if !strings.Contains(out, want) {
			t.Errorf("--list-models lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "convert", "--list-models", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != len(convert.Registry()) {
		t.Fatalf("--json: %v %d", err, len(rows))
	}
}

// TestConvertFromHub runs `lowbit convert org/repo --bits 4` end to end
// against the in-process Hub, then again offline from the cache.
func TestConvertFromHub(t *testing.T) {
	s := hubtest.New()
	defer s.Close()
	s.AddRepo("org/tiny", &hubtest.Repo{Files: fixtureFiles(t)})
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", s.Hub.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	out := filepath.Join(t.TempDir(), "tiny-q4")
	stdout, err := run(t, "convert", "org/tiny", "--bits", "4", "-o", out, "--json", "--quiet", "--no-validate")
	if err != nil {
		t.Fatalf("convert: %v\n%s", err, stdout)
	}
	m, err := manifest.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Source.RepoID != "org/tiny" || len(m.Source.Commit) != 40 || m.Quantization.Format != "q4" {
		t.Errorf("source %+v", m.Source)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res["out_dir"] != out {
		t.Errorf("--json output %q: %v", stdout, err)
	}
	// Offline, from the cache alone.
	s.Close()
	if _, err := run(t, "convert", "org/tiny", "--bits", "8", "-o", out+"-q8", "--offline", "--quiet", "--no-validate"); err != nil {
		t.Fatalf("offline convert: %v", err)
	}
	if _, err := run(t, "download", "org/missing", "--offline"); err == nil || !strings.Contains(err.Error(), "org/missing") {
		t.Errorf("offline missing repo: %v", err)
	}
}

// TestUnreachableHub: with the Hub out of reach, a cached repo is used at
// once with a notice, and one not in the cache gets an error that says what
// to do, without five retries.
func TestUnreachableHub(t *testing.T) {
	s := hubtest.New()
	s.AddRepo("org/tiny", &hubtest.Repo{Files: fixtureFiles(t)})
	t.Setenv("HF_ENDPOINT", s.Hub.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	if _, _, err := runIn(t, "", "download", "org/tiny", "--quiet"); err != nil {
		t.Fatal(err)
	}
	s.Close() // connections refused from here on

	out := filepath.Join(t.TempDir(), "tiny-q8")
	_, stderr, err := runIn(t, "", "convert", "org/tiny", "--bits", "8", "-o", out, "--no-validate")
	if err != nil {
		t.Fatalf("convert from the cache: %v", err)
	}
	if !strings.Contains(stderr, "unreachable") || !strings.Contains(stderr, "using the cached snapshot") {
		t.Errorf("no notice of the fall back to the cache:\n%s", stderr)
	}
	_, stderr, _ = runIn(t, "", "convert", "org/tiny", "--bits", "8", "-o", out+"-quiet", "--no-validate", "-q")
	if strings.Contains(stderr, "unreachable") {
		t.Errorf("--quiet printed the notice:\n%s", stderr)
	}
	_, _, err = runIn(t, "", "convert", "org/other", "--bits", "8", "-o", out+"-other")
	for _, want := range []string{"cannot reach", "HF_ENDPOINT", "--offline", "org/other"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}
