package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"lowbit/gpu"
	"lowbit/model"
)

// Options set what Run measures.
type Options struct {
	// Prompt is the prompt length of the pp test (0: no pp test).
	Prompt int
	// Gen is the number of tokens of the tg test (0: no tg test).
	Gen int
	// Depth is the number of tokens already in the context when each test
	// starts (llama-bench's -d): attention then reads that much more cache.
	Depth int
	// Reps is the number of timed repetitions of each test (0: 5); one
	// untimed warm-up run comes first.
	Reps int
	// Sampling, when not nil, makes the tg test draw each token with these
	// settings (a fresh sampler, seed 1, for every repetition) instead of
	// taking the greedy one; the test is named "tg128 sampled".
	Sampling *model.SamplerOptions
	// KVCache is how the cache stores keys and values (zero: f32).
	KVCache model.KVType
	// Batches, when set, replace the tg test with one per batch size B:
	// B sequences, each in its own cache slot at the same depth, decode Gen
	// tokens together, one greedy token each per step, and the test
	// reports their aggregate tokens per second, B×Gen over the steps'
	// time (llama-batched-bench's S_TG), named "tg128 b8".
	Batches []int
	// Progress, when not nil, gets a line per repetition.
	Progress io.Writer
}

// Stat is a speed in tokens per second over repetitions.
type Stat struct {
	Test    string    `json:"test"` // "pp512", "tg128", "tg128 @ d4096"
	Tokens  int       `json:"tokens"`
	Mean    float64   `json:"tokens_per_s"`
	SD      float64   `json:"sd"`
	Samples []float64 `json:"samples"`
}

// Memory is device memory by kind, in bytes.
type Memory struct {
	Weights int64 `json:"weights"`
	KV      int64 `json:"kv_cache"`
	Scratch int64 `json:"scratch"`
}

// Result is one model's measurements.
type Result struct {
	Model  string `json:"model"`
	Format string `json:"format"`
	Device string `json:"device"`
	Params int64  `json:"params"`
	// KVCache is how the cache stored keys and values (f16, q8, f32).
	KVCache string  `json:"kv_cache"`
	Tests   []*Stat `json:"tests"`
	// WeightBytes is what one decode step reads of the weights (packed
	// codes plus scales; the embedding's one row is left out).
	WeightBytes int64 `json:"weight_bytes_per_token"`
	// Bandwidth is WeightBytes times tg's tokens per second.
	Bandwidth float64 `json:"achieved_bytes_per_s,omitempty"`
	// DeviceBandwidth is the device-to-device copy rate (bytes read plus
	// written), the roofline; 0 where not measured (the CPU).
	DeviceBandwidth float64 `json:"device_copy_bytes_per_s,omitempty"`
	Memory          *Memory `json:"vram,omitempty"`
}

