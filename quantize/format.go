// Package quantize defines lowbit's weight formats, each described once by
// a Spec in its own file: how a group of weights is packed into bytes, how
// it is unpacked and dequantized, a reference dot product (plain float64
// loops over the dequantized weights, written to be obviously right) and a
// fast one (working on the packed bytes) that tests hold to the reference.
//
// Weights are [rows, cols] row-major, rows being output features; groups run
// along a row. A row whose length is not a multiple of the group ends in a
// short group. Byte layouts are documented in each format's file and in
// ARCHITECTURE.md; the GPU kernels read the same bytes.
//
// Two kinds of quantized formats share the Spec. Lowbit's own (q8, q4, q2,
// q1, tq2) keep their fp16 scales apart from the packed codes (Tensor.Scales
// and Mins), so a GPU reads codes and scales as separate aligned arrays.
// The block formats (q5_0, q5_1 and the K-quants q2k, q3k, q4k, q5k, q6k)
// are GGUF's block layouts byte for byte, scales inside each block
// (Spec.BlockScales): a GGUF file's tensors load as they are and a GGUF
// writer can copy them back. Their rows must be whole blocks (32 weights,
// 256 for the K-quants' super-blocks); FallbackFor says what a matrix whose
// rows are not takes instead.
package quantize

import (
	"context"
	"fmt"
	"math"
	"strings"

	"lowbit/half"
)

// Format names a storage format.
type Format string

// The formats. F32, F16 and BF16 are kept floats; the others are quantized.
const (
	F32  Format = "f32"
	F16  Format = "f16"
	BF16 Format = "bf16"
	Q8   Format = "q8"
	Q4   Format = "q4"
	Q2   Format = "q2"
	Q1   Format = "q1"
	TQ2  Format = "tq2"
	// GGUF's block formats (Spec.BlockScales).
	Q5_0 Format = "q5_0"
	Q5_1 Format = "q5_1"
	Q2K  Format = "q2k"
	Q3K  Format = "q3k"
	Q4K  Format = "q4k"
	Q5K  Format = "q5k"
	Q6K  Format = "q6k"
	// Lowbit's super-block formats (sblock.go): 4-bit scale codes per 16
	// weights under one float32 per tensor, rows of any length.
	Q2S Format = "q2s"
	Q3S Format = "q3s"
	Q4S Format = "q4s"
)

// Formats lists every format, the floats first: what a caller offering a
// choice of formats (a mixed-precision plan, a sweep) iterates over.
func Formats() []Format {
	return []Format{F32, F16, BF16, Q8, Q4, Q2, Q1, TQ2, Q5_0, Q5_1, Q2K, Q3K, Q4K, Q5K, Q6K, Q2S, Q3S, Q4S}
}

// block is the number of weights in the packing unit of every quantized
// format; group sizes are multiples of it.
const block = 32

// ParseFormat reads a --bits value: 1, 2, 4, 8, ternary, or a format name
// (the block formats also in GGUF's spelling: Q4_K, q4_k, Q5_0).
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "q5_0", "q50":
		return Q5_0, nil
	case "q5_1", "q51":
		return Q5_1, nil
	case "q2k", "q2_k":
		return Q2K, nil
	case "q3k", "q3_k":
		return Q3K, nil
	case "q4k", "q4_k":
		return Q4K, nil
	case "q5k", "q5_k":
		return Q5K, nil
	case "q6k", "q6_k":
		return Q6K, nil
	case "q2s":
		return Q2S, nil
	case "q3s":
		return Q3S, nil
	case "q4s":
		return Q4S, nil
	case "8", "q8", "int8":
		return Q8, nil
	case "4", "q4", "int4":
		return Q4, nil
	case "2", "q2", "int2":
		return Q2, nil
	case "1", "q1", "binary":
		return Q1, nil
	case "ternary", "tq2", "1.58", "b1.58":
		return TQ2, nil
	case "f16", "fp16", "16":
		return F16, nil
	case "bf16":
		return BF16, nil
	case "f32", "fp32", "32":
		return F32, nil
	}
	return "", fmt.Errorf("unknown format %q (want 1, 2, 4, 8, ternary, q5_0, q5_1, q2k, q3k, q4k, q5k, q6k, q2s, q3s, q4s, f16, bf16 or f32)", s)
}

