// Package bench measures a model's prompt processing (pp) and token
// generation (tg) speed as llama-bench reports them (tokens per second,
// mean ± standard deviation over repetitions), the memory bandwidth decode
// achieves, and, for benchmarks without a download, builds models of real
// architectures' exact shapes with random quantized weights.
package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"

	"lowbit/half"
	"lowbit/model"
	"lowbit/quantize"
)

// shapeConfigs are the architectures RandomModel builds, by name: each a
// real model's config.json in normalized form. A function, so that no
// caller shares (and could change) another's slices.
func shapeConfigs() map[string]model.Config {
	return map[string]model.Config{
		"tinyllama": {Arch: "llama", HFArchitecture: "LlamaForCausalLM", HiddenSize: 2048, IntermediateSize: 5632,
			NumLayers: 22, NumHeads: 32, NumKVHeads: 4, HeadDim: 64, VocabSize: 32000, MaxPositions: 2048,
			RMSNormEps: 1e-5, RopeTheta: 10000, Activation: "silu", BOS: 1, EOS: []int{2}},
		"llama2-7b": {Arch: "llama", HFArchitecture: "LlamaForCausalLM", HiddenSize: 4096, IntermediateSize: 11008,
			NumLayers: 32, NumHeads: 32, NumKVHeads: 32, HeadDim: 128, VocabSize: 32000, MaxPositions: 4096,
			RMSNormEps: 1e-5, RopeTheta: 10000, Activation: "silu", BOS: 1, EOS: []int{2}},
		"bitnet-2b": {Arch: "bitnet", HFArchitecture: "BitNetForCausalLM", HiddenSize: 2560, IntermediateSize: 6912,
			NumLayers: 30, NumHeads: 20, NumKVHeads: 5, HeadDim: 128, VocabSize: 128256, MaxPositions: 4096,
			RMSNormEps: 1e-5, RopeTheta: 500000, Activation: "relu2", SubNorms: true, TieEmbeddings: true,
			BOS: 128000, EOS: []int{128001}},
		// meta-llama/Llama-3.1-8B-Instruct.
		"llama3.1-8b": {Arch: "llama", HFArchitecture: "LlamaForCausalLM", HiddenSize: 4096, IntermediateSize: 14336,
			NumLayers: 32, NumHeads: 32, NumKVHeads: 8, HeadDim: 128, VocabSize: 128256, MaxPositions: 131072,
			RMSNormEps: 1e-5, RopeTheta: 500000, Activation: "silu", BOS: 128000, EOS: []int{128001, 128008, 128009},
			RopeScaling: &model.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}},
		// Qwen/Qwen2.5-7B-Instruct (its sliding window is off: use_sliding_window false).
		"qwen2.5-7b": {Arch: "qwen2", HFArchitecture: "Qwen2ForCausalLM", HiddenSize: 3584, IntermediateSize: 18944,
			NumLayers: 28, NumHeads: 28, NumKVHeads: 4, HeadDim: 128, VocabSize: 152064, MaxPositions: 32768,
			RMSNormEps: 1e-6, RopeTheta: 1000000, Activation: "silu", QKVBias: true,
			BOS: 151643, EOS: []int{151645}},
		// Qwen/Qwen3-8B.
		"qwen3-8b": {Arch: "qwen3", HFArchitecture: "Qwen3ForCausalLM", HiddenSize: 4096, IntermediateSize: 12288,
			NumLayers: 36, NumHeads: 32, NumKVHeads: 8, HeadDim: 128, VocabSize: 151936, MaxPositions: 40960,
			RMSNormEps: 1e-6, RopeTheta: 1000000, Activation: "silu", QKNorm: true,
			BOS: 151643, EOS: []int{151645}},
		// google/gemma-2-9b-it: layers alternate a 4096-token window
		// (even layers, as transformers' Gemma2 sets them) with full
		// attention.
		"gemma2-9b": {Arch: "gemma2", HFArchitecture: "Gemma2ForCausalLM", HiddenSize: 3584, IntermediateSize: 14336,
			NumLayers: 42, NumHeads: 16, NumKVHeads: 8, HeadDim: 256, VocabSize: 256000, MaxPositions: 8192,
			RMSNormEps: 1e-6, RopeTheta: 10000, TieEmbeddings: true, Activation: "gelu_tanh",
			NormPlusOne: true, EmbedScale: true, SandwichNorms: true, AttnSoftCap: 50, FinalSoftCap: 30,
			QueryPreAttnScalar: 256, LayerWindows: evenLayerWindows(42, 4096),
			BOS: 2, EOS: []int{1}},
		// microsoft/Phi-3.5-mini-instruct. Its longrope scaling is left
		// out: it changes the rotation's frequencies, not the work a
		// token costs, so the bench shape rotates unscaled.
		"phi3.5-mini": {Arch: "phi3", HFArchitecture: "Phi3ForCausalLM", HiddenSize: 3072, IntermediateSize: 8192,
			NumLayers: 32, NumHeads: 32, NumKVHeads: 32, HeadDim: 96, VocabSize: 32064, MaxPositions: 131072,
			RMSNormEps: 1e-5, RopeTheta: 10000, Activation: "silu",
			BOS: 1, EOS: []int{32000}},
	}
}

