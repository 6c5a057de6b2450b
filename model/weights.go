package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"

	"lowbit/gguf"
	"lowbit/internal/safefile"
	"lowbit/manifest"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// Weight is one tensor of the model, either plain float32 (the exact
// reference path) or a quantized matrix, so that "multiply by a weight" is
// one operation whatever the format. Vectors (norm gains) have Rows = 1.
type Weight struct {
	Rows, Cols int
	// F32 holds Rows*Cols floats when the weight is not quantized.
	F32 []float32
	// Q holds the packed weight when it is quantized.
	Q *quantize.Tensor
	// Half keeps a float matrix in 16-bit floats where the backend can (the
	// GPU: f16, half the bytes a token reads); F32 then holds values that
	// f16 represents exactly, and the CPU computes with them as they are.
	Half bool
}

// FloatWeight wraps a [rows, cols] float32 matrix.
func FloatWeight(rows, cols int, w []float32) *Weight {
	return &Weight{Rows: rows, Cols: cols, F32: w}
}

// QuantWeight wraps a quantized matrix.
func QuantWeight(t *quantize.Tensor) *Weight {
	return &Weight{Rows: t.Rows, Cols: t.Cols, Q: t}
}

// Format is the storage format of the weight (f32 for float weights, f16
// for Half ones).
func (w *Weight) Format() quantize.Format {
	switch {
	case w.Q != nil:
		return w.Q.Format
	case w.Half:
		return quantize.F16
	}
	return quantize.F32
}

// Bytes is the memory the weight's data takes (in its Format).
func (w *Weight) Bytes() int64 {
	if w.Q == nil {
		if w.Half {
			return int64(len(w.F32)) * 2
		}
		return int64(len(w.F32)) * 4
	}
	return int64(len(w.Q.Data) + 2*len(w.Q.Scales) + 2*len(w.Q.Mins) + 4)
}

// Row writes row r of the weight, dequantized, into dst (len >= Cols).
func (w *Weight) Row(r int, dst []float32) {
	if w.Q != nil {
		w.Q.DequantizeRow(r, dst)
		return
	}
	copy(dst, w.F32[r*w.Cols:(r+1)*w.Cols])
}

// rows is rows [lo, hi) of the weight, sharing its memory (a part of a
// joined matrix: Phi-3's qkv_proj and gate_up_proj).
func (w *Weight) rows(lo, hi int) *Weight {
	if w.Q == nil {
		return &Weight{Rows: hi - lo, Cols: w.Cols, F32: w.F32[lo*w.Cols : hi*w.Cols], Half: w.Half}
	}
	q := *w.Q
	rb, ng := q.RowBytes(), q.Groups()
	q.Rows, q.Data = hi-lo, q.Data[lo*rb:hi*rb]
	if q.Scales != nil {
		q.Scales = q.Scales[lo*ng : hi*ng]
	}
	if q.Mins != nil {
		q.Mins = q.Mins[lo*ng : hi*ng]
	}
	q.SqErr, q.SqRef = 0, 0
	return &Weight{Rows: hi - lo, Cols: w.Cols, Q: &q}
}

// gather is the weight of rows idx of w, in that order (a copy).
func (w *Weight) gather(idx []int) *Weight {
	if w.Q == nil {
		out := make([]float32, 0, len(idx)*w.Cols)
		for _, r := range idx {
			out = append(out, w.F32[r*w.Cols:(r+1)*w.Cols]...)
		}
		return &Weight{Rows: len(idx), Cols: w.Cols, F32: out, Half: w.Half}
	}
	q := *w.Q
	rb, ng := q.RowBytes(), q.Groups()
	q.Rows, q.Data, q.Scales, q.Mins = len(idx), nil, nil, nil
	q.SqErr, q.SqRef = 0, 0
	for _, r := range idx {
		q.Data = append(q.Data, w.Q.Data[r*rb:(r+1)*rb]...)
		if w.Q.Scales != nil {
			q.Scales = append(q.Scales, w.Q.Scales[r*ng:(r+1)*ng]...)
		}
		if w.Q.Mins != nil {
			q.Mins = append(q.Mins, w.Q.Mins[r*ng:(r+1)*ng]...)
		}
	}
	return &Weight{Rows: len(idx), Cols: w.Cols, Q: &q}
}

