package validate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"time"

	"lowbit/model"
	"lowbit/quantize"
)

// Act is how a product treats its activations.
type Act string

// Activation modes: float32 as given, int8 per vector by absmax (BitNet's
// W2A8), or signs times the group's mean |x| (XNOR and popcount).
const (
	ActFloat  Act = "float"
	ActInt8   Act = "int8"
	ActBinary Act = "binary"
)

// Backend computes the products of one implementation of the formats.
type Backend interface {
	// Name is "cpu", "cuda", ...
	Name() string
	// MatVec is y = W x with the activation mode act.
	MatVec(t *quantize.Tensor, x []float32, act Act) ([]float32, error)
	// MatMul is Y[n, Rows] = X[n, Cols] Wᵀ with the runtime's activations:
	// int8 per token for tq2, float for the other formats.
	MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error)
}

// Case is one product under test.
type Case struct {
	Format quantize.Format
	Act    Act
	// N is the number of activation vectors: 1 is MatVec, more is MatMul.
	N int
}

// Cases are the products every backend is held to: the decode product of
// every format (q1 also with binary activations) and the prefill product of
// every format. tq2 runs as BitNet does, with activations quantized to int8
// per token: the kernel's quantization of x is part of what is checked (the
// reference quantizes x by its own code), and its cost shows in QuantErr.
// GGUF's block formats come last; RunKernels gives them only the shapes
// whose rows are whole blocks.
func Cases() []Case {
	cases := []Case{
		{quantize.Q1, ActFloat, 1}, {quantize.Q1, ActBinary, 1}, {quantize.Q2, ActFloat, 1},
		{quantize.Q4, ActFloat, 1}, {quantize.Q8, ActFloat, 1}, {quantize.TQ2, ActInt8, 1},
		{quantize.Q1, ActFloat, 5}, {quantize.Q2, ActFloat, 5}, {quantize.Q4, ActFloat, 5},
		{quantize.Q8, ActFloat, 5}, {quantize.TQ2, ActInt8, 5},
	}
	for _, f := range []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K,
		quantize.Q2S, quantize.Q3S, quantize.Q4S} {
		cases = append(cases, Case{f, ActFloat, 1}, Case{f, ActFloat, 5})
	}
	return cases
}

// Shape is a weight matrix's [Rows, Cols].
type Shape struct{ Rows, Cols int }

// Shapes are the default matrix shapes: small and model-sized, with
// columns that are and are not multiples of the group.
func Shapes() []Shape {
	return []Shape{{64, 256}, {37, 200}, {128, 2048}, {24, 1000}}
}

// KernelOptions choose what RunKernels checks.
type KernelOptions struct {
	// Seed draws the inputs (the report carries it, and the same seed
	// replays the same inputs); NewSeed gives a fresh one.
	Seed uint64
	// Backends are the implementations to check.
	Backends []Backend
	// Missing are backends that could not be opened, with the reason; they
	// are reported as skipped, never as passed.
	Missing map[string]string
	// Cases and Shapes default to Cases() and Shapes().
	Cases  []Case
	Shapes []Shape
	// Real, when set, are weight matrices of a model (name -> rows) used
	// as a third kind of input beside the random ones.
	Real []RealWeight
}

// RealWeight is a weight matrix taken from a model.
type RealWeight struct {
	Name       string
	Rows, Cols int
	W          []float32
}

// KernelResult is one product of one backend on one input.
type KernelResult struct {
	Backend string          `json:"backend"`
	Format  quantize.Format `json:"format"`
	Act     Act             `json:"activations"`
	N       int             `json:"n"`
	Rows    int             `json:"rows"`
	Cols    int             `json:"cols"`
	Input   string          `json:"input"`
	// RelErr is the relative L2 error against the float64 reference on
	// the same quantized weights; Tol its pass mark.
	RelErr float64 `json:"rel_err"`
	Tol    float64 `json:"tol"`
	// QuantErr is the error against the original unquantized weights:
	// what the format itself costs (no pass mark).
	QuantErr float64 `json:"quant_err"`
	Status   string  `json:"status"`
	Reason   string  `json:"reason,omitempty"`
}

// BackendSummary counts one backend's results.
type BackendSummary struct {
	Backend string `json:"backend"`
	Status  string `json:"status"`
	Passed  int    `json:"passed"`
	Total   int    `json:"total"`
	Reason  string `json:"reason,omitempty"`
}

// KernelReport is the outcome of RunKernels.
type KernelReport struct {
	Seed     uint64           `json:"seed"`
	Backends []BackendSummary `json:"backends"`
	Results  []KernelResult   `json:"results"`
}

