package sched

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lowbit/internal/fixture"
	"lowbit/model"
	"lowbit/quantize"
)

// load writes spec's fixture and loads it (quantized unless format is F32).
func load(t testing.TB, spec fixture.Spec, format quantize.Format) *model.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := spec.Write(dir); err != nil {
		t.Fatal(err)
	}
	opts := model.LoadOptions{}
	if format != quantize.F32 {
		opts.Quantize = format
	}
	m, err := model.Load(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newScheduler is a scheduler on a CPU session of slots slots.
func newScheduler(t testing.TB, m *model.Model, slots, chunk int, opts Options) *Scheduler {
	t.Helper()
	s, err := m.NewSession(model.SessionOptions{Context: 128, Slots: slots, Batch: chunk + slots, Backend: model.NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	opts.Chunk = chunk
	sc, err := New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// request is one generation of the tests.
type request struct {
	prompt   []int
	max      int
	sampling model.SamplerOptions
	stopIDs  []int
	logprobs bool
}

// result is what a generation gave.
type result struct {
	tokens []int
	lps    []model.TokenLogprobs
	stop   string
}

// options are req's generate options, recording into res.
func (req request) options(t testing.TB, res *result) model.GenerateOptions {
	smp, err := model.NewSampler(req.sampling)
	if err != nil {
		t.Fatal(err)
	}
	o := model.GenerateOptions{MaxTokens: req.max, Sampler: smp, StopIDs: req.stopIDs}
	if req.logprobs {
		o.TopLogprobs = 3
		o.OnLogprobs = func(lp model.TokenLogprobs) { res.lps = append(res.lps, lp) }
	}
	return o
}

// alone generates req on a session of its own whose batch is the chunk.
func alone(t testing.TB, m *model.Model, chunk int, req request) result {
	t.Helper()
	s, err := m.NewSession(model.SessionOptions{Context: 128, Batch: chunk, Backend: model.NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	var res result
	st, err := model.Generate(context.Background(), s, req.prompt, req.options(t, &res))
	if err != nil {
		t.Fatal(err)
	}
	res.tokens, res.stop = st.Tokens, st.Stop
	return res
}

// together generates every request at once on sc.
func together(t testing.TB, sc *Scheduler, reqs []request) []result {
	t.Helper()
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			st, err := sc.Generate(context.Background(), req.prompt, req.options(t, &out[i]))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			if len(req.prompt) != st.PromptTokens || st.GeneratedTokens != len(st.Tokens) {
				t.Errorf("request %d: %d prompt tokens of %d, %d generated and %d tokens", i, st.PromptTokens, len(req.prompt), st.GeneratedTokens, len(st.Tokens))
			}
			out[i].tokens, out[i].stop = st.Tokens, st.Stop
		})
	}
	wg.Wait()
	return out
}

// tokens are n ids below 96 (every fixture's vocabulary holds them), none
// of them an end of sequence.
func tokens(n, seed int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 3 + (i*7+seed*13)%90
	}
	return out
}

// mixed are requests of prompts shorter and longer than a chunk, of
// different lengths of output, more than there are slots, so that some
// join as others leave.
func mixed() []request {
	return []request{
		{prompt: tokens(23, 1), max: 9},
		{prompt: tokens(3, 2), max: 17},
		{prompt: tokens(9, 3), max: 4},
		{prompt: tokens(1, 4), max: 12},
		{prompt: tokens(40, 5), max: 6},
		{prompt: tokens(8, 6), max: 1},
	}
}

// TestGreedyEqualsAlone: every family's greedy output in a batch, token
// for token, is its output alone, whether chunks share steps with decode
// tokens or not, in float32 and q4.
func TestGreedyEqualsAlone(t *testing.T) {
	const chunk = 8
	for _, spec := range fixture.Families() {
		formats := []quantize.Format{quantize.F32}
		if spec.Arch == "LlamaForCausalLM" || spec.Arch == "Gemma2ForCausalLM" || spec.Arch == "BitNetForCausalLM" {
			formats = append(formats, quantize.Q4)
		}
		for _, format := range formats {
			t.Run(strings.TrimSuffix(spec.Arch, "ForCausalLM")+"/"+string(format), func(t *testing.T) {
				m := load(t, spec, format)
				reqs := mixed()
				var want []result
				for _, req := range reqs {
					want = append(want, alone(t, m, chunk, req))
				}
				for _, separate := range []bool{false, true} {
					sc := newScheduler(t, m, 3, chunk, Options{SeparatePrefill: separate})
					got := together(t, sc, reqs)
					for i := range reqs {
						if !slices.Equal(got[i].tokens, want[i].tokens) || got[i].stop != want[i].stop {
							t.Errorf("separate %v, request %d: %v (%s), alone %v (%s)", separate, i, got[i].tokens, got[i].stop, want[i].tokens, want[i].stop)
						}
					}
				}
			})
		}
	}
}

// TestSamplingEqualsAlone: per-request sampling (temperatures apart,
// top-k, top-p, min-p, a repetition penalty, logprobs, a stop id) with
// fixed seeds gives each request in a batch what it gets alone, draw for
// draw.
func TestSamplingEqualsAlone(t *testing.T) {
	const chunk = 8
	m := load(t, fixture.Llama(), quantize.F32)
	reqs := []request{
		{prompt: tokens(12, 1), max: 60, sampling: model.SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9, Seed: 1}},
		{prompt: tokens(5, 2), max: 60, sampling: model.SamplerOptions{Temperature: 1.3, MinP: 0.05, Seed: 2}},
		{prompt: tokens(6, 8), max: 60, sampling: model.SamplerOptions{Temperature: 1.1, TopP: 0.8, Seed: 8}},
		{prompt: tokens(6, 9), max: 60, sampling: model.SamplerOptions{Temperature: 0.5, Seed: 9}},
		{prompt: tokens(30, 3), max: 60, sampling: model.SamplerOptions{Temperature: 0.8, Seed: 3}},
		{prompt: tokens(7, 4), max: 60, sampling: model.SamplerOptions{Temperature: 0.7, RepeatPenalty: 1.3, Seed: 4}},
		{prompt: tokens(9, 5), max: 20, logprobs: true},
		{prompt: tokens(9, 6), max: 60, sampling: model.SamplerOptions{Temperature: 1, Seed: 6}, logprobs: true},
		{prompt: tokens(4, 7), max: 20},
	}
	// A stop id: the third token the last request makes alone.
	first := alone(t, m, chunk, reqs[len(reqs)-1])
	reqs[len(reqs)-1].stopIDs = []int{first.tokens[2]}
	var want []result
	for _, req := range reqs {
		want = append(want, alone(t, m, chunk, req))
	}
	if want[len(reqs)-1].stop != model.StopEOS {
		t.Fatalf("the stop id did not stop the request alone: %v", want[len(reqs)-1])
	}
	sc := newScheduler(t, m, 4, chunk, Options{})
	got := together(t, sc, reqs)
	for i := range reqs {
		if !slices.Equal(got[i].tokens, want[i].tokens) || got[i].stop != want[i].stop {
			t.Errorf("request %d: %v (%s), alone %v (%s)", i, got[i].tokens, got[i].stop, want[i].tokens, want[i].stop)
		}
		if fmt.Sprint(got[i].lps) != fmt.Sprint(want[i].lps) {
			t.Errorf("request %d: logprobs %v, alone %v", i, got[i].lps, want[i].lps)
		}
	}
}

// TestPrefixReuse: a request whose prompt continues what a slot's cache
// holds prefills only the rest, and generates what it would from scratch.
func TestPrefixReuse(t *testing.T) {
	const chunk = 8
	m := load(t, fixture.Llama(), quantize.F32)
	sc := newScheduler(t, m, 2, chunk, Options{})
	ctx := context.Background()
	first := request{prompt: tokens(20, 1), max: 6}
	st, err := sc.Generate(ctx, first.prompt, first.options(t, &result{}))
	if err != nil {
		t.Fatal(err)
	}
	// The cache holds the prompt and all but the last generated token.
	next := request{prompt: slices.Concat(first.prompt, st.Tokens, tokens(5, 2)), max: 6}
	want := alone(t, m, chunk, next)
	st, err = sc.Generate(ctx, next.prompt, next.options(t, &result{}))
	if err != nil {
		t.Fatal(err)
	}
	if wantPrompt := len(next.prompt) - (len(first.prompt) + 5); st.PromptTokens != wantPrompt {
		t.Errorf("prefilled %d tokens, want %d", st.PromptTokens, wantPrompt)
	}
	if !slices.Equal(st.Tokens, want.tokens) {
		t.Errorf("after the reused prefix %v, from scratch %v", st.Tokens, want.tokens)
	}
	// The same prompt again: all but its last token are reused.
	st, err = sc.Generate(ctx, next.prompt, next.options(t, &result{}))
	if err != nil {
		t.Fatal(err)
	}
	if st.PromptTokens != 1 || !slices.Equal(st.Tokens, want.tokens) {
		t.Errorf("the same prompt again: prefilled %d, generated %v, want 1 and %v", st.PromptTokens, st.Tokens, want.tokens)
	}
}

// TestFairness: requests get a slot in the order they came, and a long
// prompt is prefilled in chunks that share each step with the decode
// token of the sequence already running, which never waits a step.
func TestFairness(t *testing.T) {
	const chunk = 4
	m := load(t, fixture.Llama(), quantize.F32)
	var mu sync.Mutex
	var steps []StepInfo
	var lock sync.Mutex
	sc := newScheduler(t, m, 2, chunk, Options{Lock: &lock, OnStep: func(s StepInfo) {
		mu.Lock()
		steps = append(steps, s)
		mu.Unlock()
	}})
	ctx := context.Background()
	// One slot runs a long generation; requests queue for the other,
	// in order, while the steps are held.
	lock.Lock()
	var wg sync.WaitGroup
	var order []int
	var orderMu sync.Mutex
	wg.Go(func() { // until the end of the context: longer than the others together
		if _, err := sc.Generate(ctx, tokens(3, 0), model.GenerateOptions{}); err != nil {
			t.Error(err)
		}
	})
	waitFor(t, "the long generation to be admitted", func() bool { r, _ := sc.Load(); return r == 1 })
	for i := range 5 {
		wg.Go(func() {
			first := true
			_, err := sc.Generate(ctx, tokens(10+4*i, i+1), model.GenerateOptions{MaxTokens: 3, OnToken: func(int) bool {
				if first {
					orderMu.Lock()
					order = append(order, i)
					orderMu.Unlock()
					first = false
				}
				return true
			}})
			if err != nil {
				t.Error(err)
			}
		})
		// Each request queues before the next is sent.
		waitFor(t, "a request to queue", func() bool { r, w := sc.Load(); return r+w == i+2 })
	}
	lock.Unlock()
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Errorf("first tokens in order %v, want the order of arrival", order)
	}
	mu.Lock()
	defer mu.Unlock()
	prefills := 0
	for i, s := range steps {
		if s.Prefill > chunk {
			t.Errorf("step %d prefilled %d tokens, over the chunk of %d", i, s.Prefill, chunk)
		}
		if s.Prefill > 0 && i > 0 {
			prefills++
			if s.Decode == 0 {
				t.Errorf("step %d prefilled %d tokens and decoded none: the running sequence waited", i, s.Prefill)
			}
		}
	}
	if prefills < 10 {
		t.Errorf("%d steps prefilled beside decoding: the prompts were not chunked", prefills)
	}
}

