package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"lowbit/internal/fixture"
)

// hostTopK is a step's Want.TopK answer by a full sort, the reference: the k most
// likely tokens in Sample's order and the softmax denominator.
func hostTopK(logits []float32, k int, temp float32) *Candidates {
	var c []cand
	for id, v := range logits {
		if !math.IsNaN(float64(v)) {
			c = append(c, cand{id, v})
		}
	}
	sortCands(c)
	out := &Candidates{Exact: true}
	for _, x := range c {
		out.SumExp += float64(float32(math.Exp(float64((x.p - c[0].p) / temp))))
	}
	for _, x := range c[:min(k, len(c))] {
		out.IDs = append(out.IDs, x.id)
		out.Logits = append(out.Logits, x.p)
	}
	return out
}

// TestPickCandidates checks that sampling from the 256 most likely tokens
// picks what sampling from all logits picks with the same seed, falling
// back to all logits (with the same uniform) where the candidates cannot
// settle it, and that the candidates settle most peaked draws.
func TestPickCandidates(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	logits[7], logits[8] = logits[3], logits[3] // ties
	logits[500] = float32(math.NaN())
	for _, o := range []SamplerOptions{
		{Temperature: 0.3}, {Temperature: 1}, {Temperature: 0.8, TopK: 40}, {Temperature: 0.8, TopK: 300},
		{Temperature: 0.8, TopP: 0.9}, {Temperature: 2, TopP: 0.95}, {Temperature: 0.8, MinP: 0.05},
		{Temperature: 1, TopK: 100, TopP: 0.5, MinP: 0.1},
	} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			settled := 0
			for seed := uint64(0); seed < 40; seed++ {
				o.Seed = seed
				full, _ := NewSampler(o)
				part, _ := NewSampler(o)
				for step := 0; step < 3; step++ { // a pending uniform carries over
					want := full.Sample(logits, nil)
					c := hostTopK(logits, 256, o.Temperature)
					got, ok := part.PickCandidates(c.IDs, c.Logits, c.SumExp)
					if ok {
						settled++
					} else {
						got = part.Sample(logits, nil)
					}
					if got != want {
						t.Fatalf("seed %d step %d: candidates pick %d (settled %v), all logits %d", seed, step, got, ok, want)
					}
				}
			}
			if o.Temperature < 1 && o.TopK != 300 && settled == 0 {
				t.Errorf("no draw settled from the candidates")
			}
		})
	}
}

// TestTopCandidates checks the host's candidates (the CPU backend's
// answer to Want.TopK) against a full sort.
func TestTopCandidates(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	logits := make([]float32, 5000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	logits[10], logits[11] = logits[4], logits[4]
	logits[99] = float32(math.NaN())
	for _, k := range []int{1, 40, 256, 4999, 6000} {
		got, want := TopCandidates(logits, k, 0.8), hostTopK(logits, k, 0.8)
		if !slices.Equal(got.IDs, want.IDs) || !slices.Equal(got.Logits, want.Logits) || !got.Exact {
			t.Fatalf("k %d: ids %v, want %v", k, got.IDs[:min(5, len(got.IDs))], want.IDs[:min(5, len(want.IDs))])
		}
		if math.Abs(got.SumExp-want.SumExp) > 1e-9*want.SumExp {
			t.Fatalf("k %d: sum %v, want %v", k, got.SumExp, want.SumExp)
		}
	}
}

// TestGenerateCandidates checks that Generate with sampling, which asks
// the backend for candidates, gives the tokens that sampling from all
// logits gives.
func TestGenerateCandidates(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 7, 8}
	for _, o := range []SamplerOptions{{Temperature: 0.7, Seed: 3}, {Temperature: 1, TopP: 0.9, Seed: 4}, {Temperature: 0.5, TopK: 5, Seed: 5}} {
		s, err := m.NewSession(SessionOptions{Backend: NewCPU(1)})
		if err != nil {
			t.Fatal(err)
		}
		sm, _ := NewSampler(o)
		st, err := Generate(ctx, s, prompt, GenerateOptions{MaxTokens: 20, Sampler: sm})
		if err != nil {
			t.Fatal(err)
		}
		// The same draws from all logits, step by step.
		s, err = m.NewSession(SessionOptions{Backend: NewCPU(1)})
		if err != nil {
			t.Fatal(err)
		}
		sm, _ = NewSampler(o)
		history, feed := slices.Clone(prompt), prompt
		var want []int
		for len(want) < len(st.Tokens) {
			logits, err := s.Forward(ctx, feed)
			if err != nil {
				t.Fatal(err)
			}
			id := sm.Sample(logits, history)
			want, history, feed = append(want, id), append(history, id), []int{id}
		}
		if !slices.Equal(st.Tokens, want) {
			t.Fatalf("%+v: candidates %v, all logits %v", o, st.Tokens, want)
		}
	}
}
