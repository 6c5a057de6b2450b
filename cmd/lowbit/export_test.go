package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestGGUFCommands converts the built-in demo to GGUF, and exports a
// converted model: the file runs, show describes it with lowbit's
// provenance, validate measures it against its source; what GGUF cannot
// hold exactly is refused by name, and --requantize writes it and
// validates the file again.
func TestGGUFCommands(t *testing.T) {
	home, _ := storeEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "demo-q4.gguf")
	out, _, err := runIn(t, "", "convert", "demo", "--bits", "4", "--format", "gguf", "--out", file, "--quiet")
	if err != nil {
		t.Fatalf("convert --format gguf: %v\n%s", err, out)
	}
	for _, want := range []string{"wrote " + file + ": llama, 47 tensors (1 Q8_0, 16 F32, 30 Q4_1)", "groups of 32", "written as F32 holding the dequantized weights exactly", "result: PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("convert output lacks %q:\n%s", want, out)
		}
	}
	source := filepath.Join(home, "sources", "demo")
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"run", []string{"run", file, "Once upon a time", "-n", "8", "--temp", "0", "--device", "cpu"}, []string{", there was a little"}},
		{"show", []string{"show", file}, []string{"llama: 5 layers, hidden 64", "30 Q4_1", "llama, 512 tokens", "exported by   lowbit", "linear q4 (group 32), embeddings q8, head q8", "PASS: KLD mean"}},
		{"validate", []string{"validate", file, "--reference", source, "--device", "cpu"}, []string{"thresholds (q4)", "result: PASS"}},
		{"export a converted model, refused", []string{"convert", "demo", "--bits", "8", "--no-validate", "--quiet"}, []string{"wrote"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runIn(t, "", c.args...)
			if err != nil {
				t.Fatalf("%v: %v\n%s", c.args, err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
				}
			}
		})
	}
	var show map[string]any
	if out, _, err := runIn(t, "", "show", file, "--json"); err != nil || json.Unmarshal([]byte(out), &show) != nil || show["lowbit"] == nil {
		t.Errorf("show --json: %v\n%s", err, out)
	}
	exported := filepath.Join(dir, "demo-q8.gguf")
	if _, _, err := runIn(t, "", "export", "demo-q8", "--out", exported, "--quiet"); err == nil ||
		!strings.Contains(err.Error(), "model.embed_tokens.weight (q8: Q8_0 holds groups of 32, this tensor has groups of 128; the closest is Q8_0 at group 32)") {
		t.Errorf("export of 8-bit tables in groups of 128: %v", err)
	}
	out, _, err = runIn(t, "", "export", "demo-q8", "--out", exported, "--requantize", "--json", "--quiet")
	var res struct {
		Requantized []string `json:"requantized"`
		Validation  *struct {
			Status string `json:"status"`
		} `json:"validation"`
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Requantized) != 1 || res.Validation == nil || res.Validation.Status != "PASS" {
		t.Errorf("export --requantize --json: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"convert", "demo", "--bits", "2", "--format", "gguf", "--out", filepath.Join(dir, "x.gguf")}, "no GGUF type holds q2 exactly"},
		{[]string{"convert", "demo", "--bits", "q3s", "--format", "gguf", "--out", filepath.Join(dir, "x.gguf")}, "no GGUF type holds q3s exactly (the closest is Q4_1"},
		{[]string{"convert", "demo", "--bits", "4", "--group-size", "64", "--format", "gguf", "--out", filepath.Join(dir, "x.gguf")}, "holds groups of 32"},
		{[]string{"convert", "demo", "--bits", "4", "--format", "gguf", "--out", file}, "already exists"},
		{[]string{"export", "demo-q8", "--format", "safetensors"}, `want gguf`},
	} {
		if _, _, err := runIn(t, "", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestValidateGGUFRepoReference validates a GGUF file against a reference
// given as a Hub repo id, found in the HF cache (never downloaded).
func TestValidateGGUFRepoReference(t *testing.T) {
	_, cache := storeEnv(t)
	snaps := cacheRepos(t, cache, "org/tiny")
	file := filepath.Join(t.TempDir(), "tiny.gguf")
	if out, _, err := runIn(t, "", "convert", snaps["org/tiny"], "--bits", "8", "--format", "gguf", "--out", file, "--no-validate", "--quiet"); err != nil {
		t.Fatalf("convert: %v\n%s", err, out)
	}
	out, _, err := runIn(t, "", "validate", file, "--reference", "org/tiny", "--device", "cpu", "--json")
	var rep struct {
		Reference string `json:"reference"`
		Model     *struct {
			Format string `json:"format"`
			Tokens int    `json:"tokens"`
		} `json:"model"`
	}
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || rep.Model == nil || rep.Model.Format != "q8" || rep.Reference != snaps["org/tiny"] {
		t.Errorf("validate --reference org/tiny: %v (%v)\n%s", err, jerr, out)
	}
	if _, _, err := runIn(t, "", "validate", file, "--reference", "org/absent", "--device", "cpu"); err == nil || !strings.Contains(err.Error(), "neither a directory nor a repo in the HF cache") {
		t.Errorf("an absent repo: %v", err)
	}
}