// Passed reports whether no check failed.
func (r *KernelReport) Passed() bool {
	for _, b := range r.Backends {
		if b.Status == Fail {
			return false
		}
	}
	return true
}

// NewSeed is a seed for inputs never drawn before (from the clock).
func NewSeed() uint64 { return uint64(time.Now().UnixNano()) }

// RunKernels checks every backend on every case, shape and input.
func RunKernels(ctx context.Context, opts KernelOptions) (*KernelReport, error) {
	seed := opts.Seed
	cases, shapes := opts.Cases, opts.Shapes
	if cases == nil {
		cases = Cases()
	}
	if shapes == nil {
		shapes = Shapes()
	}
	rep := &KernelReport{Seed: seed}
	type input struct {
		name       string
		rows, cols int
		w          []float32
	}
	rng := rand.New(rand.NewPCG(seed, 0x6c6f77626974))
	var inputs []input
	for _, s := range shapes {
		inputs = append(inputs, input{"gaussian", s.Rows, s.Cols, gaussian(rng, s.Rows*s.Cols)})
		inputs = append(inputs, input{"heavy-tailed", s.Rows, s.Cols, heavyTailed(rng, s.Rows*s.Cols)})
	}
	for _, rw := range opts.Real {
		if len(rw.W) != rw.Rows*rw.Cols {
			return nil, fmt.Errorf("validate: real weight %s: %d values for [%d, %d]", rw.Name, len(rw.W), rw.Rows, rw.Cols)
		}
		inputs = append(inputs, input{"model:" + rw.Name, rw.Rows, rw.Cols, rw.W})
	}
	for _, b := range opts.Backends {
		sum := BackendSummary{Backend: b.Name(), Status: Pass}
		for _, c := range cases {
			for _, in := range inputs {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				if f, _ := c.Format.FallbackFor(in.cols); f != c.Format {
					continue // rows that are not whole blocks of a block format
				}
				x := gaussian(rng, c.N*in.cols)
				if in.name == "heavy-tailed" {
					x = heavyTailed(rng, c.N*in.cols)
				}
				res, err := checkKernel(ctx, b, c, in.name, in.w, in.rows, in.cols, x)
				if err != nil {
					return nil, err
				}
				rep.Results = append(rep.Results, res)
				sum.Total++
				if res.Status == Pass {
					sum.Passed++
				} else {
					sum.Status = Fail
				}
			}
		}
		rep.Backends = append(rep.Backends, sum)
	}
	for name, why := range opts.Missing {
		rep.Backends = append(rep.Backends, BackendSummary{Backend: name, Status: Skipped, Reason: why})
	}
	return rep, nil
}

// checkKernel quantizes w, runs the backend and compares with the reference.
func checkKernel(ctx context.Context, b Backend, c Case, input string, w []float32, rows, cols int, x []float32) (KernelResult, error) {
	res := KernelResult{Backend: b.Name(), Format: c.Format, Act: c.Act, N: c.N, Rows: rows, Cols: cols, Input: input, Tol: Tolerance(c.Format)}
	q, err := quantize.Quantize(ctx, c.Format, w, rows, cols, quantize.Options{Search: true})
	if err != nil {
		return res, fmt.Errorf("validate: quantizing %s [%d, %d]: %w", c.Format, rows, cols, err)
	}
	ref, err := refWeights(q)
	if err != nil {
		return res, err
	}
	orig := make([][]float64, rows)
	for r := range orig {
		orig[r] = make([]float64, cols)
		for j := range orig[r] {
			orig[r][j] = float64(w[r*cols+j])
		}
	}
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	refX := x64
	switch c.Act {
	case ActBinary:
		refX = refBinarize(x64, q.GroupSize)
	case ActInt8:
		refX = refInt8(x64, q.Cols)
	}
	var got []float32
	if c.N == 1 {
		got, err = b.MatVec(q, x, c.Act)
	} else {
		got, err = b.MatMul(q, x, c.N)
	}
	if err == nil && len(got) != c.N*rows {
		err = fmt.Errorf("returned %d values, want %d", len(got), c.N*rows)
	}
	if err != nil {
		res.Status, res.Reason, res.RelErr = Fail, err.Error(), math.NaN()
		return res, nil
	}
	res.RelErr = relL2(refMatMul(ref, refX, c.N), got)
	res.QuantErr = relL2(refMatMul(orig, x64, c.N), got)
	res.Status = Pass
	if !(res.RelErr <= res.Tol) { // NaN fails too
		res.Status = Fail
	}
	return res, nil
}