// Spec describes a storage format once: the facts every package asks
// about it and the functions that pack, unpack and multiply its codes.
// Each quantized format's Spec is in its own file (q4Spec in q4.go), the
// float formats' below; everything else asks Format.Spec (or the accessors
// Bits, Quantized, DefaultGroupSize and TableGroupSize) instead of
// switching on the format. TestSpecs holds every Spec to its layout.
type Spec struct {
	// Format is the format described.
	Format Format
	// Bits is the information in one weight: its code's bits, log2(3) for
	// ternary (whose codes are stored in 2 bits); for a block format the
	// bits a weight takes, scales included (GGUF's figure: 4.5 for q4k).
	Bits float64
	// CodeBits is the bits one code takes in a packed block; 0 for a float
	// format.
	CodeBits int
	// Block is the number of weights of the packing unit: 32, or 256 for
	// the K-quants' super-blocks; group sizes are multiples of it.
	Block int
	// BlockBytes is the packed size of a block of Block weights:
	// CodeBits*Block/8, plus the block's scales in a block format.
	BlockBytes int
	// MinCode and MaxCode bound the codes (as RowCodes reads them: signed
	// where the layout stores an offset, q5_0's q-16 in -16..15).
	MinCode, MaxCode int32
	// Group is the default number of weights sharing a scale, 0 for a
	// format with one scale per tensor or none.
	Group int
	// TableGroup is the default group of an embedding table or output head.
	TableGroup int
	// Mins says the format is asymmetric: each group stores an fp16
	// minimum beside its fp16 scale, w = d*q + m (Tensor.Mins, a .mins part).
	Mins bool
	// TensorScale says the format has one float32 scale per tensor
	// (Tensor.Scale, a .scale part) instead of fp16 scales per group.
	TensorScale bool
	// BlockScales says the scales are inside each block (GGUF's layouts):
	// Tensor.Scales and Mins are empty, the group is the block, and rows
	// must be whole blocks.
	BlockScales bool
	// Fallback is the format a matrix whose rows are not whole blocks takes
	// instead of a block format (FallbackFor); empty for the others.
	Fallback Format
	// Int8Activations says products quantize the activations to int8 per
	// token first, as the format's models were trained (BitNet's W2A8).
	Int8Activations bool

	// maxAbs is the largest weight magnitude the format stores, and
	// maxAbsWhy the reason (empty where it is any finite value).
	maxAbs    float32
	maxAbsWhy string
	// quantizeRow packs row r of t from row, adding each weight's error to
	// t.SqErr and t.SqRef (opt.Search: pick scales by squared error, weighted
	// by opt.Importance where given; codes: scratch of GroupSize+32).
	quantizeRow func(t *Tensor, r int, row []float32, opt *Options, codes []int32)
	// pack packs a group's codes (a multiple of 32) into dst (q4, q2).
	pack func(dst []byte, codes []int32)
	// code reads the code of weight c of a packed row, straight from the
	// layout's definition: the reference for every fast path.
	code func(row []byte, c int) int32
	// scale reads, for a block format or a super-block one, the scale and
	// minimum weight c of a packed row is decoded with (w = d*code + m),
	// straight from the layout's definition like code; ts is the tensor's
	// scale (Tensor.Scale), which only the super-block formats read.
	scale func(row []byte, c int, ts float32) (d, m float32)
	// halves are the byte offsets of a block format's fp16 fields in its
	// block, which CheckBlocks holds to finite values.
	halves []int
	// dequantize writes the first len(out) weights packed in blocks (a
	// group's, from its first block) at scale d and minimum m; a block
	// format reads its scales from the blocks and ignores d and m.
	dequantize func(blocks []byte, d, m float32, out []float32)
	// dot is the fast dot product of row r of t with x, on packed bytes.
	dot func(t *Tensor, r int, x []float32) float32
	// dotInt8 is the integer dot product with int8 activations (nil: the
	// activations are dequantized and dot taken).
	dotInt8 func(t *Tensor, r int, a *Int8Vec) float32
	// blocks is a block format's layout as its quantizer sees it (blockq.go).
	blocks *blockLayout
	// sblock is a super-block format's layout (sblock.go).
	sblock *sblockLayout
}

