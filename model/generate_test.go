package model

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/fixture"
)

func TestGenerate(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 7, 8}
	newSession := func(context int) *Session {
		s, err := m.NewSession(SessionOptions{Context: context})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The greedy reference sequence.
	ref, err := Generate(ctx, newSession(0), prompt, GenerateOptions{MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if ref.Stop != StopMaxTokens || len(ref.Tokens) != 10 || ref.GeneratedTokens != 10 {
		t.Fatalf("%+v", ref)
	}
	tests := []struct {
		name      string
		context   int
		opts      GenerateOptions
		wantStop  string
		wantCount int
	}{
		{"stop id", 0, GenerateOptions{MaxTokens: 10, StopIDs: []int{ref.Tokens[4]}}, StopEOS, 4},
		{"callback", 0, GenerateOptions{MaxTokens: 10, OnToken: func(id int) bool { return id != ref.Tokens[2] }}, StopCallback, 3},
		{"context", 8, GenerateOptions{}, StopContext, 6},
		{"max tokens", 0, GenerateOptions{MaxTokens: 1}, StopMaxTokens, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var streamed []int
			on := tc.opts.OnToken
			tc.opts.OnToken = func(id int) bool {
				streamed = append(streamed, id)
				return on == nil || on(id)
			}
			st, err := Generate(ctx, newSession(tc.context), prompt, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if st.Stop != tc.wantStop || len(st.Tokens) != tc.wantCount || len(streamed) != tc.wantCount {
				t.Fatalf("stop %s after %d tokens (%d streamed), want %s after %d", st.Stop, len(st.Tokens), len(streamed), tc.wantStop, tc.wantCount)
			}
			for i, id := range st.Tokens {
				if id != ref.Tokens[i] {
					t.Errorf("token %d is %d, want %d", i, id, ref.Tokens[i])
				}
			}
			if st.PromptTokens != len(prompt) || st.PromptTokensPerSec() <= 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(SessionOptions{Context: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(ctx, s, []int{1, 2, 3, 4, 5}, GenerateOptions{}); err == nil || !strings.Contains(err.Error(), "prompt of 5 tokens exceeds the context of 4") {
		t.Errorf("long prompt: %v", err)
	}
	if _, err := Generate(ctx, s, nil, GenerateOptions{}); err == nil {
		t.Error("empty prompt accepted")
	}
	if _, err := s.Forward(ctx, []int{1, 1000}); err == nil || !strings.Contains(err.Error(), "token id 1000") {
		t.Errorf("bad token: %v", err)
	}
	if _, err := m.NewSession(SessionOptions{Context: 100000}); err == nil {
		t.Error("context beyond max positions accepted")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Generate(cancelled, s, []int{1}, GenerateOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestGenerateLogprobs checks each generated token's log-probability and
// the step's top tokens against a log-softmax computed here from the
// logits Forward gives for the same prefix, and that asking for them does
// not change the tokens.
func TestGenerateLogprobs(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 7, 8}
	tests := []struct {
		name    string
		sampler SamplerOptions
		top     int
	}{
		{"greedy", SamplerOptions{}, 5},
		{"greedy without top", SamplerOptions{}, 0},
		{"sampled", SamplerOptions{Temperature: 0.8, TopK: 20, Seed: 3}, 3},
		{"penalized", SamplerOptions{Temperature: 1.5, RepeatPenalty: 1.3, Seed: 9}, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := func(on func(TokenLogprobs)) GenerateStats {
				s, err := m.NewSession(SessionOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sampler, err := NewSampler(tc.sampler)
				if err != nil {
					t.Fatal(err)
				}
				st, err := Generate(ctx, s, prompt, GenerateOptions{MaxTokens: 8, Sampler: sampler, OnLogprobs: on, TopLogprobs: tc.top})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			var lps []TokenLogprobs
			st := run(func(lp TokenLogprobs) { lps = append(lps, lp) })
			if plain := run(nil); !slices.Equal(plain.Tokens, st.Tokens) {
				t.Fatalf("tokens %v with logprobs, %v without", st.Tokens, plain.Tokens)
			}
			if len(lps) != len(st.Tokens) {
				t.Fatalf("%d logprobs for %d tokens", len(lps), len(st.Tokens))
			}
			s, err := m.NewSession(SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			feed := prompt
			for i, lp := range lps {
				logits, err := s.Forward(ctx, feed)
				if err != nil {
					t.Fatal(err)
				}
				feed = []int{st.Tokens[i]}
				want := logSoftmax(logits)
				if lp.ID != st.Tokens[i] || lp.Logprob > 0 || math.Abs(lp.Logprob-want[lp.ID]) > 1e-4 {
					t.Errorf("token %d: %+v, want id %d logprob %v", i, lp.Logprob, st.Tokens[i], want[st.Tokens[i]])
				}
				if len(lp.Top) != tc.top {
					t.Fatalf("token %d: %d top tokens, want %d", i, len(lp.Top), tc.top)
				}
				order := slices.Clone(want)
				slices.SortFunc(order, func(a, b float64) int { return cmp.Compare(b, a) })
				for j, c := range lp.Top {
					if c.Logprob > 0 || math.Abs(c.Logprob-want[c.ID]) > 1e-4 || math.Abs(c.Logprob-order[j]) > 1e-4 {
						t.Errorf("token %d top %d: %+v, want the %d-th most likely %v", i, j, c, j, order[j])
					}
				}
				if tc.sampler.Temperature == 0 && tc.top > 0 && lp.Top[0].ID != lp.ID {
					t.Errorf("token %d: greedy chose %d but the most likely is %d", i, lp.ID, lp.Top[0].ID)
				}
			}
		})
	}
}

// logSoftmax is the reference: log(exp(x_i) / sum exp(x)) in float64.
func logSoftmax(logits []float32) []float64 {
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - math.Log(sum)
	}
	return out
}

func TestLogprobsOfEdges(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	tests := []struct {
		name    string
		logits  []float32
		id, top int
		want    float64
		wantTop []int
	}{
		{"ties keep id order", []float32{1, 2, 2, 0}, 2, 3, 2 - math.Log(math.E+2*math.E*math.E+1), []int{1, 2, 0}},
		{"top beyond the vocabulary", []float32{0, 0}, 0, 5, -math.Log(2), []int{0, 1}},
		{"NaN is impossible", []float32{0, nan, 0}, 1, 2, math.Inf(-1), []int{0, 2}},
		{"-Inf is impossible", []float32{inf, 0}, 0, 1, math.Inf(-1), []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lp := LogprobsOf(tc.logits, tc.id, tc.top)
			if lp.ID != tc.id || !(math.Abs(lp.Logprob-tc.want) < 1e-9 || lp.Logprob == tc.want) {
				t.Errorf("logprob %+v, want %v", lp.Logprob, tc.want)
			}
			var ids []int
			for _, c := range lp.Top {
				ids = append(ids, c.ID)
			}
			if !slices.Equal(ids, tc.wantTop) {
				t.Errorf("top %v, want %v", ids, tc.wantTop)
			}
		})
	}
}
