package model

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/quantize"
)

// storiesExpected is stories260K/expected_greedy_200_tokens.json.
type storiesExpected struct {
	Prompt    []int       `json:"prompt_tokens"`
	Generated []int       `json:"generated_tokens"`
	Logits    [][]float32 `json:"logits_first4"`
}

func loadStories(t testing.TB) (*Model, storiesExpected) {
	t.Helper()
	dir := filepath.Dir(testmodels.Path(t, "stories260K-hf/model.safetensors"))
	b, err := os.ReadFile(testmodels.Path(t, "stories260K/expected_greedy_200_tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp storiesExpected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	m, err := Load(context.Background(), dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m, exp
}

// greedy decodes steps tokens after prompt with argmax.
func greedy(t testing.TB, s *Session, prompt []int, steps int) []int {
	t.Helper()
	ctx := context.Background()
	logits, err := s.Forward(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for i := 0; i < steps; i++ {
		next := Argmax(logits)
		out = append(out, next)
		if i == steps-1 {
			break
		}
		if logits, err = s.Forward(ctx, []int{next}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestStories260KGreedy(t *testing.T) {
	m, exp := loadStories(t)
	for _, workers := range []int{1, 2} {
		s, err := m.NewSession(SessionOptions{Backend: NewCPU(workers)})
		if err != nil {
			t.Fatal(err)
		}
		got := greedy(t, s, exp.Prompt, len(exp.Generated))
		for i := range exp.Generated {
			if got[i] != exp.Generated[i] {
				t.Fatalf("workers %d: token %d is %d, want %d (got %v)", workers, i, got[i], exp.Generated[i], got[:i+1])
			}
		}
	}
}

func TestStories260KLogits(t *testing.T) {
	m, exp := loadStories(t)
	tokens := append([]int{exp.Prompt[0]}, exp.Generated[:3]...)
	// The same positions through one batch, through single steps, and through
	// batches of 3 then 1 must all match the reference.
	for _, batch := range []int{64, 1, 3} {
		s, err := m.NewSession(SessionOptions{Batch: batch, KVCache: KVF32})
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.ForwardAll(context.Background(), tokens, true)
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config.VocabSize
		for p := range tokens {
			if e := quantize.RelL2(exp.Logits[p], out.Logits[p*v:(p+1)*v]); e > 1e-4 {
				t.Errorf("batch %d: position %d: rel L2 %.3g", batch, p, e)
			}
		}
		if len(out.Hidden) != m.Config.NumLayers+1 || len(out.Hidden[0]) != len(tokens)*m.Config.HiddenSize {
			t.Errorf("hidden states: %d layers", len(out.Hidden))
		}
		if s.Pos() != len(tokens) {
			t.Errorf("pos %d", s.Pos())
		}
	}
}

// TestStories260KQ8 runs the model quantized (linear, embedding and head at
// q8) through the same forward pass: greedy output equals FP32's.
func TestStories260KQ8(t *testing.T) {
	m, exp := loadStories(t)
	if err := m.Quantize(context.Background(), quantize.Q8, quantize.Options{}, 0); err != nil {
		t.Fatal(err)
	}
	if m.Weights["model.layers.0.mlp.up_proj.weight"].Q == nil || m.Weights["model.embed_tokens.weight"].Q == nil {
		t.Fatal("weights were not quantized")
	}
	s, err := m.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := greedy(t, s, exp.Prompt, 32)
	for i := range got {
		if got[i] != exp.Generated[i] {
			t.Fatalf("q8 token %d is %d, FP32 gives %d", i, got[i], exp.Generated[i])
		}
	}
}

// TestNextGreedy: the greedy next token equals the argmax of Forward's
// logits, step after step.
func TestNextGreedy(t *testing.T) {
	m, exp := loadStories(t)
	a, err := m.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := greedy(t, a, exp.Prompt, 16)
	ctx := context.Background()
	next, err := b.NextGreedy(ctx, exp.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if next != w {
			t.Fatalf("token %d: NextGreedy %d, Forward's argmax %d", i, next, w)
		}
		if next, err = b.NextGreedy(ctx, []int{next}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStepBatch runs two sequences in one step, each in its own cache
// slot at its own positions, through the same forward pass a session
// runs for one: every sequence's logits equal those it gets alone, for a
// prompt step and for a decode step after it. (The pass reads positions
// and slots from the step, so it is written once for any batch.)
func TestStepBatch(t *testing.T) {
	ctx := context.Background()
	for _, arch := range []string{"LlamaForCausalLM", "GemmaForCausalLM", "BitNetForCausalLM"} {
		t.Run(arch, func(t *testing.T) {
			spec := fixture.Llama()
			spec.Arch = arch
			m, err := Load(ctx, writeFixture(t, spec), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			seqs := [][]int{{1, 7, 8, 9}, {1, 20, 21}}
			decode := []int{30, 40}
			// Each alone: the prompt's logits, then the decode step's.
			var want [][]float32
			for i, p := range seqs {
				s, err := m.NewSession(SessionOptions{Backend: NewCPU(1)})
				if err != nil {
					t.Fatal(err)
				}
				out, err := s.ForwardAll(ctx, p, false)
				if err != nil {
					t.Fatal(err)
				}
				next, err := s.Forward(ctx, []int{decode[i]})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, out.Logits, next)
			}
			// Both in one step: a session whose cache holds two slots.
			be := NewCPU(1)
			s, err := m.NewSession(SessionOptions{Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			kvDim := m.Config.NumKVHeads * m.Config.HeadDim
			if s.cache, err = be.NewCache(CacheShape{Layers: m.Config.NumLayers, Slots: 2, Positions: s.ctx, KVDim: kvDim}); err != nil {
				t.Fatal(err)
			}
			vocab := m.Config.VocabSize
			step := func(batch []Seq) []float32 {
				n := 0
				for _, q := range batch {
					n += len(q.Tokens)
				}
				st := &Step{Seqs: batch, Cache: s.cache, Logits: s.logits.Slice(0, n*vocab), Vocab: vocab, Want: Want{Logits: true}}
				res, err := be.Step(ctx, st, func() error { return s.forward(ctx, n, []span{{from: 0, rows: n}}, nil) })
				if err != nil {
					t.Fatal(err)
				}
				return res.Logits
			}
			got := step([]Seq{{Tokens: seqs[0], Slot: 0}, {Tokens: seqs[1], Slot: 1}})
			got = append(got, step([]Seq{{Tokens: decode[:1], Pos: 4, Slot: 0}, {Tokens: decode[1:], Pos: 3, Slot: 1}})...)
			wantAll := slices.Concat(want[0], want[2], want[1], want[3])
			if !slices.Equal(got, wantAll) {
				t.Fatalf("batched logits differ from each sequence's alone (relative L2 %.3g)", relL2(got, wantAll))
			}
		})
	}
}

// relL2 is |a-b| / |b|.
func relL2(a, b []float32) float64 {
	var d, n float64
	for i := range b {
		d += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / n)
}

// TestBiasChangesOutput checks that q/k/v biases enter the forward pass:
// zero biases leave the logits as they are, others change them.
func TestBiasChangesOutput(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logits := func() []float32 {
		s, err := m.NewSession(SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Forward(ctx, []int{1, 5, 9})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	plain := logits()
	m.Config.QKVBias = true
	bias := func(v float32) {
		for l := range m.Config.NumLayers {
			for _, p := range []string{"q", "k", "v"} {
				w := m.Weights[fmt.Sprintf("model.layers.%d.self_attn.%s_proj.weight", l, p)]
				b := make([]float32, w.Rows)
				if p == "k" {
					for i := range b {
						b[i] = v * float32(i%3)
					}
				}
				m.Weights[fmt.Sprintf("model.layers.%d.self_attn.%s_proj.bias", l, p)] = FloatWeight(1, w.Rows, b)
			}
		}
	}
	bias(0)
	if got := logits(); !slices.Equal(got, plain) {
		t.Fatal("zero biases changed the logits")
	}
	bias(0.5)
	if got := logits(); slices.Equal(got, plain) {
		t.Fatal("biases did not change the logits")
	}
}
