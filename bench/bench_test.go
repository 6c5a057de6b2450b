package bench

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"lowbit/half"
	"lowbit/internal/fixture"
	"lowbit/model"
	"lowbit/quantize"
)

func TestRandomTensor(t *testing.T) {
	for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2, quantize.Q5_0, quantize.Q4K, quantize.Q6K, quantize.Q2S, quantize.Q4S} {
		a, err := randomTensor(f, 5, 256, f.DefaultGroupSize(), 3)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b, _ := randomTensor(f, 5, 256, f.DefaultGroupSize(), 3)
		if string(a.Data) != string(b.Data) {
			t.Fatalf("%s: same seed, different codes", f)
		}
		row := make([]float32, 256)
		a.DequantizeRow(4, row)
		var ss float64
		for _, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: weight %v", f, v)
			}
			ss += float64(v) * float64(v)
		}
		if ss == 0 || ss > 16 {
			t.Fatalf("%s: row norm² %v, want small and non-zero", f, ss)
		}
	}
}

func TestRandomModelUnknownShape(t *testing.T) {
	if _, err := RandomModel(context.Background(), "gpt-5", quantize.Q4, 1); err == nil {
		t.Fatal("unknown shape accepted")
	}
	if _, err := RandomModel(context.Background(), "tinyllama", quantize.F32, 1); err == nil {
		t.Fatal("f32 accepted")
	}
	for _, name := range Shapes() {
		if err := shapeConfigs()[name].Check(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestShapes pins the names --shape offers (the README and bench's help
// list them).
func TestShapes(t *testing.T) {
	want := "bitnet-2b gemma2-9b llama2-7b llama3.1-8b phi3.5-mini qwen2.5-7b qwen3-8b tinyllama"
	if got := strings.Join(Shapes(), " "); got != want {
		t.Fatalf("Shapes() = %s, want %s", got, want)
	}
}

// TestShapeParams checks each shape's figures through its parameter count,
// the tensors its config expects summed, against the published count: a
// mistyped width, depth or vocabulary shows. The tolerance leaves room for
// a family's biases and extra norms, which the config's tensor list may
// not name yet. Exact figures are Keras-Hub's presets
// (keras_hub/src/models/*/*_presets.py), which build each model and count
// its weights.
func TestShapeParams(t *testing.T) {
	tests := []struct {
		shape string
		want  float64
	}{
		{"tinyllama", 1.1e9},        // TinyLlama-1.1B
		{"llama2-7b", 6738415616},   // llama2_7b_en
		{"llama3.1-8b", 8030261248}, // llama3_8b_en: Llama 3.1 8B has Llama 3 8B's shape
		{"qwen2.5-7b", 7615616512},  // qwen2.5_math_instruct_7b_en, Qwen2.5-7B's shape (its card: 7.61B)
		{"qwen3-8b", 8190735360},    // qwen3_8b_en
		{"gemma2-9b", 9241705984},   // gemma2_instruct_9b_en
		{"phi3.5-mini", 3821079552}, // phi3_mini_4k_instruct_en: Phi-3.5-mini has Phi-3-mini's shape
		// bitnet-2b is left out: its card gives only "~2B" (2.41B here,
		// 2.08B without the embedding), too coarse to check a shape.
	}
	seen := map[string]bool{"bitnet-2b": true}
	for _, tc := range tests {
		seen[tc.shape] = true
		cfg, ok := shapeConfigs()[tc.shape]
		if !ok {
			t.Errorf("%s: no such shape", tc.shape)
			continue
		}
		var n float64
		for _, name := range cfg.ExpectedTensors() {
			shp := cfg.TensorShape(name)
			if len(shp) == 0 {
				t.Fatalf("%s: %s has no shape", tc.shape, name)
			}
			size := 1.0
			for _, d := range shp {
				size *= float64(d)
			}
			n += size
		}
		if math.Abs(n/tc.want-1) > 0.01 {
			t.Errorf("%s: %.0f parameters, want %.0f (±1%%)", tc.shape, n, tc.want)
		}
	}
	for _, name := range Shapes() {
		if !seen[name] {
			t.Errorf("%s: no published parameter count to check its shape against", name)
		}
	}
}

// TestEvenLayerWindows checks Gemma 2's pattern: the window on layers 0,
// 2, 4, ..., full attention on the odd ones.
func TestEvenLayerWindows(t *testing.T) {
	got := evenLayerWindows(5, 4096)
	if want := []int{4096, 0, 4096, 0, 4096}; !slices.Equal(got, want) {
		t.Fatalf("evenLayerWindows(5, 4096) = %v, want %v", got, want)
	}
	if w := shapeConfigs()["gemma2-9b"].LayerWindows; len(w) != 42 || w[0] != 4096 || w[41] != 0 {
		t.Fatalf("gemma2-9b windows %v", w)
	}
}

// TestVector checks the 1-D tensors RandomModel makes for any name: biases
// zero, gains one, or zero where the model scales by 1 + w.
func TestVector(t *testing.T) {
	plain, gemma := model.Config{}, model.Config{NormPlusOne: true}
	tests := []struct {
		cfg  model.Config
		name string
		want float32
	}{
		{plain, "model.layers.0.input_layernorm.weight", 1},
		{plain, "model.layers.3.self_attn.q_norm.weight", 1},
		{plain, "model.layers.0.self_attn.q_proj.bias", 0},
		{plain, "model.layers.0.self_attn.v_proj.bias", 0},
		{gemma, "model.layers.0.pre_feedforward_layernorm.weight", 0},
		{gemma, "model.norm.weight", 0},
	}
	for _, tc := range tests {
		v := vector(tc.cfg, tc.name, 3)
		if len(v) != 3 || v[0] != tc.want || v[2] != tc.want {
			t.Errorf("vector(%s) = %v, want all %v", tc.name, v, tc.want)
		}
	}
}

func TestMeanSD(t *testing.T) {
	for _, tc := range []struct {
		x        []float64
		mean, sd float64
	}{
		{[]float64{5}, 5, 0},
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, math.Sqrt(32.0 / 7)},
	} {
		m, s := meanSD(tc.x)
		if math.Abs(m-tc.mean) > 1e-12 || math.Abs(s-tc.sd) > 1e-12 {
			t.Fatalf("meanSD(%v) = %v, %v; want %v, %v", tc.x, m, s, tc.mean, tc.sd)
		}
	}
}

// TestRunCPU benchmarks a fixture model on the CPU: both tests, positive
// speeds, a sample per repetition, weight bytes without the embedding.
func TestRunCPU(t *testing.T) {
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Quantize(ctx, quantize.Q4, quantize.Options{}, 0); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, m, nil, "fixture", Options{Prompt: 16, Gen: 8, Reps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tests) != 2 || res.Tests[0].Test != "pp16" || res.Tests[1].Test != "tg8" {
		t.Fatalf("tests %+v", res.Tests)
	}
	for _, st := range res.Tests {
		if len(st.Samples) != 3 || !(st.Mean > 0) {
			t.Fatalf("%s: %+v", st.Test, st)
		}
	}
	if res.Format != "q4" || res.Device != "cpu" || res.Memory != nil {
		t.Fatalf("result %+v", res)
	}
	embed := m.Weights["model.embed_tokens.weight"].Bytes()
	if res.WeightBytes != m.WeightBytes()-embed || !(res.Bandwidth > 0) {
		t.Fatalf("weight bytes %d (model %d, embedding %d), bandwidth %v", res.WeightBytes, m.WeightBytes(), embed, res.Bandwidth)
	}
	if _, err := Run(ctx, m, nil, "fixture", Options{}); err == nil {
		t.Fatal("nothing to measure accepted")
	}
	// At a depth the tests are named as llama-bench names them and run
	// after that many tokens; a depth beyond the model's context is refused.
	res, err = Run(ctx, m, nil, "fixture", Options{Prompt: 4, Gen: 4, Depth: 20, Reps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tests) != 2 || res.Tests[0].Test != "pp4 @ d20" || res.Tests[1].Test != "tg4 @ d20" {
		t.Fatalf("tests at depth %+v", res.Tests)
	}
	if _, err := Run(ctx, m, nil, "fixture", Options{Gen: 4, Depth: m.Config.MaxPositions}); err == nil {
		t.Fatal("depth beyond the context accepted")
	}
	// Sampled generation is its own test, as many steps as greedy's.
	sampling := &model.SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9}
	res, err = Run(ctx, m, nil, "fixture", Options{Gen: 8, Depth: 20, Reps: 2, Sampling: sampling})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tests) != 1 || res.Tests[0].Test != "tg8 sampled @ d20" || len(res.Tests[0].Samples) != 2 || !(res.Tests[0].Mean > 0) {
		t.Fatalf("sampled tests %+v", res.Tests)
	}
	if _, err := Run(ctx, m, nil, "fixture", Options{Gen: 4, Reps: 1, Sampling: &model.SamplerOptions{Temperature: 1, TopP: 2}}); err == nil {
		t.Fatal("a sampler out of range accepted")
	}
	// Batch sizes replace tg with one test each, of B×n tokens.
	res, err = Run(ctx, m, nil, "fixture", Options{Gen: 6, Depth: 9, Reps: 2, Batches: []int{1, 3, 8}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range res.Tests {
		names = append(names, st.Test)
		if len(st.Samples) != 2 || !(st.Mean > 0) {
			t.Errorf("%s: %+v", st.Test, st)
		}
	}
	if strings.Join(names, ", ") != "tg6 b1 @ d9, tg6 b3 @ d9, tg6 b8 @ d9" || res.Tests[2].Tokens != 48 || !(res.Bandwidth > 0) {
		t.Fatalf("batched tests %v, %+v", names, res.Tests)
	}
	for _, o := range []Options{{Gen: 4, Batches: []int{0}}, {Gen: 4, Batches: []int{2}, Sampling: sampling}, {Prompt: 4, Batches: []int{2}}} {
		if _, err := Run(ctx, m, nil, "fixture", o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestRandomModelTernaryHead checks that the BitNet shape in tq2 keeps its
// tied embedding table and head at 8 bits, as conversion makes them, so
// the weight bytes a token reads match the real model's.
func TestRandomModelTernaryHead(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 2B-parameter random model")
	}
	m, err := RandomModel(context.Background(), "bitnet-2b", quantize.TQ2, 1)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Weights["model.embed_tokens.weight"]
	if e == nil || e.Q == nil || e.Q.Format != quantize.Q8 {
		t.Fatalf("embedding/head %+v, want q8", e)
	}
	if q := m.Weights["model.layers.0.mlp.down_proj.weight"]; q == nil || q.Q == nil || q.Q.Format != quantize.TQ2 {
		t.Fatalf("down_proj not tq2")
	}
}

// TestRandomHalf checks the f16 random weights: exactly representable in
// f16, marked Half (2 bytes a value), small and not all zero.
func TestRandomHalf(t *testing.T) {
	w := randomHalf(3, 64, 1)
	if !w.Half || w.Format() != quantize.F16 || w.Bytes() != 3*64*2 {
		t.Fatalf("weight %v %s %d bytes", w.Half, w.Format(), w.Bytes())
	}
	var ss float64
	for _, v := range w.F32 {
		if half.Round16(v) != v {
			t.Fatalf("%v is not an f16 value", v)
		}
		ss += float64(v) * float64(v)
	}
	if ss == 0 || ss > 3 {
		t.Fatalf("sum of squares %v", ss)
	}
}
