package model

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// GenerateOptions control Generate.
type GenerateOptions struct {
	// MaxTokens is the most tokens to generate (0: until the context is full).
	MaxTokens int
	// Sampler picks tokens (nil: greedy).
	Sampler *Sampler
	// StopIDs end generation when sampled (the model's EOS ids, usually);
	// the stop token is not passed to OnToken.
	StopIDs []int
	// OnToken receives each generated token as it is produced; returning
	// false stops generation (how a caller implements stop strings).
	OnToken func(id int) bool
	// OnLogprobs, when set, receives each generated token's log-probability
	// just before OnToken receives the token. Every step then reads back
	// all the logits (slower on a GPU, where otherwise they stay).
	OnLogprobs func(TokenLogprobs)
	// TopLogprobs is how many of each step's most likely tokens OnLogprobs
	// receives with the chosen one (0: none).
	TopLogprobs int
}

// Stop reasons.
const (
	StopEOS       = "eos"
	StopMaxTokens = "max_tokens"
	StopCallback  = "callback"
	StopContext   = "context"
)

// GenerateStats are the timings of a generation, as llama.cpp prints them.
type GenerateStats struct {
	PromptTokens    int
	GeneratedTokens int
	// PromptDuration is the prefill time (all prompt tokens and the first logits).
	PromptDuration time.Duration
	// GenDuration is the time of the decode steps after the first token.
	GenDuration time.Duration
	// Queued is how long the generation waited for a cache slot (a
	// scheduler's; 0 on a session of its own).
	Queued time.Duration
	// MaxGap is the longest time between two generated tokens (the worst
	// inter-token latency a stream saw).
	MaxGap time.Duration
	// Stop says why generation ended: eos, max_tokens, callback or context.
	Stop string
	// Tokens are the generated ids (without a stop id).
	Tokens []int
}

// PromptTokensPerSec is the prefill speed.
func (s GenerateStats) PromptTokensPerSec() float64 {
	return rate(s.PromptTokens, s.PromptDuration)
}

// GenTokensPerSec is the decode speed (tokens after the first, which
// prefill produced).
func (s GenerateStats) GenTokensPerSec() float64 {
	return rate(s.GeneratedTokens-1, s.GenDuration)
}

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// DrawCandidates is how many of the most likely tokens a sampled step
// looks at where top-k does not bound them (a backend drawing on its
// device, Want.Draw; a scheduler asking for Want.TopK): enough for top-p
// and min-p on a trained model's peaked distributions; a draw reaching
// past them reads every logit.
const DrawCandidates = 256

// Generate feeds prompt to the session (after whatever it already holds,
// so a chat keeps its history) and samples up to MaxTokens tokens, one
// forward step each. A prompt that does not fit the context is an error;
// reaching the end of the context stops generation with Stop "context".
// The last generated token is not fed to the session (its logits are not
// needed): a caller continuing the sequence puts it first in the next prompt.
func Generate(ctx context.Context, s *Session, prompt []int, opts GenerateOptions) (st GenerateStats, err error) {
	st.PromptTokens = len(prompt)
	if len(prompt) == 0 {
		return st, fmt.Errorf("generate: the prompt is empty")
	}
	if s.Pos()+len(prompt) > s.Context() {
		if s.Pos() == 0 {
			return st, fmt.Errorf("generate: prompt of %d tokens exceeds the context of %d", len(prompt), s.Context())
		}
		return st, fmt.Errorf("generate: prompt of %d tokens after %d tokens of history exceeds the context of %d", len(prompt), s.Pos(), s.Context())
	}
	sampler := opts.Sampler
	if sampler == nil {
		sampler = Greedy()
	}
	history := slices.Clone(prompt)
	// Greedy decoding asks the session for the id alone: on a GPU the
	// logits then stay on the device.
	greedy := sampler.ArgmaxOnly()
	// Sampling has the backend draw the token where the logits are (on
	// a GPU the next step is queued on it before it comes back), and
	// reads every logit only when what it found does not settle the draw.
	var lp TokenLogprobs // the last step's, when OnLogprobs asks for them
	next := func(tokens []int) (int, error) {
		if opts.OnLogprobs != nil {
			logits, err := s.Forward(ctx, tokens)
			if err != nil {
				return 0, err
			}
			id := sampler.Sample(logits, history)
			lp = LogprobsOf(logits, id, opts.TopLogprobs)
			return id, nil
		}
		if greedy {
			return s.NextGreedy(ctx, tokens)
		}
		d := sampler.Draw(history)
		if d == nil { // a penalty without a temperature: the argmax of every penalized logit
			logits, err := s.Forward(ctx, tokens)
			if err != nil {
				return 0, err
			}
			return sampler.Sample(logits, history), nil
		}
		id, ok, err := s.NextDrawn(ctx, tokens, d)
		if err != nil {
			return 0, err
		}
		if ok {
			sampler.Accept()
			return id, nil
		}
		logits, err := s.LastLogits()
		if err != nil {
			return 0, err
		}
		return sampler.Sample(logits, history), nil
	}
	start := time.Now()
	id, err := next(prompt)
	if err != nil {
		return st, err
	}
	st.PromptDuration = time.Since(start)
	start = time.Now()
	defer func() { st.GenDuration = time.Since(start) }()
	last := start
	for {
		if opts.MaxTokens > 0 && st.GeneratedTokens >= opts.MaxTokens {
			st.Stop = StopMaxTokens
			return st, nil
		}
		if slices.Contains(opts.StopIDs, id) {
			st.Stop = StopEOS
			return st, nil
		}
		now := time.Now()
		st.MaxGap = max(st.MaxGap, now.Sub(last))
		last = now
		st.GeneratedTokens++
		st.Tokens = append(st.Tokens, id)
		history = append(history, id)
		if opts.OnLogprobs != nil {
			opts.OnLogprobs(lp)
		}
		if opts.OnToken != nil && !opts.OnToken(id) {
			st.Stop = StopCallback
			return st, nil
		}
		if s.Pos() >= s.Context() {
			st.Stop = StopContext
			return st, nil
		}
		if opts.MaxTokens > 0 && st.GeneratedTokens >= opts.MaxTokens {
			st.Stop = StopMaxTokens
			return st, nil
		}
		if id, err = next([]int{id}); err != nil {
			return st, err
		}
	}
}