// The float formats keep weights as floats, in the range of their type.
var (
	f32Spec  = Spec{Format: F32, Bits: 32, maxAbs: math.MaxFloat32}
	f16Spec  = Spec{Format: F16, Bits: 16, maxAbs: maxF16, maxAbsWhy: "the largest f16 is 65504"}
	bf16Spec = Spec{Format: BF16, Bits: 16, maxAbs: half.BFloat16(0x7f7f).Float32(), maxAbsWhy: "the largest bf16 is 3.3895314e+38"}
	// unknownSpec answers for a name that is no format: no packing, and
	// nothing to check a weight against.
	unknownSpec = Spec{Bits: 32, maxAbs: math.MaxFloat32}
)

// specs holds every format's Spec for spec's switch (a map lookup would
// cost every row's product four string hashes). init fills it, not its
// declaration, because the Specs' functions reach back into it through
// Tensor.RowBytes, a cycle Go refuses in a variable's initializer.
var specs struct {
	f32, f16, bf16, q8, q4, q2, q1, tq2 *Spec
	q5_0, q5_1, q2k, q3k, q4k, q5k, q6k *Spec
	q2s, q3s, q4s                       *Spec
}

func init() {
	specs.f32, specs.f16, specs.bf16 = &f32Spec, &f16Spec, &bf16Spec
	specs.q8, specs.q4, specs.q2, specs.q1, specs.tq2 = &q8Spec, &q4Spec, &q2Spec, &q1Spec, &tq2Spec
	specs.q5_0, specs.q5_1 = &q5_0Spec, &q5_1Spec
	specs.q2k, specs.q3k, specs.q4k, specs.q5k, specs.q6k = &q2kSpec, &q3kSpec, &q4kSpec, &q5kSpec, &q6kSpec
	specs.q2s, specs.q3s, specs.q4s = &q2sSpec, &q3sSpec, &q4sSpec
}

// Spec is f's descriptor; a name that is no format gets one that is not
// quantized.
func (f Format) Spec() Spec { return *f.spec() }

// spec is f's descriptor, shared (the package only reads it).
func (f Format) spec() *Spec {
	switch f {
	case F32:
		return specs.f32
	case F16:
		return specs.f16
	case BF16:
		return specs.bf16
	case Q8:
		return specs.q8
	case Q4:
		return specs.q4
	case Q2:
		return specs.q2
	case Q1:
		return specs.q1
	case TQ2:
		return specs.tq2
	case Q5_0:
		return specs.q5_0
	case Q5_1:
		return specs.q5_1
	case Q2K:
		return specs.q2k
	case Q3K:
		return specs.q3k
	case Q4K:
		return specs.q4k
	case Q5K:
		return specs.q5k
	case Q6K:
		return specs.q6k
	case Q2S:
		return specs.q2s
	case Q3S:
		return specs.q3s
	case Q4S:
		return specs.q4s
	}
	return &unknownSpec
}

// Bits is the number of bits of one weight's code (1.58 for ternary, whose
// codes are stored in 2 bits).
func (f Format) Bits() float64 { return f.spec().Bits }

// Quantized says whether the format packs codes with scales (not a float).
func (f Format) Quantized() bool { return f.spec().BlockBytes > 0 }

// FallbackFor is the format a matrix whose rows hold cols weights takes
// when f is asked for: f itself, or, for a block format whose blocks do not
// divide cols, its Fallback (a format that takes any row length), with the
// reason for the change, for the caller to report.
func (f Format) FallbackFor(cols int) (Format, string) {
	s := f.spec()
	if !s.BlockScales || cols%s.Block == 0 {
		return f, ""
	}
	return s.Fallback, fmt.Sprintf("rows of %d weights are not whole %d-weight blocks of %s; stored as %s", cols, s.Block, f, s.Fallback)
}

// DefaultGroupSize is the group used when none is given (0 for tq2, which
// has one scale per tensor).
func (f Format) DefaultGroupSize() int { return f.spec().Group }