// Run measures m on backend be (nil: the CPU). name and format label the
// result.
func Run(ctx context.Context, m *model.Model, be model.Backend, name string, opts Options) (*Result, error) {
	if opts.Reps <= 0 {
		opts.Reps = 5
	}
	if opts.Prompt < 0 || opts.Gen < 0 || opts.Depth < 0 || opts.Prompt+opts.Gen == 0 {
		return nil, fmt.Errorf("bench: nothing to measure (-p %d, -n %d, -d %d)", opts.Prompt, opts.Gen, opts.Depth)
	}
	for _, b := range opts.Batches {
		switch {
		case b < 1 || b > maxBatch:
			return nil, fmt.Errorf("bench: a batch of %d sequences: want 1 to %d", b, maxBatch)
		case opts.Sampling != nil:
			return nil, fmt.Errorf("bench: batched decoding is measured greedy, without a sampler")
		case opts.Gen == 0:
			return nil, fmt.Errorf("bench: a batch size without a tg test (-n 0)")
		}
	}
	c := m.Config
	need := opts.Depth + max(opts.Prompt, opts.Gen)
	if need > c.MaxPositions {
		return nil, fmt.Errorf("bench: -d %d plus -p %d or -n %d is %d positions, over the model's context of %d", opts.Depth, opts.Prompt, opts.Gen, need, c.MaxPositions)
	}
	batch := min(max(opts.Prompt, opts.Depth, 1), 512)
	s, err := m.NewSession(model.SessionOptions{Backend: be, Context: need, Batch: batch, KVCache: opts.KVCache})
	if err != nil {
		return nil, err
	}
	res := &Result{Model: name, Format: formatOf(m), Device: "cpu", WeightBytes: decodeBytes(m), KVCache: opts.KVCache.String()}
	for _, w := range m.Weights {
		res.Params += int64(w.Rows) * int64(w.Cols)
	}
	if be != nil {
		res.Device = be.Name()
	}
	r := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int, opts.Prompt)
	for i := range prompt {
		prompt[i] = r.IntN(c.VocabSize)
	}
	depth := make([]int, opts.Depth)
	for i := range depth {
		depth[i] = r.IntN(c.VocabSize)
	}
	// fill starts a test: an empty context, then the depth tokens (untimed).
	fill := func() error {
		s.Reset()
		if len(depth) == 0 {
			return nil
		}
		_, err := s.NextGreedy(ctx, depth)
		return err
	}
	pp := func() error {
		_, err := s.NextGreedy(ctx, prompt)
		return err
	}
	tg := func(n int) error {
		if opts.Sampling != nil {
			return sampled(ctx, s, c.BOS, n, *opts.Sampling)
		}
		tok := c.BOS
		for i := 0; i < n; i++ {
			var err error
			if tok, err = s.NextGreedy(ctx, []int{tok}); err != nil {
				return err
			}
		}
		return nil
	}
	// Warm-up: kernels loaded, lazy buffers made, the decode graph captured.
	if opts.Prompt > 0 {
		if err := fill(); err != nil {
			return nil, err
		}
		if err := pp(); err != nil {
			return nil, err
		}
	}
	if opts.Gen > 0 {
		if err := fill(); err != nil {
			return nil, err
		}
		if err := tg(min(opts.Gen, 4)); err != nil {
			return nil, err
		}
	}
	at := ""
	if opts.Depth > 0 {
		at = fmt.Sprintf(" @ d%d", opts.Depth)
	}
	timeTest := func(test string, tokens int, fn func() error) error {
		st := &Stat{Test: test + at, Tokens: tokens}
		for i := 0; i < opts.Reps; i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fill(); err != nil {
				return err
			}
			t0 := time.Now()
			if err := fn(); err != nil {
				return err
			}
			sec := time.Since(t0).Seconds()
			st.Samples = append(st.Samples, float64(tokens)/sec)
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "%s %s rep %d/%d: %.1f tokens/s\n", name, test, i+1, opts.Reps, float64(tokens)/sec)
			}
		}
		st.Mean, st.SD = meanSD(st.Samples)
		res.Tests = append(res.Tests, st)
		return nil
	}
	if opts.Prompt > 0 {
		if err := timeTest(fmt.Sprintf("pp%d", opts.Prompt), opts.Prompt, pp); err != nil {
			return nil, err
		}
	}
	if opts.Gen > 0 && len(opts.Batches) > 0 {
		if err := batched(ctx, m, be, opts, at, res); err != nil {
			return nil, err
		}
	} else if opts.Gen > 0 {
		name := fmt.Sprintf("tg%d", opts.Gen)
		if opts.Sampling != nil {
			name += " sampled"
		}
		if err := timeTest(name, opts.Gen, func() error { return tg(opts.Gen) }); err != nil {
			return nil, err
		}
		res.Bandwidth = float64(res.WeightBytes) * res.Tests[len(res.Tests)-1].Mean
	}
	if gb, ok := be.(*gpu.Backend); ok {
		ms := gb.Device().MemStats()
		res.Memory = &Memory{Weights: ms.Weights, KV: ms.KV, Scratch: ms.Scratch}
		if res.DeviceBandwidth, err = gb.Device().CopyBandwidth(1<<30, 20); err != nil {
			return nil, fmt.Errorf("bench: copy bandwidth: %w", err)
		}
	}
	return res, nil
}