// check verifies that the weight holds the data its shape needs.
func (w *Weight) check(name string) error {
	if w == nil {
		return fmt.Errorf("model: tensor %s is nil", name)
	}
	if w.Q != nil {
		if w.Q.Rows != w.Rows || w.Q.Cols != w.Cols {
			return fmt.Errorf("model: tensor %s: quantized shape [%d, %d] differs from [%d, %d]", name, w.Q.Rows, w.Q.Cols, w.Rows, w.Cols)
		}
		if err := w.Q.Validate(); err != nil {
			return fmt.Errorf("model: tensor %s: %w", name, err)
		}
		return nil
	}
	if len(w.F32) != w.Rows*w.Cols {
		return fmt.Errorf("model: tensor %s has %d values, want %d for [%d, %d]", name, len(w.F32), w.Rows*w.Cols, w.Rows, w.Cols)
	}
	return nil
}

// Model is an architecture with its weights, ready to run through a Backend.
type Model struct {
	Config Config
	// Weights maps HF tensor names to weights (lm_head.weight is absent when tied).
	Weights map[string]*Weight
	// Dir is the directory (or GGUF file) the model was loaded from ("" when
	// built in memory).
	Dir string
	// LoadDuration is the time Load took.
	LoadDuration time.Duration
}

// LoadOptions tune Load.
type LoadOptions struct {
	// Quantize, when a quantized format, quantizes the linear weights of a
	// float (HF) directory, or the float ones of a GGUF file, at load time;
	// the embedding and the output head are stored as q8. Empty keeps
	// floats. Ignored for lowbit directories.
	Quantize quantize.Format
	// GroupSize is the group of Quantize (0: the format's default).
	GroupSize int
	// Workers bounds the goroutines used to quantize (0: GOMAXPROCS).
	Workers int
}

// Load reads a model directory: a converted lowbit directory (manifest.json,
// checked for version and checksums) or a HuggingFace directory
// (config.json and safetensors in F32, F16 or BF16, converted to float32);
// or a GGUF file, a regular file named *.gguf (gguf.go says which
// architectures and types it may hold).
func Load(ctx context.Context, dir string, opts LoadOptions) (*Model, error) {
	start := time.Now()
	var m *Model
	var err error
	if gguf.IsFile(dir) {
		m, err = loadGGUF(ctx, dir, opts)
	} else if _, serr := os.Stat(filepath.Join(dir, manifest.FileName)); serr == nil {
		m, err = loadLowbit(dir)
	} else {
		m, err = loadHF(ctx, dir, opts)
	}
	if err != nil {
		return nil, err
	}
	m.Dir = dir
	m.LoadDuration = time.Since(start)
	return m, nil
}

// loadHF reads config.json and float safetensors.
func loadHF(ctx context.Context, dir string, opts LoadOptions) (*Model, error) {
	data, err := safefile.ReadFile(filepath.Join(dir, "config.json"), MaxConfigSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("model: %s has neither %s (a lowbit model) nor config.json (a HuggingFace model)", dir, manifest.FileName)
		}
		return nil, fmt.Errorf("model: %w", err)
	}
	cfg, err := ParseHFConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer set.Close()
	weights := map[string]*Weight{}
	for _, name := range cfg.ExpectedTensors() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		stored := cfg.StoredAs(name, func(n string) bool { _, ok := set.Info(n); return ok })
		info, ok := set.Info(stored)
		if !ok {
			return nil, fmt.Errorf("model: %s: tensor %s is missing", dir, name)
		}
		rows, cols, err := matrixShape(cfg, name, info.Shape)
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", dir, err)
		}
		b, err := set.Data(stored)
		if err != nil {
			return nil, fmt.Errorf("model: %s: tensor %s: %w", dir, name, err)
		}
		w := make([]float32, rows*cols)
		if err := safetensors.ToFloat32(info.DType, b, w); err != nil {
			return nil, fmt.Errorf("model: %s: tensor %s: %w", dir, name, err)
		}
		weights[name] = FloatWeight(rows, cols, w)
	}
	m, err := New(cfg, weights)
	if err != nil {
		return nil, err
	}
	if opts.Quantize != "" && opts.Quantize != quantize.F32 {
		if err := m.Quantize(ctx, opts.Quantize, quantize.Options{GroupSize: opts.GroupSize}, opts.Workers); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// matrixShape checks a stored shape against the configuration and returns
// it as rows and columns (vectors are one row).
func matrixShape(cfg Config, name string, shape []int64) (rows, cols int, err error) {
	want := cfg.TensorShape(name)
	if fmt.Sprint(want) != fmt.Sprint(shape) {
		return 0, 0, fmt.Errorf("tensor %s has shape %v, the config needs %v", name, shape, want)
	}
	if len(want) == 1 {
		return 1, int(want[0]), nil
	}
	return int(want[0]), int(want[1]), nil
}

// loadLowbit reads a converted directory through its manifest.
func loadLowbit(dir string) (*Model, error) {
	d, err := manifest.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer d.Close()
	cfg, err := ParseConfig(d.Manifest.Architecture)
	if err != nil {
		return nil, fmt.Errorf("model: %s: manifest architecture: %w", dir, err)
	}
	weights := map[string]*Weight{}
	for _, name := range cfg.ExpectedTensors() {
		t, ok := d.Manifest.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("model: %s: tensor %s is missing from the manifest", dir, name)
		}
		rows, cols, err := matrixShape(cfg, name, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", dir, err)
		}
		f, err := quantize.ParseFormat(t.Format)
		if err != nil {
			return nil, fmt.Errorf("model: %s: tensor %s: %w", dir, name, err)
		}
		if f.Quantized() {
			q, err := d.Weight(name)
			if err != nil {
				return nil, fmt.Errorf("model: %w", err)
			}
			// The mapping is closed when Load returns: keep a copy.
			q.Data = append([]byte(nil), q.Data...)
			weights[name] = QuantWeight(q)
			continue
		}
		w, _, err := d.Float32(name)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		weights[name] = FloatWeight(rows, cols, w)
	}
	return New(cfg, weights)
}