// evenLayerWindows is Gemma 2's pattern of windows: window on the even
// layers, 0 (all positions) on the odd ones.
func evenLayerWindows(layers, window int) []int {
	w := make([]int, layers)
	for l := 0; l < layers; l += 2 {
		w[l] = window
	}
	return w
}

// Shapes lists the names RandomModel accepts.
func Shapes() []string {
	var s []string
	for k := range shapeConfigs() {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// RandomModel builds a model of the named shape whose matrices are random
// codes in format f, or f16 floats (scales sized so activations stay
// finite): speed does not depend on the values, and no file is read. The embedding table is
// q8 (one row is read per token), and so is a ternary model's tied table
// and head. Every 1-D tensor, whatever its family calls it, is a bias
// (zeros) or a norm's gain (one, stored as 0 where the model scales by
// 1 + w), so a new family's extra vectors need nothing here.
func RandomModel(ctx context.Context, shape string, f quantize.Format, seed uint64) (*model.Model, error) {
	cfg, ok := shapeConfigs()[shape]
	if !ok {
		return nil, fmt.Errorf("bench: unknown shape %q (want %s)", shape, strings.Join(Shapes(), ", "))
	}
	if !f.Quantized() && f != quantize.F16 {
		return nil, fmt.Errorf("bench: random models are f16 or quantized: want f16 or a quantized format, not %s", f)
	}
	names := cfg.ExpectedTensors()
	weights := make([]*model.Weight, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, name := range names {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			shp := cfg.TensorShape(name)
			if len(shp) == 1 {
				weights[i] = model.FloatWeight(1, int(shp[0]), vector(cfg, name, int(shp[0])))
				return nil
			}
			if len(shp) != 2 {
				return fmt.Errorf("bench: %s: the %s config gives it shape %v, want 1 or 2 dimensions", name, shape, shp)
			}
			rows, cols := int(shp[0]), int(shp[1])
			if f == quantize.F16 {
				weights[i] = randomHalf(rows, cols, seed+uint64(i))
				return nil
			}
			tf, gs := f, f.DefaultGroupSize()
			if name == "model.embed_tokens.weight" && (!cfg.TieEmbeddings || f == quantize.TQ2) {
				// An untied table is only looked up; a ternary model keeps
				// its (tied) table and head at 8 bits, as convert makes it.
				tf = quantize.Q8
			}
			if fb, _ := tf.FallbackFor(cols); fb != tf {
				tf, gs = fb, fb.DefaultGroupSize() // rows not whole blocks, as convert stores them
			}
			if role := cfg.TensorRole(name); role == model.RoleEmbedding || role == model.RoleOutput {
				gs = tf.TableGroupSize() // (as convert groups tables and heads)
			}
			t, err := randomTensor(tf, rows, cols, gs, seed+uint64(i))
			if err != nil {
				return fmt.Errorf("bench: %s: %w", name, err)
			}
			weights[i] = model.QuantWeight(t)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ws := map[string]*model.Weight{}
	for i, name := range names {
		ws[name] = weights[i]
	}
	return model.New(cfg, ws)
}

// vector is the value of 1-D tensor name: a bias is zeros; a norm's gain
// scales by one (stored as 0 when the model scales by 1 + w).
func vector(cfg model.Config, name string, n int) []float32 {
	v := make([]float32, n)
	if strings.HasSuffix(name, ".bias") || cfg.NormPlusOne {
		return v
	}
	for j := range v {
		v[j] = 1
	}
	return v
}

// randomTensor is a [rows, cols] tensor of random codes in format f, in
// groups of gs weights (none for tq2).
func randomTensor(f quantize.Format, rows, cols, gs int, seed uint64) (*quantize.Tensor, error) {
	spec := f.Spec()
	t := &quantize.Tensor{Format: f, Rows: rows, Cols: cols}
	if !spec.TensorScale {
		t.GroupSize = gs
	}
	r := rand.New(rand.NewPCG(seed, 0x6c6f77626974))
	if spec.BlockScales {
		return randomBlocks(f, rows, cols, r)
	}
	t.Data = make([]byte, rows*t.RowBytes())
	if f == quantize.TQ2 {
		// Codes 0..2 (ternary -1, 0, +1), four to a byte.
		var valid []byte
		for b := 0; b < 256; b++ {
			if b&3 != 3 && b>>2&3 != 3 && b>>4&3 != 3 && b>>6 != 3 {
				valid = append(valid, byte(b))
			}
		}
		for i := range t.Data {
			t.Data[i] = valid[r.IntN(len(valid))]
		}
		t.Scale = 1 / float32(cols)
		return t, t.Validate()
	}
	for i := 0; i+8 <= len(t.Data); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			t.Data[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(t.Data) &^ 7; i < len(t.Data); i++ {
		t.Data[i] = byte(r.Uint32())
	}
	if spec.TensorScale {
		// A super-block format: random sub-block bytes under a tensor
		// scale of about 1/(levels * sqrt(cols)), as below.
		t.Scale = float32(1 / (float64(spec.MaxCode) * math.Sqrt(float64(cols))))
		return t, t.Validate()
	}
	// Scales of about 1/(levels * sqrt(cols)): each product's output stays
	// near the size of its input. levels is the largest code, or for an
	// asymmetric format half the codes (its minimum centres them).
	levels := float64(spec.MaxCode)
	if spec.Mins {
		levels = float64(spec.MaxCode+1) / 2
	}
	base := 1 / (levels * math.Sqrt(float64(cols)))
	ng := rows * t.Groups()
	t.Scales = make([]half.Float16, ng)
	for i := range t.Scales {
		t.Scales[i] = half.FromFloat32(float32(base * (0.5 + r.Float64())))
	}
	if spec.Mins {
		t.Mins = make([]half.Float16, ng)
		for i := range t.Mins {
			t.Mins[i] = half.FromFloat32(-float32(levels) * t.Scales[i].Float32())
		}
	}
	return t, t.Validate()
}

// randomBlocks is a [rows, cols] tensor in block format f, whose blocks
// carry their own scales: eight rows of random weights about 1/sqrt(cols)
// in size, quantized, their bytes repeated down the matrix.
func randomBlocks(f quantize.Format, rows, cols int, r *rand.Rand) (*quantize.Tensor, error) {
	n := min(rows, 8)
	w := make([]float32, n*cols)
	s := 1 / math.Sqrt(float64(cols))
	for i := range w {
		w[i] = float32(r.NormFloat64() * s)
	}
	t, err := quantize.Quantize(context.Background(), f, w, n, cols, quantize.Options{})
	if err != nil {
		return nil, err
	}
	rb := t.RowBytes()
	data := make([]byte, rows*rb)
	for i := range rows {
		copy(data[i*rb:], t.Data[i%n*rb:(i%n+1)*rb])
	}
	t.Rows, t.Data, t.SqErr, t.SqRef = rows, data, 0, 0
	return t, t.Validate()
}

// randomHalf is a float matrix of values f16 holds exactly, about
// 1/sqrt(cols) in size, marked to stay in 16 bits on the device.
func randomHalf(rows, cols int, seed uint64) *model.Weight {
	r := rand.New(rand.NewPCG(seed, 0x6c6f77626974))
	w := make([]float32, rows*cols)
	s := float32(1 / math.Sqrt(float64(cols)))
	for i := range w {
		w[i] = half.Round16((r.Float32()*2 - 1) * s)
	}
	x := model.FloatWeight(rows, cols, w)
	x.Half = true
	return x
}
