package validate_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/convert"
	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
	"lowbit/validate"
)

// bitnetSpec is a small random BitNet whose vocabulary is stories260K's,
// so its tokenizer can serve it.
func bitnetSpec() fixture.Spec {
	return fixture.Spec{Arch: "BitNetForCausalLM", Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2,
		HeadDim: 16, Vocab: 512, Tied: true, Seed: 7}
}

// TestTernarizeLinears checks that every linear weight of the reference
// becomes its tq2 ternarization in floats (S·t: at most three values, the
// ones tq2 dequantizes to) and that the embedding and norms are left as
// they were.
func TestTernarizeLinears(t *testing.T) {
	dir := t.TempDir()
	if err := bitnetSpec().Write(dir); err != nil {
		t.Fatal(err)
	}
	m := load(t, dir)
	before := map[string]*model.Weight{}
	for n, w := range m.Weights {
		before[n] = w
	}
	ctx := context.Background()
	if err := validate.TernarizeLinears(ctx, m); err != nil {
		t.Fatal(err)
	}
	linears := 0
	for n, w := range m.Weights {
		orig := before[n]
		if m.Config.TensorRole(n) != model.RoleLinear {
			if w != orig {
				t.Errorf("%s (%s) changed", n, m.Config.TensorRole(n))
			}
			continue
		}
		linears++
		q, err := quantize.Quantize(ctx, quantize.TQ2, orig.F32, orig.Rows, orig.Cols, quantize.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(w.F32, q.Dequantize()) {
			t.Fatalf("%s is not tq2's ternarization", n)
		}
		values := map[float32]bool{}
		for _, v := range w.F32 {
			values[v] = true
		}
		if len(values) > 3 || len(values) < 2 {
			t.Errorf("%s holds %d distinct values, want S·{-1, 0, 1}", n, len(values))
		}
	}
	if want := 7 * m.Config.NumLayers; linears != want {
		t.Errorf("ternarized %d linear weights, want %d", linears, want)
	}
}

// TestModelDirTernary converts a random BitNet to tq2 and checks that
// ModelDir measures it against its ternarized original, with the 99%
// top-1 bar, and that this leaves out the ternarization's own cost: the
// divergence from the ternarized reference is well below the divergence
// from the raw float one. (stories260K's tokenizer serves the model, so
// the test skips without ../shared.)
func TestModelDirTernary(t *testing.T) {
	stories := testmodels.Path(t, "stories260K-hf")
	src := filepath.Join(t.TempDir(), "bitnet")
	if err := bitnetSpec().Write(src); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.model", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(stories, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "q")
	ctx := context.Background()
	if _, err := convert.Run(ctx, convert.Options{Source: src, Out: out, Bits: "ternary", Workers: 2, NoValidate: true}); err != nil {
		t.Fatal(err)
	}
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun."
	rep, ref, err := validate.ModelDir(ctx, out, validate.DirOptions{Reference: src, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	if ref != src || rep.Format != "tq2" || rep.ReferenceWeights != validate.ReferenceTernary {
		t.Errorf("reference %s, format %s, reference weights %q", ref, rep.Format, rep.ReferenceWeights)
	}
	if rep.Thresholds != validate.TernaryThresholds() || rep.Thresholds.MinTop1 != 0.99 {
		t.Errorf("thresholds %+v, want TernaryThresholds (top-1 99%%)", rep.Thresholds)
	}
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := validate.CompareModels(ctx, load(t, out), load(t, src), tok, validate.ModelOptions{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("against the ternarized reference: KLD mean %.5f, top-1 %.1f%%; against the float one: KLD mean %.5f, top-1 %.1f%%",
		rep.KLDMean, 100*rep.Top1, raw.KLDMean, 100*raw.Top1)
	if !(rep.KLDMean < raw.KLDMean/4) {
		t.Errorf("KLD against the ternarized reference %.5f is not well below the float one's %.5f", rep.KLDMean, raw.KLDMean)
	}
	// The text report says what the reference was.
	r := &validate.Report{Model: rep, ModelDir: out, Reference: ref, Status: rep.Status}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), validate.ReferenceTernary) {
		t.Errorf("text report does not name the ternarized reference:\n%s", b.String())
	}
	b.Reset()
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "ternarized") {
		t.Error("HTML report does not name the ternarized reference")
	}
}
