package model

import (
	"context"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/quantize"
)

// TestFamilies runs a small model of every architecture (each with its
// family's features on: biases, q/k norms, sandwich norms, soft-capping,
// sliding windows shorter than the text, joined products, a partial
// rotation, layers without rotation) on the CPU: a prompt in one step, in
// steps of 3 and token by token give the same logits, so prefill and
// decode compute one model; and a q4 copy generates.
func TestFamilies(t *testing.T) {
	ctx := context.Background()
	tokens := make([]int, 40)
	for i := range tokens {
		tokens[i] = (i*7 + 3) % 96
	}
	for _, spec := range fixture.Families() {
		t.Run(strings.TrimSuffix(spec.Arch, "ForCausalLM"), func(t *testing.T) {
			m, err := Load(ctx, writeFixture(t, spec), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var runs [][]float32
			for _, batch := range []int{64, 3, 1} {
				s, err := m.NewSession(SessionOptions{Batch: batch})
				if err != nil {
					t.Fatal(err)
				}
				out, err := s.ForwardAll(ctx, tokens, false)
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, out.Logits)
			}
			for i, r := range runs[1:] {
				if e := quantize.RelL2(runs[0], r); !(e < 1e-5) {
					t.Fatalf("batch %d: logits off the whole prompt's by relative L2 %.3g", []int{3, 1}[i], e)
				}
			}
			q, err := Load(ctx, writeFixture(t, spec), LoadOptions{Quantize: quantize.Q4})
			if err != nil {
				t.Fatal(err)
			}
			s, err := q.NewSession(SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st, err := Generate(ctx, s, tokens[:5], GenerateOptions{MaxTokens: 40})
			if err != nil {
				t.Fatal(err)
			}
			if st.GeneratedTokens == 0 {
				t.Fatal("nothing generated")
			}
		})
	}
}

// TestTiedStoredAsHead loads a tied model whose checkpoint holds the table
// only under lm_head.weight: the logits are those of the same weights
// stored as model.embed_tokens.weight.
func TestTiedStoredAsHead(t *testing.T) {
	ctx := context.Background()
	spec := fixture.Llama()
	spec.Tied = true
	var logits [][]float32
	for _, asHead := range []bool{false, true} {
		spec.TiedAsHead = asHead
		m, err := Load(ctx, writeFixture(t, spec), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Forward(ctx, []int{1, 5, 9})
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, l)
	}
	if e := quantize.RelL2(logits[0], logits[1]); e != 0 {
		t.Fatalf("the table stored as the head gives other logits (relative L2 %.3g)", e)
	}
}
