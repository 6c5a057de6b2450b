package convert

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/manifest"
)

// writeSource writes spec as a source model directory and applies edit to it.
func writeSource(t *testing.T, spec fixture.Spec, edit func(dir string) error) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := spec.Write(src); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		if err := edit(src); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// TestConvertChecksBeforeQuantizing: a checkpoint that cannot make a working
// model is refused before anything is written, with or without validation,
// by an error naming the tensor, field or file.
func TestConvertChecksBeforeQuantizing(t *testing.T) {
	base := fixture.Llama()
	threeLayers := base
	threeLayers.Layers = 3
	withBias := base
	withBias.Extra = map[string][]int64{"model.layers.0.self_attn.q_proj.bias": {48}}
	smallVocab := base
	smallVocab.Vocab = 90 // below its tokenizer's, once that is replaced by a full one
	tests := []struct {
		name string
		spec fixture.Spec
		edit func(dir string) error
		want []string
	}{
		{"shape against config", base, func(dir string) error {
			return rewrite(filepath.Join(dir, "config.json"), `"intermediate_size": 80`, `"intermediate_size": 96`)
		}, []string{"model.layers.0.mlp.gate_proj.weight is [80 48], not [96 48]", "intermediate_size 96"}},
		{"vocab against config", base, func(dir string) error {
			return rewrite(filepath.Join(dir, "config.json"), `"vocab_size": 96`, `"vocab_size": 100`)
		}, []string{"model.embed_tokens.weight is [96 48], not [100 48]"}},
		{"extra layers", threeLayers, func(dir string) error {
			return rewrite(filepath.Join(dir, "config.json"), `"num_hidden_layers": 3`, `"num_hidden_layers": 2`)
		}, []string{"layers up to 2", "num_hidden_layers is 2"}},
		{"unused tensor", withBias, nil, []string{"does not use", "model.layers.0.self_attn.q_proj.bias"}},
		{"no tokenizer", base, func(dir string) error { return os.Remove(filepath.Join(dir, "tokenizer.json")) },
			[]string{"tokenizer", "has none of tokenizer.json, tokenizer.model, vocab.json with merges.txt"}},
		{"broken tokenizer", base, func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "BPE", "vocab": 7}}`), 0o644)
		}, []string{"tokenizer.json"}},
		{"tokenizer past the embeddings", smallVocab, func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "tokenizer.json"), fixture.TokenizerJSON(96), 0o644)
		}, []string{"tokenizer has 96 tokens, more than config.json's vocab_size 90"}},
		{"chat template", base, func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(`{% for m in messages %}`), 0o644)
		}, []string{"chat template"}},
	}
	for _, tc := range tests {
		for _, noValidate := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				src := writeSource(t, tc.spec, tc.edit)
				parent := t.TempDir()
				_, err := Run(context.Background(), Options{Source: src, Out: filepath.Join(parent, "out"), Bits: "4", NoValidate: noValidate})
				if err == nil {
					t.Fatal("converted")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), ".partial-") {
					t.Errorf("error %q names a temporary directory", err)
				}
				if ents, _ := os.ReadDir(parent); len(ents) != 0 {
					t.Errorf("the output's parent holds %v: something was written before the check", ents)
				}
			})
		}
	}
}

// TestConvertLeavesOutIgnoredTensors: tensors transformers itself ignores
// are left out, each with a note.
func TestConvertLeavesOutIgnoredTensors(t *testing.T) {
	spec := fixture.Llama()
	spec.Tied = true
	spec.Extra = map[string][]int64{"lm_head.weight": {96, 48}, "model.layers.1.self_attn.rotary_emb.inv_freq": {6}}
	res, _ := convertFixture(t, spec, Options{Bits: "8", NoValidate: true})
	if len(res.Notes) != 2 || !strings.Contains(strings.Join(res.Notes, "\n"), "ties the output head") {
		t.Errorf("notes: %q", res.Notes)
	}
	if _, ok := res.Manifest.Tensor("lm_head.weight"); ok {
		t.Error("the tied head was stored")
	}
}

// TestConvertRecordsValidation: a model that was not checked says so.
func TestConvertRecordsValidation(t *testing.T) {
	res, _ := convertFixture(t, fixture.Llama(), Options{Bits: "8", NoValidate: true})
	m, err := manifest.Read(res.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if v := m.Validation; v == nil || v.Status != manifest.NotValidated || !strings.Contains(strings.Join(v.NotChecked, ""), "--no-validate") {
		t.Errorf("manifest validation after --no-validate: %+v", v)
	}
	res, _ = convertFixture(t, fixture.Llama(), Options{Bits: "8"})
	if m, err = manifest.Read(res.OutDir); err != nil {
		t.Fatal(err)
	}
	if v := m.Validation; v == nil || v.Status != res.Validation.Status || v.KLDMean == nil || v.Top1 == nil || *v.Top1 != res.Validation.Model.Top1 {
		t.Errorf("manifest validation: %+v, report %+v", v, res.Validation)
	}
}

// TestConvertGroupSizeLimit: a group size that would size huge buffers is
// refused by name.
func TestConvertGroupSizeLimit(t *testing.T) {
	src := writeSource(t, fixture.Llama(), nil)
	for _, o := range []Options{{GroupSize: 1 << 30}, {TableGroupSize: 2147483616}} {
		o.Source, o.Out, o.Bits = src, filepath.Join(t.TempDir(), "out"), "4"
		_, err := Run(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "over the limit of 65536") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// appearWriter creates a directory at path on its first write: something
// appearing at --out while the conversion runs (its progress is written
// while it quantizes).
type appearWriter struct {
	once sync.Once
	path string
	make func(path string) error
}

func (w *appearWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { w.make(w.path) })
	return len(p), nil
}

// TestConvertNeverDeletesWhatItDidNotCreate covers --out against the source,
// a directory that appears while converting, and what --force may replace.
func TestConvertNeverDeletesWhatItDidNotCreate(t *testing.T) {
	src := writeSource(t, fixture.Llama(), nil)
	theirs := func(path string) error {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(path, "theirs.txt"), []byte("keep me"), 0o644)
	}
	intact := func(t *testing.T, path string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(path, "theirs.txt")); err != nil || string(b) != "keep me" {
			t.Errorf("%s was changed: %q %v", path, b, err)
		}
	}
	run := func(out string, force bool, progress io.Writer) error {
		_, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "8", Force: force, NoValidate: true, Progress: progress})
		return err
	}

	t.Run("out is the source", func(t *testing.T) {
		for _, out := range []string{src, filepath.Dir(src), src + "/."} {
			for _, force := range []bool{false, true} {
				if err := run(out, force, nil); err == nil || !strings.Contains(err.Error(), "source model's directory") {
					t.Errorf("--out %s --force=%v: %v", out, force, err)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(src, "model.safetensors")); err != nil {
			t.Fatal("the source is damaged")
		}
	})
	t.Run("force replaces only a lowbit model", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		theirs(out)
		if err := run(out, true, nil); err == nil || !strings.Contains(err.Error(), "not a lowbit model directory") {
			t.Errorf("--force onto a plain directory: %v", err)
		}
		intact(t, out)
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, []byte("x"), 0o644)
		if err := run(file, true, nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("--force onto a file: %v", err)
		}
	})
	t.Run("appeared while converting", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		err := run(out, false, &appearWriter{path: out, make: theirs})
		if err == nil || !strings.Contains(err.Error(), "appeared while converting") {
			t.Fatalf("got %v", err)
		}
		intact(t, out)
		// With --force too, what appeared is replaced only if it is a lowbit model.
		out2 := filepath.Join(t.TempDir(), "out")
		if err := run(out2, true, &appearWriter{path: out2, make: theirs}); err == nil || !strings.Contains(err.Error(), "not a lowbit model directory") {
			t.Fatalf("--force: got %v", err)
		}
		intact(t, out2)
		for _, dir := range []string{filepath.Dir(out), filepath.Dir(out2)} {
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("%s holds %d entries: a temporary directory was left", dir, len(ents))
			}
		}
	})
	t.Run("two conversions to one out", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		// The second conversion finishes while the first is quantizing.
		err := run(out, false, &appearWriter{path: out, make: func(path string) error { return run(path, false, nil) }})
		if err == nil || !strings.Contains(err.Error(), "appeared while converting") {
			t.Fatalf("got %v", err)
		}
		if _, err := manifest.Read(out); err != nil {
			t.Errorf("the first finished model was damaged: %v", err)
		}
	})
	t.Run("stale partial removed", func(t *testing.T) {
		parent := t.TempDir()
		dead := filepath.Join(parent, ".old.partial-0123")
		os.Mkdir(dead, 0o755)
		os.WriteFile(filepath.Join(dead, ".lowbit-partial"), nil, 0o644)
		if err := run(filepath.Join(parent, "out"), false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a dead conversion's directory was kept: %v", err)
		}
	})
}

// TestConvertHugeWeights: a finite weight too large for the format's scales
// is refused by tensor, place and limit, not as a NaN error or a JSON one.
func TestConvertHugeWeights(t *testing.T) {
	for _, tc := range []struct {
		value float32
		bits  string
		want  string
	}{
		{1e10, "4", "weight 1e+10 at row 0, column 7 is out of range for q4"},
		{3e38, "8", "out of range for q8"},
		{1e10, "f16", "1e+10"},
	} {
		src := writeSource(t, fixture.Llama(), func(dir string) error {
			setWeight(t, dir, "model.layers.1.mlp.up_proj.weight", tc.value)
			return nil
		})
		_, err := Run(context.Background(), Options{Source: src, Out: filepath.Join(t.TempDir(), "out"), Bits: tc.bits})
		if err == nil || !strings.Contains(err.Error(), "model.layers.1.mlp.up_proj.weight") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%g at %s bits: %v", tc.value, tc.bits, err)
		}
	}
}
