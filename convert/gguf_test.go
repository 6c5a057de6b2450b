package convert

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/gguf"
	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/quantize"
)

// patchConfig changes keys of a written fixture's config.json.
func patchConfig(t *testing.T, dir string, set map[string]any) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		c[k] = v
	}
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ggufSpec is a family's fixture with rows of whole blocks of 32 and four
// layers, and the config changes that make it a model llama.cpp computes
// alike (Gemma 2's attention scale, SmolLM3's every fourth layer without
// rotation).
func ggufSpec(s fixture.Spec) (fixture.Spec, map[string]any) {
	s.Hidden, s.Intermediate, s.Heads, s.KVHeads, s.HeadDim, s.Vocab, s.Layers = 64, 96, 4, 2, 16, 128, 4
	switch s.Arch {
	case "Gemma2ForCausalLM":
		return s, map[string]any{"query_pre_attn_scalar": s.HeadDim}
	case "SmolLM3ForCausalLM":
		return s, map[string]any{"no_rope_layers": []int{1, 1, 1, 0}}
	}
	return s, nil
}

// convertFor converts a fixture with config changes into a lowbit directory.
func convertFor(t *testing.T, s fixture.Spec, patch map[string]any, opts Options) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := s.Write(src); err != nil {
		t.Fatal(err)
	}
	if patch != nil {
		patchConfig(t, src, patch)
	}
	opts.Source, opts.Out, opts.NoValidate = src, filepath.Join(t.TempDir(), "out"), true
	if _, err := Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	return opts.Out
}

