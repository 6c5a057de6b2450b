package model

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lowbit/quantize"
)

// Parity with HuggingFace transformers: testdata/parity holds the FP32
// logits transformers 5.17 computed (gen.py) for random-weight models with
// the exact shapes of TinyLlama-1.1B, Mistral-7B, Gemma-2B and
// BitNet-b1.58-2B-4T (fewer layers, vocab 320), small models for the
// sliding window and rope scaling, and the real stories260K. The random
// weights are rebuilt here bit for bit by the generator gen.py documents.

const parityDir = "../testdata/parity"

// parityRecord is <name>.json.
type parityRecord struct {
	Config json.RawMessage `json:"config"`
	Prompt []int           `json:"prompt"`
	Tokens []int           `json:"tokens"`
	Greedy []int           `json:"greedy"`
}

// splitmixUniform is gen.py's generator: v_i in [-1, 1) for tensor name.
func splitmixUniform(name string, n int) []float32 {
	key := uint64(0xCBF29CE484222325)
	for _, b := range []byte(name) {
		key = (key ^ uint64(b)) * 0x100000001B3
	}
	out := make([]float32, n)
	for i := range out {
		z := key + uint64(i+1)*0x9E3779B97F4A7C15
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		u := float32(z>>40) * (1.0 / (1 << 24))
		out[i] = u*2 - 1
	}
	return out
}

// parityWeights builds the tensor as gen.py does.
func parityWeights(name string, shape []int64) *Weight {
	if len(shape) == 1 {
		w := splitmixUniform(name, int(shape[0]))
		for i, v := range w {
			w[i] = float32(float32(0.1)*v) + 1
		}
		return FloatWeight(1, len(w), w)
	}
	rows, cols := int(shape[0]), int(shape[1])
	w := splitmixUniform(name, rows*cols)
	s := float32(1 / math.Sqrt(float64(cols)))
	for i, v := range w {
		w[i] = v * s
	}
	return FloatWeight(rows, cols, w)
}

func TestParityGenerator(t *testing.T) {
	// Values gen.py printed on the device (gen.log).
	norm := parityWeights("model.norm.weight", []int64{4}).F32
	head := parityWeights("lm_head.weight", []int64{2, 3}).F32
	wantNorm := []float64{0.9097375869750977, 0.9275640249252319, 0.9804114103317261, 1.0281214714050293}
	wantHead := []float64{0.5690133571624756, 0.5597248077392578, -0.5290269255638123, -0.08916806429624557, 0.19879987835884094, 0.5648882985115051}
	for i, w := range wantNorm {
		if float64(norm[i]) != w {
			t.Errorf("norm[%d] = %v, gen.py %v", i, norm[i], w)
		}
	}
	for i, w := range wantHead {
		if float64(head[i]) != w {
			t.Errorf("head[%d] = %v, gen.py %v", i, head[i], w)
		}
	}
}

func readParity(t *testing.T, name string) (parityRecord, []float32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(parityDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec parityRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(parityDir, name+".f32"))
	if err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, len(raw)/4)
	for i := range logits {
		logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return rec, logits
}

// checkParity runs tokens through the model in one batch and in small
// batches, compares every position's logits with transformers', and
// replays the greedy continuation.
func checkParity(t *testing.T, m *Model, rec parityRecord, want []float32) {
	ctx := context.Background()
	v := m.Config.VocabSize
	if len(want) != len(rec.Tokens)*v {
		t.Fatalf("%d logits for %d tokens of vocab %d", len(want), len(rec.Tokens), v)
	}
	for _, batch := range []int{64, 3} {
		s, err := m.NewSession(SessionOptions{Batch: batch})
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
	s, err := m.NewSession(SessionOptions{})
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

func TestParityRandomModels(t *testing.T) {
	for _, name := range []string{"tinyllama", "mistral", "mistral_window", "gemma", "bitnet", "llama3_rope", "llama_linear_rope"} {
		t.Run(name, func(t *testing.T) {
			rec, want := readParity(t, name)
			cfg, err := ParseHFConfig(rec.Config)
			if err != nil {
				t.Fatal(err)
			}
			if testing.Short() && cfg.HiddenSize > 256 {
				t.Skip("large shapes skipped in -short")
			}
			weights := map[string]*Weight{}
			for _, n := range cfg.ExpectedTensors() {
				weights[n] = parityWeights(n, cfg.TensorShape(n))
			}
			m, err := New(cfg, weights)
			if err != nil {
				t.Fatal(err)
			}
			checkParity(t, m, rec, want)
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
