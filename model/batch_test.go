package model

import (
	"context"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/quantize"
)

// TestStepBatchEqualsAlone steps three sequences together, as a server
// does: prompts in chunks beside other sequences' decode tokens, each
// joining at its own step, in slots that do not follow their order. Every
// row of logits must equal, bit for bit, the logits of the same sequence
// run alone with the same chunks, for every family, in float32 and in q4
// (whose CPU products take another path for prompts than for decode).
func TestStepBatchEqualsAlone(t *testing.T) {
	ctx := context.Background()
	const chunk = 8
	prompts := [][]int{seqTokens(23, 1), seqTokens(9, 2), seqTokens(2, 3)}
	decode := func(i, k int) int { return (i*31 + k*17 + 5) % 96 }
	const steps = 4 // decode tokens after each prompt
	for _, spec := range fixture.Families() {
		for _, format := range []quantize.Format{quantize.F32, quantize.Q4} {
			t.Run(strings.TrimSuffix(spec.Arch, "ForCausalLM")+"/"+string(format), func(t *testing.T) {
				opts := LoadOptions{}
				if format != quantize.F32 {
					opts.Quantize = format
				}
				m, err := Load(ctx, writeFixture(t, spec), opts)
				if err != nil {
					t.Fatal(err)
				}
				// Alone: the prompt in chunks, then the decode tokens.
				want := make([][][]float32, len(prompts))
				for i, p := range prompts {
					s, err := m.NewSession(SessionOptions{Batch: chunk, Context: 64})
					if err != nil {
						t.Fatal(err)
					}
					logits, err := s.Forward(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					want[i] = append(want[i], logits)
					for k := range steps {
						if logits, err = s.Forward(ctx, []int{decode(i, k)}); err != nil {
							t.Fatal(err)
						}
						want[i] = append(want[i], logits)
					}
				}
				// Together: sequence i joins at step i, in slot 2-i.
				s, err := m.NewSession(SessionOptions{Batch: 3 * chunk, Context: 64, Slots: 3})
				if err != nil {
					t.Fatal(err)
				}
				fed := make([]int, len(prompts))     // prompt tokens in the cache
				decoded := make([]int, len(prompts)) // decode tokens fed
				got := make([][][]float32, len(prompts))
				for step := 0; ; step++ {
					var seqs []BatchSeq
					var who []int
					for i, p := range prompts {
						switch {
						case i > step:
						case fed[i] < len(p):
							end := min(fed[i]+chunk, len(p))
							seqs = append(seqs, BatchSeq{Slot: 2 - i, Pos: fed[i], Tokens: p[fed[i]:end], Logits: end == len(p)})
							if end == len(p) {
								who = append(who, i)
							}
							fed[i] = end
						case decoded[i] < steps:
							seqs = append(seqs, BatchSeq{Slot: 2 - i, Pos: len(p) + decoded[i], Tokens: []int{decode(i, decoded[i])}, Logits: true})
							who = append(who, i)
							decoded[i]++
						}
					}
					if len(seqs) == 0 {
						break
					}
					res, err := s.StepBatch(ctx, seqs, Want{Logits: true})
					if err != nil {
						t.Fatal(err)
					}
					vocab := m.Config.VocabSize
					if len(res.Logits) != len(who)*vocab {
						t.Fatalf("step %d: %d logits for %d rows", step, len(res.Logits), len(who))
					}
					for r, i := range who {
						got[i] = append(got[i], res.Logits[r*vocab:(r+1)*vocab])
					}
				}
				for i := range prompts {
					if len(got[i]) != len(want[i]) {
						t.Fatalf("sequence %d: %d rows of logits, want %d", i, len(got[i]), len(want[i]))
					}
					for k := range want[i] {
						if !slices.Equal(got[i][k], want[i][k]) {
							t.Fatalf("sequence %d, row %d: batched logits differ from alone (relative L2 %.3g)", i, k, relL2(got[i][k], want[i][k]))
						}
					}
				}
			})
		}
	}
}

// seqTokens are n token ids below 96 (every fixture's vocabulary holds them).
func seqTokens(n, seed int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (i*7 + seed*13 + 3) % 96
	}
	return out
}

// TestStepBatchChecks refuses steps outside the session: no sequences, no
// tokens, a slot or position out of range, a token out of the
// vocabulary, more tokens than the batch; and rows kept only when asked.
func TestStepBatchChecks(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(SessionOptions{Batch: 4, Context: 8, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		seqs []BatchSeq
		want string
	}{
		{"none", nil, "no sequences"},
		{"empty", []BatchSeq{{Slot: 0}}, "has no tokens"},
		{"slot", []BatchSeq{{Slot: 2, Tokens: []int{1}}}, "exceed the cache"},
		{"position", []BatchSeq{{Slot: 0, Pos: 7, Tokens: []int{1, 2}}}, "exceed the cache"},
		{"negative position", []BatchSeq{{Slot: 0, Pos: -1, Tokens: []int{1}}}, "exceed the cache"},
		{"token", []BatchSeq{{Slot: 1, Tokens: []int{m.Config.VocabSize}}}, "outside the vocabulary"},
		{"batch", []BatchSeq{{Slot: 0, Tokens: []int{1, 2, 3}}, {Slot: 1, Tokens: []int{1, 2}}}, "exceeds the session's batch"},
		{"same slot", []BatchSeq{{Slot: 1, Tokens: []int{1}}, {Slot: 1, Pos: 1, Tokens: []int{2}}}, "used twice"},
	} {
		if _, err := s.StepBatch(ctx, tc.seqs, Want{Greedy: true}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	res, err := s.StepBatch(ctx, []BatchSeq{{Slot: 0, Tokens: []int{1, 2}, Logits: true}, {Slot: 1, Tokens: []int{3}, Logits: true}}, Want{Greedy: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Next) != 2 {
		t.Fatalf("%d greedy ids for 2 rows", len(res.Next))
	}
	if _, err := s.RowLogits(0); err == nil {
		t.Error("a greedy step kept its logits")
	}
	res, err = s.StepBatch(ctx, []BatchSeq{{Slot: 0, Pos: 2, Tokens: []int{res.Next[0]}, Logits: true}, {Slot: 1, Pos: 1, Tokens: []int{res.Next[1]}, Logits: true}}, Want{TopK: 3, Temp: 1})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		row, err := s.RowLogits(r)
		if err != nil {
			t.Fatal(err)
		}
		if Argmax(row) != res.Cands[r].IDs[0] {
			t.Errorf("row %d: kept logits' argmax %d, candidates' first %d", r, Argmax(row), res.Cands[r].IDs[0])
		}
	}
	if _, err := s.RowLogits(2); err == nil {
		t.Error("a row past the step's was read")
	}
}