// TableGroupSize is the default group of an embedding table or output head
// stored in f (q8's Spec says why it differs there).
func (f Format) TableGroupSize() int { return f.spec().TableGroup }

// Options tune quantization.
type Options struct {
	// GroupSize is the number of weights sharing a scale; a multiple of 32
	// (0: default). A block format's group is its block.
	GroupSize int
	// Search picks scales (and minimums) that minimize each group's squared
	// error over a set of clipping candidates, instead of plain min/max.
	Search bool
	// TensorScale, when non-zero, is the tq2 per-tensor absmean to use instead
	// of computing it from w: a tensor quantized chunk by chunk keeps one scale.
	TensorScale float32
	// FirstRow is the row of the whole tensor that w's first row is, when
	// w is a chunk of it: errors name the tensor's rows.
	FirstRow int
	// Importance, when set, holds one non-negative weight per column (cols
	// values): how much an error in that input feature costs the output,
	// from calibration activations. A format's search (with Search)
	// minimizes the error weighted by it instead of the plain squared
	// error. Nil weighs all columns alike.
	Importance []float32
	// Compensate, when set, is the upper Cholesky factor U of the inverse
	// of the inputs' Hessian ([cols, cols], row-major): each row is
	// quantized a column at a time, each column's error compensated on the
	// later ones (gptq.go). Only formats that are Compensable take it.
	Compensate []float32
}

// Tensor is a quantized weight matrix.
type Tensor struct {
	Format     Format
	Rows, Cols int
	// GroupSize is the number of weights per scale (0 for tq2; the block for
	// a block format, whose blocks hold finer scales of their own).
	GroupSize int
	// Data holds the packed codes, Rows*RowBytes() bytes (a block format's
	// scales included).
	Data []byte
	// Scales holds one fp16 scale per group, Rows*Groups() (q8, q4, q2, q1).
	Scales []half.Float16
	// Mins holds one fp16 minimum per group (q4, q2).
	Mins []half.Float16
	// Scale is tq2's per-tensor scale: a weight is Scale times its ternary code.
	Scale float32
	// SqErr and SqRef are filled by Quantize: the squared error of the
	// dequantized weights against the input and the input's squared norm,
	// summed in float64 in row-major order while the codes are at hand (so a
	// caller needs no second, dequantizing pass for the error figure).
	SqErr, SqRef float64
}

// Groups is the number of groups per row.
func (t *Tensor) Groups() int {
	if t.Format.spec().TensorScale || t.GroupSize <= 0 {
		return 0
	}
	return (t.Cols + t.GroupSize - 1) / t.GroupSize
}

// RowBytes is the packed size of one row: whole groups (whole blocks for
// tq2), so every row starts aligned.
func (t *Tensor) RowBytes() int {
	s := t.Format.spec()
	switch {
	case s.BlockBytes == 0:
		return 0
	case s.TensorScale:
		return (t.Cols + s.Block - 1) / s.Block * s.BlockBytes
	}
	return t.Groups() * t.GroupSize / s.Block * s.BlockBytes
}

// Validate checks that the sizes of a tensor (as loaded from disk) agree.
func (t *Tensor) Validate() error {
	if !t.Format.Quantized() {
		return fmt.Errorf("format %q is not a quantized format", t.Format)
	}
	if t.Rows <= 0 || t.Cols <= 0 {
		return fmt.Errorf("%s tensor has shape [%d, %d]", t.Format, t.Rows, t.Cols)
	}
	s := t.Format.spec()
	if s.BlockScales {
		if t.GroupSize != s.Block {
			return fmt.Errorf("%s has %d-weight blocks with their own scales, group size %d given", t.Format, s.Block, t.GroupSize)
		}
		if t.Cols%s.Block != 0 {
			return fmt.Errorf("%s [%d, %d]: rows of %d weights are not whole %d-weight blocks", t.Format, t.Rows, t.Cols, t.Cols, s.Block)
		}
	} else if s.TensorScale {
		if t.GroupSize != 0 {
			return fmt.Errorf("%s has no groups, group size %d given", t.Format, t.GroupSize)
		}
		if !(t.Scale > 0) || math.IsInf(float64(t.Scale), 0) {
			return fmt.Errorf("%s scale %v is not a positive number", t.Format, t.Scale)
		}
	} else if t.GroupSize <= 0 || t.GroupSize%block != 0 {
		return fmt.Errorf("group size %d is not a positive multiple of %d", t.GroupSize, block)
	}
	if want := t.Rows * t.RowBytes(); len(t.Data) != want {
		return fmt.Errorf("%s [%d, %d]: %d packed bytes, want %d", t.Format, t.Rows, t.Cols, len(t.Data), want)
	}
	ng := t.Rows * t.Groups()
	if s.BlockScales {
		ng = 0
	}
	if !s.TensorScale && len(t.Scales) != ng {
		return fmt.Errorf("%s [%d, %d]: %d scales, want %d", t.Format, t.Rows, t.Cols, len(t.Scales), ng)
	}
	wantMins := 0
	if s.Mins {
		wantMins = ng
	}
	if len(t.Mins) != wantMins {
		return fmt.Errorf("%s [%d, %d]: %d mins, want %d", t.Format, t.Rows, t.Cols, len(t.Mins), wantMins)
	}
	return nil
}