func gaussian(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// heavyTailed draws Laplace values with one in a hundred an outlier eight
// times larger, as real activations and weights have.
func heavyTailed(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		v := rng.ExpFloat64()
		if rng.IntN(2) == 0 {
			v = -v
		}
		if rng.IntN(100) == 0 {
			v *= 8
		}
		x[i] = float32(v)
	}
	return x
}

// CPU is the CPU backend as the runtime runs it: float products through the
// model package's CPU backend, int8 and binary activations through package
// quantize's fast dot products.
type CPU struct{ Workers int }

// Name implements Backend.
func (CPU) Name() string { return "cpu" }

// MatVec implements Backend.
func (c CPU) MatVec(t *quantize.Tensor, x []float32, act Act) ([]float32, error) {
	if act == ActFloat {
		return c.MatMul(t, x, 1)
	}
	return quantizedActDots(t, x, act)
}

// quantizedActDots is y = W x through quantize's fast row products with
// int8 or binary activations.
func quantizedActDots(t *quantize.Tensor, x []float32, act Act) ([]float32, error) {
	y := make([]float32, t.Rows)
	switch act {
	case ActInt8:
		var v quantize.Int8Vec
		quantize.QuantizeInt8(x, &v)
		for r := range y {
			y[r] = t.DotInt8(r, &v)
		}
	case ActBinary:
		var v quantize.BinaryVec
		quantize.Binarize(x, t.GroupSize, &v)
		for r := range y {
			y[r] = t.DotBinary(r, &v)
		}
	default:
		return nil, fmt.Errorf("validate: unknown activations %q", act)
	}
	return y, nil
}

// MatMul implements Backend.
func (c CPU) MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	return BackendProduct(model.NewCPU(c.Workers), t, x, n)
}

// CPUBackends are the CPU implementations that run in lowbit: the model's
// CPU backend and package quantize's products.
func CPUBackends() []Backend {
	return []Backend{CPU{}, Quantize{Workers: runtime.NumCPU()}}
}

// Quantize is package quantize's own products (MatVec, MatMul and the
// row dot products under them), checked apart from CPU because the model's
// CPU backend replaces them with its own kernels for q4 and q8 rows of whole
// groups and for prefill batches, while other callers (and the backend's
// other shapes) run these.
type Quantize struct{ Workers int }

// Name implements Backend.
func (Quantize) Name() string { return "cpu-quantize" }

// MatVec implements Backend.
func (q Quantize) MatVec(t *quantize.Tensor, x []float32, act Act) ([]float32, error) {
	y := make([]float32, t.Rows)
	i8 := t.Format.Spec().Int8Activations
	switch {
	case act == ActFloat && !i8, act == ActInt8 && i8:
		// quantize.MatVec quantizes tq2's activations to int8 itself.
		quantize.MatVec(context.Background(), t, x, y, q.Workers)
	case act == ActFloat:
		for r := range y {
			y[r] = t.Dot(r, x)
		}
	default:
		return quantizedActDots(t, x, act)
	}
	return y, nil
}

// MatMul implements Backend.
func (q Quantize) MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	y := make([]float32, n*t.Rows)
	quantize.MatMul(context.Background(), t, x, n, y, q.Workers)
	return y, nil
}

// BackendProduct runs y[n, Rows] = x[n, Cols] Wᵀ through a model backend's
// own operations (the activations enter through Embed, as a forward pass's
// do), so any model.Backend can be checked.
func BackendProduct(b model.Backend, t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	w, err := b.Upload(model.QuantWeight(t))
	if err != nil {
		return nil, err
	}
	table, err := b.Upload(model.FloatWeight(n, t.Cols, x))
	if err != nil {
		return nil, err
	}
	xb, err := b.Alloc(n * t.Cols)
	if err != nil {
		return nil, err
	}
	yb, err := b.Alloc(n * t.Rows)
	if err != nil {
		return nil, err
	}
	cache, err := b.NewCache(model.CacheShape{Layers: 1, Slots: 1, Positions: n, KVDim: 1})
	if err != nil {
		return nil, err
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	st := &model.Step{Seqs: []model.Seq{{Tokens: ids}}, Cache: cache}
	_, err = b.Step(context.Background(), st, func() error {
		b.Embed(xb, table[0], 1)
		b.Linear(xb, model.Norm{}, model.Output{Dst: yb, W: w[0]})
		return nil
	})
	if err != nil {
		return nil, err
	}
	y := make([]float32, n*t.Rows)
	if err := b.Read(y, yb); err != nil {
		return nil, err
	}
	return y, nil
}