// fileLogits runs tokens through a model on the CPU and returns every
// position's logits.
func fileLogits(t *testing.T, path string, tokens []int) ([]float32, *model.Model) {
	t.Helper()
	m, err := model.Load(context.Background(), path, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Backend: model.NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.ForwardAll(context.Background(), tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits, m
}

var ggufTokens = []int{1, 7, 50, 3, 95, 12, 40, 2, 66, 101, 17, 9}

// TestExportGGUFFamilies exports every family llama.cpp computes alike at
// q8 and q4 and loads the file back: the model read from the GGUF gives
// exactly the logits of the lowbit directory it was exported from, on the
// CPU (the same values in the same products).
func TestExportGGUFFamilies(t *testing.T) {
	ctx := context.Background()
	for _, base := range fixture.Families() {
		s, patch := ggufSpec(base)
		for _, bits := range []string{"8", "4"} {
			t.Run(s.Arch+"/q"+bits, func(t *testing.T) {
				dir := convertFor(t, s, patch, Options{Bits: bits, TableGroupSize: 32})
				out := filepath.Join(t.TempDir(), "m.gguf")
				res, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out})
				if s.Arch == "BitNetForCausalLM" {
					if err == nil || !strings.Contains(err.Error(), "SiLU") {
						t.Fatalf("bitnet: error %v, want one saying llama.cpp computes SiLU", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]gguf.GGMLType{"8": gguf.Q8_0, "4": gguf.Q4_1}[bits]
				if res.Types[want.String()] == 0 || res.Types["F32"] == 0 || len(res.Requantized) > 0 {
					t.Errorf("types %v, requantized %v", res.Types, res.Requantized)
				}
				got, gm := fileLogits(t, out, ggufTokens)
				ref, lm := fileLogits(t, dir, ggufTokens)
				if len(got) != len(ref) {
					t.Fatalf("%d logits, want %d", len(got), len(ref))
				}
				for i := range got {
					if got[i] != ref[i] {
						t.Fatalf("logit %d: gguf %v, lowbit %v (config read %+v, lowbit %+v)", i, got[i], ref[i], gm.Config, lm.Config)
					}
				}
				for name, w := range lm.Weights {
					if gw := gm.Weights[name]; gw == nil || gw.Format() != w.Format() {
						t.Errorf("%s: read back as %v, was %s", name, gw, w.Format())
					}
				}
			})
		}
	}
}

// TestExportGGUFFallbacks covers what no block of its type holds: rows of
// 48 weights (fixture.Llama) become floats holding the same values; the
// 8-bit tables' default group of 128 is refused, naming Q8_0 at group 32,
// and written with Requantize; q1 at group 128 is Q1_0; tq2 is TQ2_0 where
// its scale is an f16.
func TestExportGGUFFallbacks(t *testing.T) {
	ctx := context.Background()
	t.Run("rows of 48", func(t *testing.T) {
		dir := convertFor(t, fixture.Llama(), nil, Options{Bits: "4", TableGroupSize: 32})
		out := filepath.Join(t.TempDir(), "m.gguf")
		res, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if res.Types["Q4_1"]+res.Types["Q8_0"] > 0 || len(res.Notes) == 0 {
			t.Errorf("types %v, notes %v", res.Types, res.Notes)
		}
		got, _ := fileLogits(t, out, ggufTokens[:6])
		ref, _ := fileLogits(t, dir, ggufTokens[:6])
		if e := quantize.RelL2(ref, got); e > 1e-6 {
			t.Errorf("logits differ by %.3g", e)
		}
	})
	s, _ := ggufSpec(fixture.Llama())
	t.Run("table group 128", func(t *testing.T) {
		dir := convertFor(t, s, nil, Options{Bits: "4"})
		out := filepath.Join(t.TempDir(), "m.gguf")
		_, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out})
		if !errors.Is(err, ErrNoExactType) || !strings.Contains(err.Error(), "model.embed_tokens.weight (q8: Q8_0 holds groups of 32, this tensor has groups of 128") {
			t.Fatalf("error %v", err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("a refused export left %s", out)
		}
		res, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out, Requantize: true})
		if err != nil && !errors.Is(err, ErrValidation) { // random weights may fail the bars
			t.Fatal(err)
		}
		if res.Validation == nil || res.Validation.Model == nil || res.Validation.Model.Tokens == 0 {
			t.Errorf("the requantized file was not validated against its source: %+v", res.Validation)
		}
		if len(res.Requantized) != 2 {
			t.Errorf("requantized %v, want the embedding and the head", res.Requantized)
		}
		f, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if r, err := f.Strings("lowbit.requantized"); err != nil || len(r) != 2 {
			t.Errorf("lowbit.requantized %v (%v)", r, err)
		}
		got, _ := fileLogits(t, out, ggufTokens)
		ref, _ := fileLogits(t, dir, ggufTokens)
		if e := quantize.RelL2(ref, got); !(e > 0 && e < 0.05) {
			t.Errorf("requantized logits differ by %.3g", e)
		}
	})
	t.Run("q1 at group 128", func(t *testing.T) {
		q1 := s
		q1.Hidden, q1.Intermediate, q1.Heads, q1.HeadDim = 128, 256, 4, 32
		dir := convertFor(t, q1, nil, Options{Bits: "1", GroupSize: 128, TableGroupSize: 32})
		out := filepath.Join(t.TempDir(), "m.gguf")
		res, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if res.Types["Q1_0"] != 7*q1.Layers {
			t.Errorf("types %v", res.Types)
		}
		got, _ := fileLogits(t, out, ggufTokens)
		ref, _ := fileLogits(t, dir, ggufTokens)
		if e := quantize.RelL2(ref, got); e != 0 {
			t.Errorf("logits differ by %.3g", e)
		}
	})
	t.Run("tq2", func(t *testing.T) {
		tq := s
		tq.Hidden, tq.Intermediate, tq.Heads, tq.HeadDim = 256, 512, 4, 64
		dir := convertFor(t, tq, nil, Options{Bits: "ternary", TableGroupSize: 32})
		out := filepath.Join(t.TempDir(), "m.gguf")
		_, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out})
		if !errors.Is(err, ErrNoExactType) || !strings.Contains(err.Error(), "TQ2_0 holds an f16 scale") {
			t.Fatalf("error %v", err)
		}
		res, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out, Requantize: true, NoValidate: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Types["TQ2_0"] != 7*tq.Layers {
			t.Errorf("types %v", res.Types)
		}
		// The scale moves by at most 2^-12 of itself, which can move a
		// rounding of the int8 activations of the next product.
		got, gm := fileLogits(t, out, ggufTokens)
		ref, lm := fileLogits(t, dir, ggufTokens)
		if e := quantize.RelL2(ref, got); !(e > 0 && e < 0.05) {
			t.Errorf("logits differ by %.3g", e)
		}
		// The codes are the lowbit model's, the scale its f16.
		name := "model.layers.1.mlp.down_proj.weight"
		a, b := gm.Weights[name].Q, lm.Weights[name].Q
		for r := range 3 {
			ca, cb := a.RowCodes(r), b.RowCodes(r)
			for c := range ca {
				if ca[c] != cb[c] {
					t.Fatalf("%s row %d col %d: code %d, want %d", name, r, c, ca[c], cb[c])
				}
			}
		}
	})
}