// Quantize packs a [rows, cols] float32 matrix in format f.
func Quantize(ctx context.Context, f Format, w []float32, rows, cols int, opt Options) (*Tensor, error) {
	if !f.Quantized() {
		return nil, fmt.Errorf("quantize: %q is not a quantized format", f)
	}
	if rows <= 0 || cols <= 0 || len(w) != rows*cols {
		return nil, fmt.Errorf("quantize: %d values do not make a [%d, %d] matrix", len(w), rows, cols)
	}
	if err := f.CheckRange(w, cols, opt.FirstRow); err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	if opt.Importance != nil && len(opt.Importance) != cols {
		return nil, fmt.Errorf("quantize: %d importance weights for %d columns", len(opt.Importance), cols)
	}
	if opt.Compensate != nil {
		if err := checkCompensate(f, opt.Compensate, cols); err != nil {
			return nil, fmt.Errorf("quantize: %w", err)
		}
	}
	s := f.spec()
	t := &Tensor{Format: f, Rows: rows, Cols: cols}
	if s.BlockScales {
		if opt.GroupSize != 0 && opt.GroupSize != s.Block {
			return nil, fmt.Errorf("quantize: %s has %d-weight blocks with their own scales; group size %d does not apply", f, s.Block, opt.GroupSize)
		}
		if cols%s.Block != 0 {
			return nil, fmt.Errorf("quantize: %s needs rows that are a multiple of %d weights (its blocks), these have %d", f, s.Block, cols)
		}
		t.GroupSize = s.Block
	} else if !s.TensorScale {
		t.GroupSize = opt.GroupSize
		if t.GroupSize == 0 {
			t.GroupSize = f.DefaultGroupSize()
		}
		if t.GroupSize < 0 || t.GroupSize%block != 0 {
			return nil, fmt.Errorf("quantize: group size %d is not a positive multiple of %d", t.GroupSize, block)
		}
		t.Scales = make([]half.Float16, rows*t.Groups())
		if s.Mins {
			t.Mins = make([]half.Float16, rows*t.Groups())
		}
	}
	t.Data = make([]byte, rows*t.RowBytes())
	if s.TensorScale {
		scale := opt.TensorScale
		if scale == 0 {
			scale = f.TensorScaleOf(w, cols)
		}
		t.Scale = max(scale, tq2MinScale)
	}
	codes := make([]int32, max(t.GroupSize, s.Block)+block)
	quantizeRow := s.quantizeRow
	if opt.Compensate != nil {
		cp := newCompensator(cols, t.GroupSize)
		quantizeRow = cp.quantizeRow
		if s.sblock != nil {
			quantizeRow = cp.quantizeSblockRow
		}
	}
	for r := 0; r < rows; r++ {
		if r%256 == 0 || opt.Compensate != nil && r%8 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		quantizeRow(t, r, w[r*cols:(r+1)*cols], &opt, codes)
	}
	return t, nil
}

// addErr adds one weight's squared error (ref the input, v its dequantized
// value) to SqErr and SqRef.
func (t *Tensor) addErr(ref, v float32) {
	r := float64(ref)
	d := float64(v) - r
	t.SqErr += d * d
	t.SqRef += r * r
}

