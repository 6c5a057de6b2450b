package bench

import (
	"context"
	"math"
	"testing"

	"lowbit/half"
	"lowbit/internal/fixture"
	"lowbit/model"
	"lowbit/quantize"
)

func TestRandomTensor(t *testing.T) {
	for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2} {
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
		if err := shapeConfigs[name].Check(); err != nil {
			t.Fatalf("%s: %v", name, err)
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
