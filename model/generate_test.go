package model

import (
	"context"
	"errors"
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