// FirstNonFinite is the index of the first NaN or Inf in w, or -1.
func FirstNonFinite(w []float32) int { return firstAbove(w, math.MaxFloat32) }

// firstAbove is the index of the first weight of w whose magnitude is above
// limit (NaN and ±Inf are above every limit), or -1. With the sign bit
// cleared, float32 bit patterns order as magnitudes do, NaN above Inf, so
// one unsigned maximum per block finds such a weight without a branch.
func firstAbove(w []float32, limit float32) int {
	lim := math.Float32bits(limit)
	for b := 0; b < len(w); b += 64 {
		blk := w[b:min(b+64, len(w))]
		var acc uint32
		for _, v := range blk {
			acc = max(acc, math.Float32bits(v)&0x7fffffff)
		}
		if acc > lim {
			for i, v := range blk {
				if math.Float32bits(v)&0x7fffffff > lim {
					return b + i
				}
			}
		}
	}
	return -1
}

// maxF16 is the largest finite binary16 value, the most an fp16 scale or
// minimum holds.
const maxF16 = 65504

// CheckRange reports the first weight of w, a matrix of cols columns whose
// first row is row firstRow of the whole (a caller converting a tensor chunk
// by chunk passes the chunk's first row), that f cannot store: NaN, ±Inf, or
// a finite value its scales would overflow on (1e10 at q4 would give an
// infinite scale and NaN weights).
func (f Format) CheckRange(w []float32, cols, firstRow int) error {
	s := f.spec()
	i := firstAbove(w, s.maxAbs)
	if i < 0 {
		return nil
	}
	row, col := firstRow+i/cols, i%cols
	v := w[i]
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return fmt.Errorf("non-finite weight %v at row %d, column %d", v, row, col)
	}
	return fmt.Errorf("weight %g at row %d, column %d is out of range for %s (%s)", v, row, col, f, s.maxAbsWhy)
}

// TensorScaleOf is the per-tensor scale (Options.TensorScale) of f for
// w, rows of cols weights: tq2's mean absolute weight; a super-block
// format's largest sub-block scale.
func (f Format) TensorScaleOf(w []float32, cols int) float32 {
	var ts TensorScaler
	ts.Add(f, w, cols)
	return ts.Scale(f)
}

// TensorScaler gathers a per-tensor scale over a tensor's chunks of rows,
// so that a tensor quantized a chunk at a time keeps the scale of the
// whole (TensorScaleOf of all its rows at once).
type TensorScaler struct {
	sum float64 // Σ|w| (tq2)
	n   int
	top float32 // the largest sub-block scale (super-block formats)
}

// Add takes a chunk of whole rows of cols weights in format f.
func (ts *TensorScaler) Add(f Format, w []float32, cols int) {
	if l := f.spec().sblock; l != nil {
		ts.top = max(ts.top, l.tensorScale(w, cols))
		return
	}
	ts.sum += AbsMean(w) * float64(len(w))
	ts.n += len(w)
}

// Scale is the scale of the rows added, for format f.
func (ts *TensorScaler) Scale(f Format) float32 {
	if f.spec().sblock != nil {
		return ts.top
	}
	if ts.n == 0 {
		return 0
	}
	return float32(ts.sum / float64(ts.n))
}

// AbsMean is the mean absolute value of w, in float64.
func AbsMean(w []float32) float64 {
	if len(w) == 0 {
		return 0
	}
	var s float64
	for _, v := range w {
		s += math.Abs(float64(v))
	}
	return s / float64(len(w))
}

// group returns the bounds of group g of a row of n weights.
func groupBounds(g, size, n int) (lo, hi int) {
	lo = g * size
	return lo, min(lo+size, n)
}

// RowCodes unpacks a row's integer codes: q8 -127..127, q4 0..15, q2 0..3,
// q1 -1/+1, tq2 -1/0/+1; a block format's as Spec.MinCode and MaxCode say.
func (t *Tensor) RowCodes(row int) []int32 {
	code := t.Format.spec().code
	out := make([]int32, t.Cols)
	src := t.rowData(row)
	for c := range out {
		out[c] = code(src, c)
	}
	return out
}