// TestCancel: a cancelled request leaves its slot (or the queue) at once,
// its Generate returns the context's error, and the slot serves the next.
func TestCancel(t *testing.T) {
	m := load(t, fixture.Llama(), quantize.F32)
	var lock sync.Mutex
	sc := newScheduler(t, m, 1, 8, Options{Lock: &lock})
	lock.Lock()
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	errs := make(chan error, 3)
	run := func(ctx context.Context) {
		_, err := sc.Generate(ctx, tokens(5, 1), model.GenerateOptions{})
		errs <- err
	}
	go run(ctxA)
	waitFor(t, "A to be admitted", func() bool { r, _ := sc.Load(); return r == 1 })
	go run(ctxB)
	waitFor(t, "B to queue", func() bool { _, w := sc.Load(); return w == 1 })
	// B leaves the queue while the steps are held.
	cancelB()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("B cancelled in the queue: %v", err)
	}
	if r, w := sc.Load(); r != 1 || w != 0 {
		t.Errorf("after B left: %d running, %d waiting", r, w)
	}
	// A leaves its slot at the next step; C takes it and finishes.
	done := make(chan error, 1)
	go func() {
		st, err := sc.Generate(context.Background(), tokens(4, 2), model.GenerateOptions{MaxTokens: 3})
		if err == nil && st.GeneratedTokens != 3 {
			err = fmt.Errorf("C generated %d tokens", st.GeneratedTokens)
		}
		done <- err
	}()
	waitFor(t, "C to queue", func() bool { _, w := sc.Load(); return w == 1 })
	cancelA()
	lock.Unlock()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("A cancelled while running: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("C after A left: %v", err)
	}
	waitFor(t, "the scheduler to empty", func() bool { r, w := sc.Load(); return r == 0 && w == 0 })
}