// ParseConfig reads a normalized Config as the converter stores it in
// manifest.json (its JSON form, not an HF config.json) and checks it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("architecture is not a model configuration: %w", err)
	}
	if err := c.Check(); err != nil {
		return Config{}, err
	}
	switch c.Activation {
	case "silu", "gelu_tanh", "relu2":
	default:
		return Config{}, fmt.Errorf("field activation %q is not one of silu, gelu_tanh, relu2", c.Activation)
	}
	if c.RopeScaling != nil {
		if err := c.RopeScaling.check(); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// New assembles a model from its configuration and weights (HF names),
// checking that every tensor the architecture needs is there with its shape.
func New(cfg Config, weights map[string]*Weight) (*Model, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	for _, name := range cfg.ExpectedTensors() {
		w, ok := weights[name]
		if !ok || w == nil {
			return nil, fmt.Errorf("model: tensor %s is missing", name)
		}
		want := cfg.TensorShape(name)
		rows, cols := 1, int(want[0])
		if len(want) == 2 {
			rows, cols = int(want[0]), int(want[1])
		}
		if w.Rows != rows || w.Cols != cols {
			return nil, fmt.Errorf("model: tensor %s has shape [%d, %d], the config needs %v", name, w.Rows, w.Cols, want)
		}
		if err := w.check(name); err != nil {
			return nil, err
		}
		if cfg.TensorRole(name) == RoleNorm && w.Q != nil {
			return nil, fmt.Errorf("model: norm %s must be float, is %s", name, w.Q.Format)
		}
	}
	return &Model{Config: cfg, Weights: weights}, nil
}

// Quantize replaces the float linear weights by format f and the embedding
// and output head by q8 (in groups of its TableGroupSize, as convert stores
// them), in place, one tensor per worker (0: GOMAXPROCS);
// norms stay float32. A matrix whose rows are not whole blocks of a block
// format f takes f's fallback instead (quantize.Format.FallbackFor; its
// Weight.Format says which). It lets an HF directory run quantized without
// converting it first (and tests compare the two paths).
func (m *Model) Quantize(ctx context.Context, f quantize.Format, opt quantize.Options, workers int) error {
	if !f.Quantized() {
		return fmt.Errorf("model: cannot quantize to %q", f)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	names := m.Config.ExpectedTensors()
	out := make([]*quantize.Tensor, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, name := range names {
		w := m.Weights[name]
		format := f
		o := opt
		switch m.Config.TensorRole(name) {
		case RoleLinear:
			if fb, _ := f.FallbackFor(w.Cols); fb != f {
				format, o.GroupSize = fb, 0
			}
		case RoleEmbedding, RoleOutput:
			format, o.GroupSize = quantize.Q8, quantize.Q8.TableGroupSize()
		default:
			continue
		}
		if w.Q != nil {
			continue
		}
		g.Go(func() error {
			q, err := quantize.Quantize(gctx, format, w.F32, w.Rows, w.Cols, o)
			if err != nil {
				return fmt.Errorf("model: quantize %s: %w", name, err)
			}
			out[i] = q
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, q := range out {
		if q != nil {
			m.Weights[names[i]] = QuantWeight(q)
		}
	}
	return nil
}

// WeightBytes is the memory the weights take.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, w := range m.Weights {
		n += w.Bytes()
	}
	return n
}

// Output is the weight of the logits: lm_head, or the embedding when tied.
func (m *Model) Output() *Weight {
	if w, ok := m.Weights["lm_head.weight"]; ok && !m.Config.TieEmbeddings {
		return w
	}
	return m.Weights["model.embed_tokens.weight"]
}