// rowData is the packed bytes of a row.
func (t *Tensor) rowData(row int) []byte {
	rb := t.RowBytes()
	return t.Data[row*rb : (row+1)*rb]
}

// CheckBlocks reports the first block of a block format whose fp16 scale
// or minimum is infinite or NaN, which would make the block's weights so:
// no quantizer writes one, but a file may hold it. Other formats pass.
func (t *Tensor) CheckBlocks() error {
	s := t.Format.spec()
	if !s.BlockScales {
		return nil
	}
	for b := 0; b+s.BlockBytes <= len(t.Data); b += s.BlockBytes {
		for _, off := range s.halves {
			h := half.Float16(uint16(t.Data[b+off]) | uint16(t.Data[b+off+1])<<8)
			if h&0x7c00 == 0x7c00 {
				n := b / s.BlockBytes
				per := t.Cols / s.Block
				return fmt.Errorf("%s block %d (row %d) has the f16 %v at byte %d of its %d", t.Format, n, n/per, h.Float32(), off, s.BlockBytes)
			}
		}
	}
	return nil
}

// DequantizeRow writes row's weights into dst (len >= Cols), decoding the
// packed bytes a block at a time.
func (t *Tensor) DequantizeRow(row int, dst []float32) {
	s := t.Format.spec()
	src := t.rowData(row)
	if s.BlockScales {
		s.dequantize(src, 0, 0, dst[:t.Cols])
		return
	}
	if s.TensorScale {
		s.dequantize(src, t.Scale, 0, dst[:t.Cols])
		return
	}
	ng := t.Groups()
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		var m float32
		if t.Mins != nil {
			m = t.Mins[row*ng+g].Float32()
		}
		s.dequantize(src[lo/s.Block*s.BlockBytes:], t.Scales[row*ng+g].Float32(), m, dst[lo:hi])
	}
}

// weight is one dequantized weight from its code.
func (t *Tensor) weight(row, c int, q int32) float32 {
	s := t.Format.spec()
	if s.scale != nil {
		d, m := s.scale(t.rowData(row), c, t.Scale)
		return float32(d*float32(q)) + m
	}
	if s.TensorScale {
		return float32(q) * t.Scale
	}
	g := row*t.Groups() + c/t.GroupSize
	d := t.Scales[g].Float32()
	if s.Mins {
		return d*float32(q) + t.Mins[g].Float32()
	}
	return d * float32(q)
}

// DequantizeRowRef writes row's weights into dst (len >= Cols) one by one,
// each from its code and scale read straight from the layout's definition:
// the reference DequantizeRow is held to.
func (t *Tensor) DequantizeRowRef(row int, dst []float32) {
	for c, q := range t.RowCodes(row) {
		dst[c] = t.weight(row, c, q)
	}
}

// Dequantize returns the whole matrix as float32.
func (t *Tensor) Dequantize() []float32 {
	out := make([]float32, t.Rows*t.Cols)
	for r := 0; r < t.Rows; r++ {
		t.DequantizeRow(r, out[r*t.Cols:])
	}
	return out
}

// DotRef is the reference dot product of row with x: float64 sums over the
// dequantized weights, deliberately simple.
func (t *Tensor) DotRef(row int, x []float64) float64 {
	codes := t.RowCodes(row)
	var s float64
	for c, q := range codes {
		s += float64(t.weight(row, c, q)) * x[c]
	}
	return s
}

// Dot is the fast dot product of row with x (len >= Cols), on packed bytes.
func (t *Tensor) Dot(row int, x []float32) float32 {
	return t.Format.spec().dot(t, row, x)
}

// RelL2 is ||got - ref|| / ||ref|| in float64; NaN when either holds a NaN,
// +Inf when ref is all zeros and got is not. Float32 squares (at most 1.2e77)
// summed in float64 cannot overflow, so finite inputs of any size give a
// finite figure.
func RelL2(ref, got []float32) float64 {
	var num, den float64
	for i := range ref {
		d := float64(got[i]) - float64(ref[i])
		num += d * d
		den += float64(ref[i]) * float64(ref[i])
	}
	if math.IsNaN(num) || math.IsNaN(den) {
		return math.NaN()
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}
