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

// Shapes are the architectures RandomModel builds, by name.
var shapeConfigs = map[string]model.Config{
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
}

// Shapes lists the names RandomModel accepts.
func Shapes() []string {
	var s []string
	for k := range shapeConfigs {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// RandomModel builds a model of the named shape whose matrices are random
// codes in format f, or f16 floats (scales sized so activations stay
// finite): speed does not depend on the values, and no file is read. The embedding table is
// q8 (one row is read per token), and so is a ternary model's tied table
// and head; norms are ones.
func RandomModel(ctx context.Context, shape string, f quantize.Format, seed uint64) (*model.Model, error) {
	cfg, ok := shapeConfigs[shape]
	if !ok {
		return nil, fmt.Errorf("bench: unknown shape %q (want %s)", shape, strings.Join(Shapes(), ", "))
	}
	if !f.Quantized() && f != quantize.F16 {
		return nil, fmt.Errorf("bench: random models are f16 or quantized: want f16, q1, q2, q4, q8 or tq2, not %s", f)
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
				ones := make([]float32, shp[0])
				for j := range ones {
					ones[j] = 1
				}
				weights[i] = model.FloatWeight(1, int(shp[0]), ones)
				return nil
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

// randomTensor is a [rows, cols] tensor of random codes in format f, in
// groups of gs weights (none for tq2).
func randomTensor(f quantize.Format, rows, cols, gs int, seed uint64) (*quantize.Tensor, error) {
	spec := f.Spec()
	t := &quantize.Tensor{Format: f, Rows: rows, Cols: cols}
	if !spec.TensorScale {
		t.GroupSize = gs
	}
	r := rand.New(rand.NewPCG(seed, 0x6c6f77626974))
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