// maxBatch bounds a batch test's sequences (each holds a cache slot).
const maxBatch = 1024

// batched times Gen decode steps of B sequences together for each batch
// size B, after each sequence's slot is filled to the depth (once: the
// repetitions write over the same positions).
func batched(ctx context.Context, m *model.Model, be model.Backend, opts Options, at string, res *Result) error {
	c := m.Config
	most := slices.Max(opts.Batches)
	s, err := m.NewSession(model.SessionOptions{Backend: be, Context: opts.Depth + opts.Gen, Slots: most, Batch: max(most, min(max(opts.Depth, 1), 512))})
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(3, 4))
	depth := make([]int, opts.Depth)
	for i := range depth {
		depth[i] = r.IntN(c.VocabSize)
	}
	for slot := range most {
		for lo := 0; lo < len(depth); lo += s.Batch() {
			chunk := depth[lo:min(lo+s.Batch(), len(depth))]
			if _, err := s.StepBatch(ctx, []model.BatchSeq{{Slot: slot, Pos: lo, Tokens: chunk}}, model.Want{}); err != nil {
				return err
			}
		}
	}
	// tg decodes n steps of b sequences, each from its own first token.
	tg := func(b, n int) error {
		seqs := make([]model.BatchSeq, b)
		for i := range seqs {
			seqs[i] = model.BatchSeq{Slot: i, Pos: opts.Depth, Tokens: []int{(c.BOS + i) % c.VocabSize}, Logits: true}
		}
		for range n {
			out, err := s.StepBatch(ctx, seqs, model.Want{Greedy: true})
			if err != nil {
				return err
			}
			for i := range seqs {
				seqs[i].Pos++
				seqs[i].Tokens = []int{out.Next[i]}
			}
		}
		return nil
	}
	for _, b := range opts.Batches {
		// Warm-up: this batch size's graph captured, its buffers made.
		if err := tg(b, min(opts.Gen, 4)); err != nil {
			return err
		}
		st := &Stat{Test: fmt.Sprintf("tg%d b%d%s", opts.Gen, b, at), Tokens: b * opts.Gen}
		for i := 0; i < opts.Reps; i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			t0 := time.Now()
			if err := tg(b, opts.Gen); err != nil {
				return err
			}
			rate := float64(st.Tokens) / time.Since(t0).Seconds()
			st.Samples = append(st.Samples, rate)
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "%s %s rep %d/%d: %.1f tokens/s\n", res.Model, st.Test, i+1, opts.Reps, rate)
			}
		}
		st.Mean, st.SD = meanSD(st.Samples)
		res.Tests = append(res.Tests, st)
		if b == 1 {
			res.Bandwidth = float64(res.WeightBytes) * st.Mean
		}
	}
	return nil
}

// sampled runs n decode steps from tok as lowbit run does when it samples:
// each token drawn from the step's candidates (or logits) by a sampler,
// never stopping early.
func sampled(ctx context.Context, s *model.Session, tok, n int, o model.SamplerOptions) error {
	o.Seed = 1
	sm, err := model.NewSampler(o)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	_, err = model.Generate(ctx, s, []int{tok}, model.GenerateOptions{MaxTokens: n, Sampler: sm})
	return err
}

// decodeBytes is what a decode step reads of the weights: every matrix
// once, the embedding table only when it is also the output head.
func decodeBytes(m *model.Model) int64 {
	n := m.WeightBytes()
	if e := m.Weights["model.embed_tokens.weight"]; e != nil && e != m.Output() {
		n -= e.Bytes()
	}
	return n
}

// formatOf names the format of the model's first layer's q_proj.
func formatOf(m *model.Model) string {
	// (Phi-3 stores q, k and v as one qkv_proj.)
	for _, name := range []string{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.qkv_proj.weight"} {
		if w := m.Weights[name]; w != nil {
			return string(w.Format())
		}
	}
	return "?"
}

// meanSD is the mean and sample standard deviation.
func meanSD(x []float64) (mean, sd float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	for _, v := range x {
		sd += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(sd / float64(len(x)-1))
}