// TestStopByCallback: a caller that stops at a token gets Stop callback
// and the tokens up to it, and its slot is free again.
func TestStopByCallback(t *testing.T) {
	m := load(t, fixture.Llama(), quantize.F32)
	sc := newScheduler(t, m, 2, 8, Options{})
	n := 0
	st, err := sc.Generate(context.Background(), tokens(6, 1), model.GenerateOptions{OnToken: func(int) bool { n++; return n < 4 }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Stop != model.StopCallback || st.GeneratedTokens != 4 || len(st.Tokens) != 4 {
		t.Errorf("stopped with %s after %d tokens %v, want callback after 4", st.Stop, st.GeneratedTokens, st.Tokens)
	}
	waitFor(t, "the slot to be free", func() bool { r, w := sc.Load(); return r == 0 && w == 0 })
}

// TestContextEnd: a sequence that fills its slot's context stops there,
// as alone.
func TestContextEnd(t *testing.T) {
	m := load(t, fixture.Llama(), quantize.F32)
	sc := newScheduler(t, m, 2, 8, Options{})
	st, err := sc.Generate(context.Background(), tokens(120, 1), model.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Stop != model.StopContext || st.GeneratedTokens != 9 {
		t.Errorf("stopped with %s after %d tokens, want context after 9 (128 positions)", st.Stop, st.GeneratedTokens)
	}
}

// TestQueueFull: with every slot taken and the queue full, one more
// request is refused at once.
func TestQueueFull(t *testing.T) {
	m := load(t, fixture.Llama(), quantize.F32)
	var lock sync.Mutex
	sc := newScheduler(t, m, 1, 8, Options{Lock: &lock, Queue: 2})
	lock.Lock()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if _, err := sc.Generate(context.Background(), tokens(3, i), model.GenerateOptions{MaxTokens: 2}); err != nil {
				t.Error(err)
			}
		})
		waitFor(t, "a request to queue", func() bool { r, w := sc.Load(); return r+w == i+1 })
	}
	_, err := sc.Generate(context.Background(), tokens(3, 9), model.GenerateOptions{MaxTokens: 2})
	if !errors.Is(err, ErrQueueFull) {
		t.Errorf("a fourth request with 1 slot and a queue of 2: %v", err)
	}
	lock.Unlock()
	wg.Wait()
}

