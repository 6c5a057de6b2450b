package model

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lowbit/quantize"
)

// TestParityBitNetW2A8 holds lowbit's BitNet b1.58 path (tq2 weights, int8
// activations per token) to transformers 5.17's BitNetForCausalLM on a
// random-weight model with the 2B-4T shapes (hidden 2560, intermediate 6912,
// 20 heads, 5 KV heads, rope theta 5e5, relu², sub-norms), 2 of 30 layers,
// vocab 320, weights from gen.py's generator.
//
// How the reference quantizes (testdata/parity/bitnet_gen.py): transformers
// builds the bf16 master architecture with plain nn.Linear and quantizes
// nothing unless quantization_config asks for it. The script therefore does
// what quantization_config {linear_class: autobitlinear, mode: online} does:
// every decoder linear computes F.linear(ActQuant(x), WeightQuant(W)) with
// transformers.integrations.bitnet's own functions: weights ternary at the
// per-tensor scale max(mean|W|, 1e-5), activations int8 per token at
// 127/max(max|x|, 1e-5), both rounding half to even. The tied embedding and
// head stay float32 on both sides. lowbit quantizes the same linears with
// quantize.Quantize(TQ2), as conversion does, and its CPU backend quantizes
// activations with quantize.QuantizeInt8 before every tq2 matmul.
//
// int8 rounding makes exact parity position by position a property of the
// float summation order, not of the implementation: a value within ~1e-7 of
// a rounding boundary goes to the neighbouring code, and one such code
// moves the logits by up to ~1e-2. The test shows it on lowbit alone: the
// same model with its norm gains moved by one ulp (every other value)
// differs from itself by that much at the positions where it happens.
//
// Must hold: the ternary codes are the reference's (code counts per tensor
// equal, scales within 4 ulps); every position where lowbit is stable under
// that one-ulp change (its logits move by under 1e-4) matches transformers
// within relative L2 1e-3 (at least 10 positions: those before the first
// boundary); the others within
// 3e-2; and the 32 greedy tokens equal. (Run with float activations into
// the same ternary weights, the closest position is 2.4e-2 away, so the
// 1e-3 bound does test the int8 activation scheme.)
func TestParityBitNetW2A8(t *testing.T) {
	if testing.Short() {
		t.Skip("2B-4T shapes skipped in -short")
	}
	var extra struct {
		TQ2 map[string]struct {
			Scale             float64 `json:"scale"`
			Minus, Zero, Plus int
		} `json:"tq2"`
	}
	b, err := os.ReadFile(filepath.Join(parityDir, "bitnet_w2a8.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &extra); err != nil {
		t.Fatal(err)
	}
	rec, want := readParity(t, "bitnet_w2a8")
	cfg, err := ParseHFConfig(rec.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	weights := map[string]*Weight{}
	quantized := 0
	for _, n := range cfg.ExpectedTensors() {
		w := parityWeights(n, cfg.TensorShape(n))
		if cfg.TensorRole(n) == RoleLinear {
			q, err := quantize.Quantize(ctx, quantize.TQ2, w.F32, w.Rows, w.Cols, quantize.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ref, ok := extra.TQ2[n]
			if !ok {
				t.Fatalf("%s: no reference statistics", n)
			}
			// torch's float32 reduction is a few ulps off the exact mean lowbit takes.
			if d := math.Abs(float64(q.Scale) - ref.Scale); d > 4*float64(math.Nextafter32(float32(ref.Scale), 1)-float32(ref.Scale)) {
				t.Errorf("%s: scale %v, transformers %v", n, q.Scale, ref.Scale)
			}
			counts := [3]int{}
			row := make([]float32, w.Cols)
			for r := 0; r < q.Rows; r++ {
				q.DequantizeRow(r, row)
				for _, v := range row {
					counts[int(math.Round(float64(v/q.Scale)))+1]++
				}
			}
			if counts != [3]int{ref.Minus, ref.Zero, ref.Plus} {
				t.Errorf("%s: codes -1/0/+1 %v, transformers %v", n, counts, [3]int{ref.Minus, ref.Zero, ref.Plus})
			}
			w = QuantWeight(q)
			quantized++
		}
		weights[n] = w
	}
	if quantized != len(extra.TQ2) {
		t.Fatalf("quantized %d linears, the reference %d", quantized, len(extra.TQ2))
	}
	m, err := New(cfg, weights)
	if err != nil {
		t.Fatal(err)
	}
	got := bitnetLogits(t, m, rec.Tokens)
	nudged := map[string]*Weight{}
	for n, w := range weights {
		if w.Q == nil && w.Rows == 1 {
			f := slices.Clone(w.F32)
			for i := 0; i < len(f); i += 2 {
				f[i] = math.Nextafter32(f[i], 2)
			}
			w = FloatWeight(1, len(f), f)
		}
		nudged[n] = w
	}
	mn, err := New(cfg, nudged)
	if err != nil {
		t.Fatal(err)
	}
	self := bitnetLogits(t, mn, rec.Tokens)
	v := cfg.VocabSize
	stable, worstStable, worst := 0, 0.0, 0.0
	for p := range rec.Tokens {
		e := quantize.RelL2(want[p*v:(p+1)*v], got[p*v:(p+1)*v])
		spread := quantize.RelL2(got[p*v:(p+1)*v], self[p*v:(p+1)*v])
		switch {
		case spread < 1e-4:
			stable++
			worstStable = max(worstStable, e)
			if !(e <= 1e-3) {
				t.Errorf("position %d (stable, one-ulp spread %.2g): rel L2 %.3g against transformers", p, spread, e)
			}
		case !(e <= 3e-2):
			t.Errorf("position %d (at an int8 boundary, one-ulp spread %.2g): rel L2 %.3g against transformers", p, spread, e)
		}
		worst = max(worst, e)
	}
	t.Logf("%d of %d positions stable: worst rel L2 %.3g there; %.3g over all", stable, len(rec.Tokens), worstStable, worst)
	if stable < 10 {
		t.Errorf("only %d of %d positions stable", stable, len(rec.Tokens))
	}
	s, err := m.NewSession(SessionOptions{KVCache: KVF32})
	if err != nil {
		t.Fatal(err)
	}
	st, err := Generate(ctx, s, rec.Prompt, GenerateOptions{MaxTokens: len(rec.Greedy)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Greedy) != 32 || !slices.Equal(st.Tokens, rec.Greedy) {
		t.Errorf("greedy %v, transformers %v", st.Tokens, rec.Greedy)
	}
}

// bitnetLogits returns the logits of every position of tokens in one batch.
func bitnetLogits(t *testing.T, m *Model, tokens []int) []float32 {
	t.Helper()
	s, err := m.NewSession(SessionOptions{Batch: 64, KVCache: KVF32})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.ForwardAll(context.Background(), tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}

// TestBitNetTop1AgainstFakeQuantized measures what lowbit's BitNet runtime
// costs beyond the ternary weights themselves: the reference runs the same
// ternary weights dequantized to float32 (S·t, "fake-quantized", as
// transformers' WeightQuant gives them) with float32 activations and a
// float32 embedding/head; lowbit runs tq2 with int8 activations per token
// and an 8-bit (q8) embedding and head, as `lowbit convert --bits ternary`
// writes. Two models: random weights (gen.py's generator) on a 4-layer
// BitNet of hidden 512 over 160 positions, and stories260K's real weights
// ternarized, over its 201 golden tokens (skipped without ../shared).
//
// Neither model was trained ternary, so their top-2 margins are tiny, and
// the int8 activations and the 8-bit embedding and head each flip close
// calls (BENCHMARKS.md has the agreement measured). The issue's >= 99% is for the trained 2B-4T model,
// which is not available offline; this test guards against breakage with
// a 90% floor.
func TestBitNetTop1AgainstFakeQuantized(t *testing.T) {
	raw := []byte(`{"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_size": 512, "intermediate_size": 1376,
		"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 320,
		"max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "relu2",
		"tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}`)
	cfg, err := ParseHFConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	weights := map[string]*Weight{}
	for _, n := range cfg.ExpectedTensors() {
		weights[n] = parityWeights(n, cfg.TensorShape(n))
	}
	tokens := make([]int, 160)
	for i := range tokens {
		tokens[i] = (i*37 + 11) % cfg.VocabSize
	}
	tokens[0] = 1
	t.Run("random-bitnet", func(t *testing.T) { checkTop1(t, cfg, weights, tokens) })
	t.Run("stories260K-ternary", func(t *testing.T) {
		m, exp := loadStories(t)
		checkTop1(t, m.Config, m.Weights, append(append([]int{}, exp.Prompt...), exp.Generated...))
	})
}

// checkTop1 compares the fake-quantized float reference with lowbit's
// tq2 + int8 + q8 embedding/head model built from the same float weights.
func checkTop1(t *testing.T, cfg Config, weights map[string]*Weight, tokens []int) {
	ctx := context.Background()
	ref, low := map[string]*Weight{}, map[string]*Weight{}
	for n, w := range weights {
		ref[n], low[n] = w, w
		switch cfg.TensorRole(n) {
		case RoleLinear:
			q, err := quantize.Quantize(ctx, quantize.TQ2, w.F32, w.Rows, w.Cols, quantize.Options{})
			if err != nil {
				t.Fatal(err)
			}
			f := make([]float32, w.Rows*w.Cols)
			for r := 0; r < w.Rows; r++ {
				q.DequantizeRow(r, f[r*w.Cols:(r+1)*w.Cols])
			}
			ref[n], low[n] = FloatWeight(w.Rows, w.Cols, f), QuantWeight(q)
		case RoleEmbedding, RoleOutput:
			q, err := quantize.Quantize(ctx, quantize.Q8, w.F32, w.Rows, w.Cols, quantize.Options{GroupSize: quantize.Q8.TableGroupSize()})
			if err != nil {
				t.Fatal(err)
			}
			low[n] = QuantWeight(q)
		}
	}
	mr, err := New(cfg, ref)
	if err != nil {
		t.Fatal(err)
	}
	ml, err := New(cfg, low)
	if err != nil {
		t.Fatal(err)
	}
	a, b := bitnetLogits(t, mr, tokens), bitnetLogits(t, ml, tokens)
	v := cfg.VocabSize
	agree, worst := 0, 0.0
	for p := range tokens {
		ra, rb := a[p*v:(p+1)*v], b[p*v:(p+1)*v]
		if Argmax(ra) == Argmax(rb) {
			agree++
		}
		worst = max(worst, quantize.RelL2(ra, rb))
	}
	frac := float64(agree) / float64(len(tokens))
	t.Logf("top-1 agreement %d/%d = %.1f%%, worst logits rel L2 %.3g", agree, len(tokens), 100*frac, worst)
	if frac < 0.90 {
		t.Errorf("top-1 agreement %.1f%% < 90%%", 100*frac)
	}
}