// TestExportGGUFRefuses: an existing file without Force, a name without
// .gguf, a family llama.cpp computes otherwise.
func TestExportGGUFRefuses(t *testing.T) {
	ctx := context.Background()
	s, _ := ggufSpec(fixture.Llama())
	dir := convertFor(t, s, nil, Options{Bits: "8", TableGroupSize: 32})
	tmp := t.TempDir()
	exists := filepath.Join(tmp, "x.gguf")
	if err := os.WriteFile(exists, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts GGUFOptions
		want string
	}{
		{"exists", GGUFOptions{Out: exists}, "already exists"},
		{"no suffix", GGUFOptions{Out: filepath.Join(tmp, "x.bin")}, "ends in .gguf"},
		{"directory", GGUFOptions{Out: filepath.Join(tmp, "d.gguf"), Force: true}, "not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "directory" {
				os.Mkdir(c.opts.Out, 0o755)
			}
			if _, err := ExportGGUF(ctx, dir, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	if b, _ := os.ReadFile(exists); string(b) != "keep" {
		t.Error("a refused export changed the existing file")
	}
	if _, err := ExportGGUF(ctx, dir, GGUFOptions{Out: exists, Force: true}); err != nil {
		t.Errorf("--force: %v", err)
	}
}

// TestExportGGUFStories exports stories260K (rows of 172 weights in its
// MLP) at q8 and q4: the file reads back with the lowbit model's logits.
func TestExportGGUFStories(t *testing.T) {
	src := testmodels.Path(t, "stories260K-hf")
	ctx := context.Background()
	for _, bits := range []string{"8", "4"} {
		t.Run("q"+bits, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			if _, err := Run(ctx, Options{Source: src, Out: dir, Bits: bits, TableGroupSize: 32, NoValidate: true}); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "s.gguf")
			if _, err := ExportGGUF(ctx, dir, GGUFOptions{Out: out}); err != nil {
				t.Fatal(err)
			}
			tokens := []int{1, 403, 407, 261, 378, 430, 267, 302, 318, 275, 400, 261, 291, 389, 290, 353}
			got, _ := fileLogits(t, out, tokens)
			ref, _ := fileLogits(t, dir, tokens)
			if e := quantize.RelL2(ref, got); e != 0 {
				t.Errorf("logits differ by %.3g", e)
			}
		})
	}
}

// TestRunGGUF converts straight to GGUF: tq2's scale is made an f16 so
// TQ2_0 holds it exactly, q1 takes groups of 128, the tables groups of 32,
// each said in a note; a family llama.cpp computes otherwise is refused
// before anything is quantized.
func TestRunGGUF(t *testing.T) {
	ctx := context.Background()
	s, _ := ggufSpec(fixture.Llama())
	s.Hidden, s.Intermediate, s.HeadDim = 256, 512, 64
	src := filepath.Join(t.TempDir(), "src")
	if err := s.Write(src); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bits, typ, note string
	}{
		{"ternary", "TQ2_0", "groups of 32"},
		{"1", "Q1_0", "groups of 128"},
	} {
		t.Run(c.bits, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.gguf")
			res, err := Run(ctx, Options{Source: src, Out: out, Bits: c.bits, GGUF: true, NoValidate: true})
			if err != nil {
				t.Fatal(err)
			}
			g := res.GGUF
			if res.OutDir != out || g == nil || g.Types[c.typ] != 7*s.Layers || len(g.Requantized) > 0 || !strings.Contains(strings.Join(res.Notes, "\n"), c.note) {
				t.Fatalf("result %+v, gguf %+v", res, g)
			}
			entries, _ := os.ReadDir(filepath.Dir(out))
			if len(entries) != 1 {
				t.Errorf("beside the file: %v (the temporary lowbit directory should be gone)", entries)
			}
			if _, err := model.Load(ctx, out, model.LoadOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	b := fixture.Llama()
	b.Arch = "BitNetForCausalLM"
	bsrc := filepath.Join(t.TempDir(), "bitnet")
	if err := b.Write(bsrc); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "b.gguf")
	if _, err := Run(ctx, Options{Source: bsrc, Out: out, GGUF: true, NoValidate: true}); err == nil || !strings.Contains(err.Error(), "SiLU") {
		t.Errorf("bitnet to GGUF: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused conversion left %s", out)
	}
}
