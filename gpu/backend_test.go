package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/paritygen"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/quantize"
)

// relL2Of is |got-want| / |want| (NaN fails).
func relL2Of(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	return relL2(f64(want), got)
}

// fixtureModel writes spec to a temporary directory, loads it and
// quantizes it to f (f32: left as it is).
func fixtureModel(t *testing.T, spec fixture.Spec, f quantize.Format) *model.Model {
	t.Helper()
	dir := t.TempDir()
	if err := spec.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(context.Background(), dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f != quantize.F32 {
		if err := m.Quantize(context.Background(), f, quantize.Options{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// newGPUSession opens a session of m on a fresh Backend of d.
func newGPUSession(t *testing.T, d *Device, m *model.Model, ctx, batch int) (*model.Session, *Backend) {
	t.Helper()
	be, err := NewBackend(d, batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	s, err := m.NewSession(model.SessionOptions{Backend: be, Context: ctx, Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	return s, be
}

// addBiases gives every layer's q, k and v products a bias (as Qwen2's).
func addBiases(m *model.Model) {
	m.Config.QKVBias = true
	r := rand.New(rand.NewPCG(9, 9))
	for l := range m.Config.NumLayers {
		for _, p := range []string{"q", "k", "v"} {
			w := m.Weights[fmt.Sprintf("model.layers.%d.self_attn.%s_proj.weight", l, p)]
			b := make([]float32, w.Rows)
			for i := range b {
				b[i] = float32(r.NormFloat64() * 0.5)
			}
			m.Weights[fmt.Sprintf("model.layers.%d.self_attn.%s_proj.bias", l, p)] = model.FloatWeight(1, w.Rows, b)
		}
	}
}

// TestBackendMatchesCPU runs fixture models (dimensions that are not
// multiples of 32, GQA, tied and untied heads, BitNet's sub-norms and
// ternary weights; wider ones that take the fused shared-memory products
// and decode attention) on the GPU and on the CPU: a prefill in two
// chunks, then decode steps (captured as a graph from the second on) fed with the
// CPU's greedy tokens. Logits agree to a relative L2 under 1e-3 (tq2:
// 1e-2, where int8 activations round at the same points but float sums
// differ in order).
func TestBackendMatchesCPU(t *testing.T) {
	d := openOrSkip(t)
	bitnet := fixture.Llama()
	bitnet.Arch = "BitNetForCausalLM"
	tied := fixture.Llama()
	tied.Tied = true
	tied.Seed = 7
	for _, tc := range []struct {
		name  string
		spec  fixture.Spec
		f     quantize.Format
		limit float64
	}{
		{"llama-f32", fixture.Llama(), quantize.F32, 1e-3},
		{"llama-q8", fixture.Llama(), quantize.Q8, 1e-3},
		{"llama-q4", fixture.Llama(), quantize.Q4, 1e-3},
		{"llama-q2", fixture.Llama(), quantize.Q2, 1e-3},
		{"tied-q1", tied, quantize.Q1, 1e-3},
		{"bitnet-f32", bitnet, quantize.F32, 1e-3},
		{"bitnet-tq2", bitnet, quantize.TQ2, 1e-2},
		{"wide-q4", wideSpec("LlamaForCausalLM"), quantize.Q4, 1e-3},
		{"wide-bitnet-tq2", wideSpec("BitNetForCausalLM"), quantize.TQ2, 1e-2},
		{"wide-q4-bias", wideSpec("LlamaForCausalLM"), quantize.Q4, 1e-3},
		{"llama-f32-bias", fixture.Llama(), quantize.F32, 1e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fixtureModel(t, tc.spec, tc.f)
			if strings.HasSuffix(tc.name, "-bias") {
				addBiases(m)
			}
			cpu, err := m.NewSession(model.SessionOptions{Context: 64, Batch: 4})
			if err != nil {
				t.Fatal(err)
			}
			gs, _ := newGPUSession(t, d, m, 64, 4)
			worst := matchCPU(t, m, cpu, gs, []int{1, 5, 9, 17, 33, 2, 70}, 12, tc.limit)
			t.Logf("%s: worst decode relative L2 %.2g", tc.name, worst)
		})
	}
}

// TestBackendFamilies runs every random model of the parity records
// (testdata/parity, internal/paritygen: one per architecture feature) on
// the GPU and on the CPU: the recorded tokens in prefill chunks of 4, then
// 8 decode steps fed with the CPU's greedy tokens. Logits agree within a
// relative L2 of 1e-3, so each feature the CPU matches transformers on
// (TestParityRandomModels) the GPU runs too. A record gen.py has not
// written yet is skipped.
func TestBackendFamilies(t *testing.T) {
	d := openOrSkip(t)
	for _, name := range paritygen.RandomModels() {
		t.Run(name, func(t *testing.T) {
			rec, _ := paritygen.ReadOrSkip(t, paritygen.Dir, name)
			cfg, err := model.ParseHFConfig(rec.Config)
			if err != nil {
				t.Fatal(err)
			}
			weights := map[string]*model.Weight{}
			for _, n := range cfg.ExpectedTensors() {
				rows, cols, w := paritygen.Tensor(n, cfg.TensorShape(n))
				weights[n] = model.FloatWeight(rows, cols, w)
			}
			m, err := model.New(cfg, weights)
			if err != nil {
				t.Fatal(err)
			}
			const steps = 8
			ctx := (len(rec.Tokens) + steps + 63) / 64 * 64 // whole blocks, as the other tests size the cache
			cpu, err := m.NewSession(model.SessionOptions{Context: ctx, Batch: 4})
			if err != nil {
				t.Fatal(err)
			}
			gs, _ := newGPUSession(t, d, m, ctx, 4)
			worst := matchCPU(t, m, cpu, gs, rec.Tokens, steps, 1e-3)
			t.Logf("%s: %d prompt tokens, worst decode relative L2 %.2g", name, len(rec.Tokens), worst)
		})
	}
}

// matchCPU runs prompt, then steps decode steps fed with the CPU's greedy
// tokens, through the CPU session cpu and the GPU session gs: the logits
// of each must agree within limit (relative L2). It returns the worst
// decode step's.
func matchCPU(t *testing.T, m *model.Model, cpu, gs *model.Session, prompt []int, steps int, limit float64) float64 {
	t.Helper()
	ctx := context.Background()
	want, err := cpu.ForwardAll(ctx, prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := gs.ForwardAll(ctx, prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	if e := relL2Of(got.Logits, want.Logits); !(e < limit) {
		t.Fatalf("prompt logits: relative L2 %.3g, want < %.0e", e, limit)
	}
	next := model.Argmax(want.Logits[len(want.Logits)-m.Config.VocabSize:])
	worst := 0.0
	for step := 0; step < steps; step++ {
		wl, err := cpu.Forward(ctx, []int{next})
		if err != nil {
			t.Fatal(err)
		}
		gl, err := gs.Forward(ctx, []int{next})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		e := relL2Of(gl, wl)
		worst = max(worst, e)
		if !(e < limit) {
			t.Fatalf("decode step %d: relative L2 %.3g, want < %.0e", step, e, limit)
		}
		next = model.Argmax(wl)
	}
	return worst
}

// TestBackendGraphEqualsDirect decodes the same tokens with steps replayed
// from a CUDA graph and with every kernel launched directly: the logits
// are bit-identical. Decode runs the fused q/k/v and gate/up products.
func TestBackendGraphEqualsDirect(t *testing.T) {
	d := openOrSkip(t)
	m := fixtureModel(t, fixture.Llama(), quantize.Q4)
	ctx := context.Background()
	graph, gb := newGPUSession(t, d, m, 64, 8)
	direct, db := newGPUSession(t, d, m, 64, 8)
	db.noGraphs = true
	tok := []int{3, 4, 5}
	for step := 0; step < 20; step++ {
		a, err := graph.Forward(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		b, err := direct.Forward(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("step %d: logit %d: graph %v, direct %v", step, i, a[i], b[i])
			}
		}
		tok = []int{model.Argmax(a)}
	}
	if s := onlyStep(t, gb); s.g == nil || s.runs < 19 {
		t.Fatalf("decode steps were not replayed from a graph: %+v", s)
	}
	if want := 2 * m.Config.NumLayers; len(gb.joined) != want {
		t.Fatalf("%d joined weights (q/k/v and gate/up), want %d", len(gb.joined), want)
	}
	if len(db.steps) != 0 {
		t.Fatalf("direct session recorded %d steps", len(db.steps))
	}
}

// onlyStep is the one decode step b recorded.
func onlyStep(t *testing.T, b *Backend) *stepGraph {
	t.Helper()
	if len(b.steps) != 1 {
		t.Fatalf("%d decode steps recorded, want 1", len(b.steps))
	}
	for _, s := range b.steps {
		return s
	}
	return nil
}

// TestChainGreedy decodes greedily with each step chained on the device
// (the next step queued on the argmax before its id comes back; from the
// second replay on, a graph with its own argmax at its end) and with
// chaining off: the ids are the same at every step, also where the caller
// breaks the chain (another token than the id, a truncated sequence) and
// up to the end of the context, where nothing is chained.
func TestChainGreedy(t *testing.T) {
	d := openOrSkip(t)
	ctx := context.Background()
	for _, arch := range []string{"LlamaForCausalLM", "BitNetForCausalLM"} {
		t.Run(arch, func(t *testing.T) {
			f := quantize.Q4
			if arch == "BitNetForCausalLM" {
				f = quantize.TQ2
			}
			m := fixtureModel(t, wideSpec(arch), f)
			const positions = 64
			chained, cb := newGPUSession(t, d, m, positions, 8)
			plain, pb := newGPUSession(t, d, m, positions, 8)
			pb.noChain = true
			tok := []int{3, 4, 5}
			for step := 0; chained.Pos() < positions; step++ {
				a, err := chained.NextGreedy(ctx, tok)
				if err != nil {
					t.Fatal(err)
				}
				b, err := plain.NextGreedy(ctx, tok)
				if err != nil {
					t.Fatal(err)
				}
				if a != b || chained.Pos() != plain.Pos() {
					t.Fatalf("step %d: chained %d at %d, plain %d at %d", step, a, chained.Pos(), b, plain.Pos())
				}
				switch step {
				case 10: // another token than the id
					a = (a + 1) % m.Config.VocabSize
				case 20: // back three positions
					chained.Truncate(chained.Pos() - 3)
					plain.Truncate(plain.Pos() - 3)
				}
				tok = []int{a}
			}
			if s := onlyStep(t, cb); s.runs > 20 {
				t.Fatalf("chained steps were replayed by the session: %+v", s)
			}
			if onlyStep(t, cb).chain == nil {
				t.Fatal("the chained steps ran without their argmax in the graph")
			}
		})
	}
}

// wideSpec is a fixture whose shapes the shared-memory products and
// decode attention take: widths in whole 64-weight chunks, head size 64.
func wideSpec(arch string) fixture.Spec {
	return fixture.Spec{Arch: arch, Hidden: 256, Intermediate: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
		Vocab: 128, Seed: 3}
}

// TestBackendStoriesGreedy decodes stories260K greedily on the GPU: the
// 200 tokens equal the reference's token for token, and the first logits
// match the CPU's.
func TestBackendStoriesGreedy(t *testing.T) {
	d := openOrSkip(t)
	dir := filepath.Dir(testmodels.Path(t, "stories260K-hf/model.safetensors"))
	raw, err := os.ReadFile(testmodels.Path(t, "stories260K/expected_greedy_200_tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp struct {
		Prompt    []int `json:"prompt_tokens"`
		Generated []int `json:"generated_tokens"`
	}
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, f := range []quantize.Format{quantize.F32, quantize.Q8} {
		t.Run(string(f), func(t *testing.T) {
			m, err := model.Load(ctx, dir, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if f != quantize.F32 {
				if err := m.Quantize(ctx, f, quantize.Options{}, 0); err != nil {
					t.Fatal(err)
				}
			}
			cpu, err := m.NewSession(model.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gs, _ := newGPUSession(t, d, m, 0, 64)
			want, err := cpu.Forward(ctx, exp.Prompt)
			if err != nil {
				t.Fatal(err)
			}
			logits, err := gs.Forward(ctx, exp.Prompt)
			if err != nil {
				t.Fatal(err)
			}
			if e := relL2Of(logits, want); !(e < 1e-3) {
				t.Fatalf("prompt logits: relative L2 %.3g against the CPU", e)
			}
			var got []int
			for i := 0; i < len(exp.Generated); i++ {
				next := model.Argmax(logits)
				got = append(got, next)
				if logits, err = gs.Forward(ctx, []int{next}); err != nil {
					t.Fatal(err)
				}
			}
			if f == quantize.F32 {
				for i := range got {
					if got[i] != exp.Generated[i] {
						t.Fatalf("token %d: %d, want %d (first %d equal)", i, got[i], exp.Generated[i], i)
					}
				}
				return
			}
			same := 0
			for same < len(got) && got[same] == exp.Generated[same] {
				same++
			}
			t.Logf("q8: first %d of %d greedy tokens equal the f32 reference", same, len(got))
		})
	}
}

// TestFuseTQ2 checks a tq2 matrix joined from parts of very different
// scales (BitNet's q, k and v; each part keeps its own as a float per
// row): the joined products, int8 x rounded by the kernel before them
// (MatMul) or while it stages x (the decode path), equal each part's
// float64 reference.
func TestFuseTQ2(t *testing.T) {
	d := openOrSkip(t)
	b, err := NewBackend(d, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(41, 42))
	const cols = 512
	var parts []*model.Weight
	var qs []*quantize.Tensor
	for _, p := range []struct {
		rows  int
		scale float32
	}{{64, 1}, {32, 20}, {32, 0.05}} {
		w := gaussian(r, p.rows*cols)
		for j := range w {
			w[j] *= p.scale
		}
		q, err := quantize.Quantize(context.Background(), quantize.TQ2, w, p.rows, cols, quantize.Options{})
		if err != nil {
			t.Fatal(err)
		}
		parts, qs = append(parts, &model.Weight{Rows: p.rows, Cols: cols, Q: q}), append(qs, q)
	}
	mats, err := b.Upload(parts...)
	if err != nil {
		t.Fatal(err)
	}
	jm := b.mats[mats[0].ID()-1].join
	if jm == nil {
		t.Fatal("tq2 parts were not joined")
	}
	x := gaussian(r, cols)
	var a quantize.Int8Vec
	quantize.QuantizeInt8(x, &a)
	var ref []float64
	for _, q := range qs {
		for row := 0; row < q.Rows; row++ {
			ref = append(ref, q.DotInt8Ref(row, &a))
		}
	}
	xb := up(t, d, x, 0)
	for _, path := range []string{"matmul", "decode"} {
		yb := up(t, d, make([]float32, len(ref)), 0)
		if path == "matmul" {
			b.product(jm, xb, yb, 1)
			if err := b.run(nil); err != nil {
				t.Fatal(err)
			}
		} else {
			run(t, d, func() error { return d.matvecWith(jm, xb, yb, matvecOpts{act: -1, int8: true}) })
		}
		check(t, "joined tq2, "+path, ref, down[float32](t, d, yb, len(ref)), 1e-3)
	}
}

// TestBackendFlatKernels decodes a BitNet fixture whose ternary products
// all take the flat kernels (2048 weights a row: q/k/v, o, gate/up with
// the gated output, down) and again with every product forced onto the
// row-loop kernel (one row a warp, 16 warps), fed the same tokens: the
// logits agree. (Against the CPU this fixture rounds one int8 activation
// the other way at its fourth step, on either kernel: float sums in
// another order, as TestBackendMatchesCPU allows for.)
func TestBackendFlatKernels(t *testing.T) {
	d := openOrSkip(t)
	spec := fixture.Spec{Arch: "BitNetForCausalLM", Hidden: 2048, Intermediate: 2048, Layers: 2, Heads: 16, KVHeads: 4,
		HeadDim: 128, Vocab: 256, Seed: 5}
	m := fixtureModel(t, spec, quantize.TQ2)
	flat, fb := newGPUSession(t, d, m, 64, 4)
	rows, _ := newGPUSession(t, d, m, 64, 4)
	mode := func(k matvecKernel) { d.do(func() error { d.matvecMode = k; return nil }) }
	forward := func(s *model.Session, k matvecKernel, tok []int) []float32 {
		mode(k)
		defer mode(matvecKernel{}) // (t.Fatal too runs it)
		l, err := s.Forward(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tok := []int{3}
	for step := 0; step < 12; step++ {
		a, b := forward(flat, matvecKernel{}, tok), forward(rows, matvecS1W16, tok)
		if e := relL2Of(a, b); !(e < 1e-5) {
			t.Fatalf("step %d: flat kernels' logits off the row-loop kernels' by relative L2 %.3g", step, e)
		}
		tok = []int{model.Argmax(b)}
	}
	if len(fb.joined) == 0 {
		t.Fatal("no joined q/k/v or gate/up weights")
	}
	for _, w := range fb.joined {
		var k matvecKernel
		d.do(func() error { k = d.kernelFor(w, matvecOpts{act: -1, int8: true}); return nil })
		if k.kind != kindFlat {
			t.Errorf("joined %dx%d weight takes kernel %s, not a flat one", w.Rows, w.Cols, k)
		}
	}
}

// TestDraw checks the device's draw against the host's sampler on the
// same logits: for peaked and flat distributions, top-k, top-p, min-p and
// the repetition penalty, every draw the device settles is the host's
// token, and the draws it leaves (-1) are only those whose candidates
// are a head of the vocabulary.
func TestDraw(t *testing.T) {
	d := openOrSkip(t)
	b, err := NewBackend(d, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(41, 42))
	const n = 32000
	for _, tc := range []struct {
		name   string
		spread float64 // logits' standard deviation: large is peaked
		o      model.SamplerOptions
		recent bool
	}{
		{"topk-topp", 3, model.SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9}, false},
		{"topp", 6, model.SamplerOptions{Temperature: 0.8, TopP: 0.9}, false},
		{"minp", 3, model.SamplerOptions{Temperature: 1, MinP: 0.05}, false},
		{"temp-only", 4, model.SamplerOptions{Temperature: 0.7}, false},
		{"flat", 0.5, model.SamplerOptions{Temperature: 1.5, TopP: 0.95}, false},
		{"penalty", 3, model.SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.3, RepeatLastN: 64}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settled := 0
			for i := range 40 {
				x := make([]float32, n)
				for j := range x {
					x[j] = float32(r.NormFloat64() * tc.spread)
				}
				dr := &model.Draw{Options: tc.o, Index: uint64(i)}
				dr.Options.Seed = uint64(7 + i)
				if tc.recent {
					// the likeliest tokens, some twice: the penalty must move the draw
					for j := range 48 {
						dr.Recent = append(dr.Recent, model.Argmax(x)+j%24)
					}
				}
				p, ok := planDraw(dr, n)
				if !ok {
					t.Fatalf("the device does not take %+v", tc.o)
				}
				got, err := b.drawOnce(up(t, d, x, 0), n, dr, p)
				if err != nil {
					t.Fatal(err)
				}
				want := model.SampleDraw(x, dr)
				if got < 0 {
					if !p.partial {
						t.Fatalf("draw %d: not settled over %d exact candidates", i, p.k)
					}
					continue
				}
				settled++
				if got != want {
					t.Fatalf("draw %d: device %d, host %d", i, got, want)
				}
			}
			if tc.spread >= 3 && settled < 30 {
				t.Fatalf("only %d of 40 peaked draws settled on the device", settled)
			}
			t.Logf("%d of 40 settled on the device", settled)
		})
	}
}

// TestChainDraw generates with sampling on the GPU, chained and not: the
// same tokens, with the chained steps' draws in their graphs, through
// truncations and a penalty.
func TestChainDraw(t *testing.T) {
	d := openOrSkip(t)
	ctx := context.Background()
	m := fixtureModel(t, wideSpec("LlamaForCausalLM"), quantize.Q4)
	for _, o := range []model.SamplerOptions{
		{Temperature: 0.8, TopK: 40, TopP: 0.9, Seed: 1},
		{Temperature: 1, TopP: 0.95, Seed: 2},
		{Temperature: 0.8, MinP: 0.05, RepeatPenalty: 1.2, RepeatLastN: 16, Seed: 3},
	} {
		const positions = 96
		chained, cb := newGPUSession(t, d, m, positions, 8)
		plain, pb := newGPUSession(t, d, m, positions, 8)
		pb.noChain = true
		var toks [2][]int
		for i, s := range []*model.Session{chained, plain} {
			sm, err := model.NewSampler(o)
			if err != nil {
				t.Fatal(err)
			}
			st, err := model.Generate(ctx, s, []int{3, 4, 5}, model.GenerateOptions{MaxTokens: 40, Sampler: sm})
			if err != nil {
				t.Fatal(err)
			}
			// A second turn from a truncated history, as a chat edits it.
			s.Truncate(s.Pos() - 5)
			st2, err := model.Generate(ctx, s, []int{6}, model.GenerateOptions{MaxTokens: 40, Sampler: sm})
			if err != nil {
				t.Fatal(err)
			}
			toks[i] = append(st.Tokens, st2.Tokens...)
		}
		if !slices.Equal(toks[0], toks[1]) {
			t.Fatalf("%+v: chained %v, plain %v", o, toks[0], toks[1])
		}
		if onlyStep(t, cb).drawChain == nil {
			t.Fatalf("%+v: the chained steps ran without their draw in the graph", o)
		}
	}
}

// TestStepBatchGPU steps three sequences in cache slots out of order on
// the GPU, prompts chunked beside decode tokens, and holds each one's
// logits to its logits alone on the GPU (within the tolerance of a
// product through another path: rows together, not one by one).
func TestStepBatchGPU(t *testing.T) {
	d := openOrSkip(t)
	ctx := context.Background()
	for _, f := range []quantize.Format{quantize.F32, quantize.Q4} {
		t.Run(string(f), func(t *testing.T) {
			m := fixtureModel(t, wideSpec("LlamaForCausalLM"), f)
			be, err := NewBackend(d, 32)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(be.Close)
			batch, err := m.NewSession(model.SessionOptions{Backend: be, Context: 64, Batch: 32, Slots: 4})
			if err != nil {
				t.Fatal(err)
			}
			prompts := [][]int{{3, 4, 5, 6, 7}, {9, 10, 11}, {12, 13, 14, 15, 16, 17, 18}}
			slots := []int{2, 0, 3}
			// alone: each sequence's logits after its prompt, then after each of 10 more tokens
			alone := make([][][]float32, len(prompts))
			feed := [][]int{{20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}}
			for i, p := range prompts {
				s, _ := newGPUSession(t, d, m, 64, 32)
				l, err := s.Forward(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = append(alone[i], l)
				for _, tok := range feed {
					if l, err = s.Forward(ctx, tok); err != nil {
						t.Fatal(err)
					}
					alone[i] = append(alone[i], l)
				}
			}
			// together: sequence 0's prompt alone, then 1's prompt beside 0's
			// decode, then 2's prompt in two chunks beside the others.
			pos := make([]int, 3)
			got := make([][][]float32, 3)
			step := func(seqs []model.BatchSeq, who []int) {
				t.Helper()
				res, err := batch.StepBatch(ctx, seqs, model.Want{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				v := m.Config.VocabSize
				row := 0
				for j, q := range seqs {
					pos[who[j]] += len(q.Tokens)
					if q.Logits {
						got[who[j]] = append(got[who[j]], res.Logits[row*v:(row+1)*v])
						row++
					}
				}
			}
			next := func(i int) []int { return feed[len(got[i])-1] }
			step([]model.BatchSeq{{Slot: slots[0], Pos: 0, Tokens: prompts[0], Logits: true}}, []int{0})
			step([]model.BatchSeq{{Slot: slots[1], Pos: 0, Tokens: prompts[1], Logits: true}, {Slot: slots[0], Pos: pos[0], Tokens: next(0), Logits: true}}, []int{1, 0})
			step([]model.BatchSeq{{Slot: slots[2], Pos: 0, Tokens: prompts[2][:4]}, {Slot: slots[0], Pos: pos[0], Tokens: next(0), Logits: true}, {Slot: slots[1], Pos: pos[1], Tokens: next(1), Logits: true}}, []int{2, 0, 1})
			step([]model.BatchSeq{{Slot: slots[2], Pos: pos[2], Tokens: prompts[2][4:], Logits: true}, {Slot: slots[0], Pos: pos[0], Tokens: next(0), Logits: true}, {Slot: slots[1], Pos: pos[1], Tokens: next(1), Logits: true}}, []int{2, 0, 1})
			// Decode steps, replayed as a graph: the sequences' order, and so
			// the slot of each row, changes from one step to the next.
			for k := 0; len(got[2]) < len(alone[2]); k++ {
				var seqs []model.BatchSeq
				var who []int
				for i := range 3 {
					if len(got[i]) < len(alone[i]) {
						seqs = append(seqs, model.BatchSeq{Slot: slots[i], Pos: pos[i], Tokens: next(i), Logits: true})
						who = append(who, i)
					}
				}
				if k%2 == 1 {
					slices.Reverse(seqs)
					slices.Reverse(who)
				}
				step(seqs, who)
			}
			for i := range 3 {
				if len(got[i]) != len(alone[i]) {
					t.Fatalf("sequence %d: %d steps together, %d alone", i, len(got[i]), len(alone[i]))
				}
				for j := range got[i] {
					if e := quantize.RelL2(alone[i][j], got[i][j]); e > 1e-3 {
						t.Errorf("sequence %d step %d: relative L2 %.2g against alone", i, j, e)
					}
				}
			}
		})
	}
}
