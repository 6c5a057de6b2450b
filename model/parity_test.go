package model

import (
	"context"
	"slices"
	"testing"

	"lowbit/internal/paritygen"
	"lowbit/quantize"
)

// Parity with HuggingFace transformers: testdata/parity holds the FP32
// logits transformers 5.17 computed (gen.py) for random-weight models with
// the exact shapes of TinyLlama-1.1B, Mistral-7B, Gemma-2B and
// BitNet-b1.58-2B-4T (fewer layers, vocab 320), small models for the
// sliding window and rope scaling, one small model per family feature
// (Qwen2, Qwen3, Gemma 2 and 3, Phi-3, Mistral v0.3, SmolLM3, YaRN), and
// the real stories260K. The random weights are rebuilt here bit for bit by
// the generator gen.py documents (internal/paritygen).

const parityDir = paritygen.Dir

// parityWeights builds the tensor as gen.py does.
func parityWeights(name string, shape []int64) *Weight {
	rows, cols, w := paritygen.Tensor(name, shape)
	return FloatWeight(rows, cols, w)
}

// readParity reads name's record and logits, skipping t when gen.py has
// not written them yet.
func readParity(t *testing.T, name string) (paritygen.Record, []float32) {
	t.Helper()
	return paritygen.ReadOrSkip(t, parityDir, name)
}

// parityModel builds the random model of rec as gen.py built it for
// transformers, after checking lowbit expects the tensors transformers has.
func parityModel(t *testing.T, rec paritygen.Record) *Model {
	t.Helper()
	cfg, err := ParseHFConfig(rec.Config)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() && cfg.HiddenSize > 256 {
		t.Skip("large shapes skipped in -short")
	}
	if err := rec.CheckTensors(cfg.ExpectedTensors(), cfg.TensorShape); err != nil {
		t.Fatal(err)
	}
	weights := map[string]*Weight{}
	for _, n := range cfg.ExpectedTensors() {
		weights[n] = parityWeights(n, cfg.TensorShape(n))
	}
	m, err := New(cfg, weights)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkParity runs tokens through the model in one batch and in small
// batches, compares every position's logits with transformers', and
// replays the greedy continuation.
func checkParity(t *testing.T, m *Model, rec paritygen.Record, want []float32) {
	ctx := context.Background()
	v := m.Config.VocabSize
	if len(want) != len(rec.Tokens)*v {
		t.Fatalf("%d logits for %d tokens of vocab %d", len(want), len(rec.Tokens), v)
	}
	// The session holds what the test runs, as transformers' forward
	// covers only those positions: longrope picks its factors by the
	// context, which then matches transformers' length.
	positions := min(max(len(rec.Tokens), len(rec.Prompt)+len(rec.Greedy)), m.Config.MaxPositions)
	for _, batch := range []int{64, 3} {
		s, err := m.NewSession(SessionOptions{Batch: batch, Context: positions, KVCache: KVF32})
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.ForwardAll(ctx, rec.Tokens, false)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for p := range rec.Tokens {
			e := quantize.RelL2(want[p*v:(p+1)*v], out.Logits[p*v:(p+1)*v])
			if !(e <= 1e-4) {
				t.Errorf("batch %d: position %d: rel L2 %.3g", batch, p, e)
			}
			worst = max(worst, e)
		}
		t.Logf("batch %d: worst rel L2 over %d positions %.3g", batch, len(rec.Tokens), worst)
	}
	s, err := m.NewSession(SessionOptions{Context: positions, KVCache: KVF32})
	if err != nil {
		t.Fatal(err)
	}
	st, err := Generate(ctx, s, rec.Prompt, GenerateOptions{MaxTokens: len(rec.Greedy)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Tokens, rec.Greedy) {
		t.Errorf("greedy %v, transformers %v", st.Tokens, rec.Greedy)
	}
}

// TestParityRandomModels replays every random model of gen.py; a case
// gen.py has not run yet is skipped.
func TestParityRandomModels(t *testing.T) {
	for _, name := range paritygen.RandomModels() {
		t.Run(name, func(t *testing.T) {
			rec, want := readParity(t, name)
			checkParity(t, parityModel(t, rec), rec, want)
		})
	}
}

func TestParityStories260K(t *testing.T) {
	m, _ := loadStories(t)
	for _, name := range []string{"stories260K", "stories260K_prompt"} {
		t.Run(name, func(t *testing.T) {
			rec, want := readParity(t, name)
			checkParity(t, m, rec, want)
		})
	}
}