// TestRefused: requests the session cannot run are refused with the
// reason, and options that leave no room for a chunk too.
func TestRefused(t *testing.T) {
	m := load(t, fixture.Llama(), quantize.F32)
	sc := newScheduler(t, m, 2, 8, Options{})
	for _, tc := range []struct {
		prompt []int
		max    int
		want   string
	}{
		{nil, 1, "empty"},
		{make([]int, 129), 1, "exceeds the context of 128"},
		{[]int{1, 96}, 1, "outside the vocabulary"},
		{[]int{1}, -1, "max tokens -1"},
	} {
		if _, err := sc.Generate(context.Background(), tc.prompt, model.GenerateOptions{MaxTokens: tc.max}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("prompt of %d, max %d: %v, want %q", len(tc.prompt), tc.max, err, tc.want)
		}
	}
	s, err := m.NewSession(model.SessionOptions{Context: 16, Slots: 4, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Chunk: 6}, {Chunk: -1}, {Queue: -1}} {
		if _, err := New(s, o); err == nil {
			t.Errorf("%+v on 4 slots and steps of 8: no error", o)
		}
	}
	sc, err = New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := sc.Options().Chunk; c != 5 {
		t.Errorf("default chunk on 4 slots and steps of 8: %d, want 5", c)
	}
	if s, err = m.NewSession(model.SessionOptions{Context: 256, Batch: 200}); err != nil {
		t.Fatal(err)
	}
	if sc, err = New(s, Options{}); err != nil || sc.Options().Chunk != 200 {
		t.Errorf("default chunk on 1 slot and steps of 200: %v, %v; want the whole step", sc.Options().Chunk, err)
	}
}

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}
