// Package quantize defines lowbit's weight formats, one file each: how a
// group of weights is packed into bytes, how it is unpacked and
// dequantized, a reference dot product (plain float64 loops over the
// dequantized weights, written to be obviously right) and a fast one (working
// on the packed bytes) that tests hold to the reference.
//
// Weights are [rows, cols] row-major, rows being output features; groups run
// along a row. A row whose length is not a multiple of the group ends in a
// short group. Byte layouts are documented in each format's file and in
// ARCHITECTURE.md; the GPU kernels read the same bytes.
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
)

// block is the number of weights in the packing unit of every quantized
// format; group sizes are multiples of it.
const block = 32

// ParseFormat reads a --bits value: 1, 2, 4, 8, ternary, or a format name.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
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
	return "", fmt.Errorf("unknown format %q (want 1, 2, 4, 8, ternary, f16, bf16 or f32)", s)
}

// Bits is the number of bits of one weight's code (1.58 for ternary, whose
// codes are stored in 2 bits).
func (f Format) Bits() float64 {
	switch f {
	case Q8:
		return 8
	case Q4:
		return 4
	case Q2:
		return 2
	case Q1:
		return 1
	case TQ2:
		return math.Log2(3)
	case F16, BF16:
		return 16
	}
	return 32
}

// Quantized says whether the format packs codes with scales (not a float).
func (f Format) Quantized() bool {
	switch f {
	case Q8, Q4, Q2, Q1, TQ2:
		return true
	}
	return false
}

// DefaultGroupSize is the group used when none is given. q2 uses 32 as well:
// its fp16 scale and minimum then cost 1 bit per weight; group 64 would halve
// that at the price of a larger error, and with only four levels per weight
// the smaller group is the safer default (--group-size 64 trades it back).
// tq2 has one scale per tensor, so 0.
func (f Format) DefaultGroupSize() int {
	switch f {
	case Q8, Q4, Q2, Q1:
		return 32
	}
	return 0
}

// TableGroupSize is the default group of an embedding table or output head
// stored in f: 128 at 8 bits, else DefaultGroupSize. These are a model's
// largest tensors, and at batch 1 the head is read whole every token; at 8
// bits a 128-weight group cuts the fp16 scales from 6% of its bytes to 1.6%
// (8.125 bits a weight against 8.5) for a rounding error 1.2x-1.3x larger on
// Gaussian or Laplace rows (0.64% and 0.88% relative, against 0.52% and
// 0.66%), still well below what 6-bit heads cost (BitNet-2B decode +1.3%,
// H100, BENCHMARKS.md).
func (f Format) TableGroupSize() int {
	if f == Q8 {
		return 128
	}
	return f.DefaultGroupSize()
}

// Options tune quantization.
type Options struct {
	// GroupSize is the number of weights sharing a scale; a multiple of 32 (0: default).
	GroupSize int
	// Search picks scales (and minimums) that minimize each group's squared
	// error over a set of clipping candidates, instead of plain min/max.
	Search bool
	// TensorScale, when non-zero, is the tq2 per-tensor absmean to use instead
	// of computing it from w: a tensor quantized chunk by chunk keeps one scale.
	TensorScale float32
}

// Tensor is a quantized weight matrix.
type Tensor struct {
	Format     Format
	Rows, Cols int
	// GroupSize is the number of weights per scale (0 for tq2).
	GroupSize int
	// Data holds the packed codes, Rows*RowBytes() bytes.
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
	if t.Format == TQ2 || t.GroupSize <= 0 {
		return 0
	}
	return (t.Cols + t.GroupSize - 1) / t.GroupSize
}

// RowBytes is the packed size of one row: whole groups (whole 32-weight
// blocks for tq2), so every row starts aligned.
func (t *Tensor) RowBytes() int {
	if t.Format == TQ2 {
		return (t.Cols + block - 1) / block * blockBytes(TQ2)
	}
	return t.Groups() * t.GroupSize / block * blockBytes(t.Format)
}

// blockBytes is the packed size of 32 weights.
func blockBytes(f Format) int {
	switch f {
	case Q8:
		return 32
	case Q4:
		return 16
	case Q2, TQ2:
		return 8
	case Q1:
		return 4
	}
	return 0
}

// Validate checks that the sizes of a tensor (as loaded from disk) agree.
func (t *Tensor) Validate() error {
	if !t.Format.Quantized() {
		return fmt.Errorf("format %q is not a quantized format", t.Format)
	}
	if t.Rows <= 0 || t.Cols <= 0 {
		return fmt.Errorf("%s tensor has shape [%d, %d]", t.Format, t.Rows, t.Cols)
	}
	if t.Format == TQ2 {
		if t.GroupSize != 0 {
			return fmt.Errorf("tq2 has no groups, group size %d given", t.GroupSize)
		}
		if !(t.Scale > 0) || math.IsInf(float64(t.Scale), 0) {
			return fmt.Errorf("tq2 scale %v is not a positive number", t.Scale)
		}
	} else if t.GroupSize <= 0 || t.GroupSize%block != 0 {
		return fmt.Errorf("group size %d is not a positive multiple of %d", t.GroupSize, block)
	}
	if want := t.Rows * t.RowBytes(); len(t.Data) != want {
		return fmt.Errorf("%s [%d, %d]: %d packed bytes, want %d", t.Format, t.Rows, t.Cols, len(t.Data), want)
	}
	ng := t.Rows * t.Groups()
	if t.Format != TQ2 && len(t.Scales) != ng {
		return fmt.Errorf("%s [%d, %d]: %d scales, want %d", t.Format, t.Rows, t.Cols, len(t.Scales), ng)
	}
	wantMins := 0
	if t.Format == Q4 || t.Format == Q2 {
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
	if err := f.CheckRange(w, cols, 0); err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	t := &Tensor{Format: f, Rows: rows, Cols: cols}
	if f != TQ2 {
		t.GroupSize = opt.GroupSize
		if t.GroupSize == 0 {
			t.GroupSize = f.DefaultGroupSize()
		}
		if t.GroupSize < 0 || t.GroupSize%block != 0 {
			return nil, fmt.Errorf("quantize: group size %d is not a positive multiple of %d", t.GroupSize, block)
		}
		t.Scales = make([]half.Float16, rows*t.Groups())
		if f == Q4 || f == Q2 {
			t.Mins = make([]half.Float16, rows*t.Groups())
		}
	}
	t.Data = make([]byte, rows*t.RowBytes())
	if f == TQ2 {
		s := opt.TensorScale
		if s == 0 {
			s = float32(AbsMean(w))
		}
		t.Scale = max(s, tq2MinScale)
	}
	codes := make([]int32, t.GroupSize+block)
	var deq []float32
	for r := 0; r < rows; r++ {
		if r%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		row := w[r*cols : (r+1)*cols]
		switch f {
		case Q8:
			quantizeQ8Row(t, r, row, opt.Search, codes)
		case Q4, Q2:
			quantizeAsymRow(t, r, row, opt.Search, codes)
		case Q1:
			quantizeQ1Row(t, r, row)
		case TQ2:
			quantizeTQ2Row(t, r, row)
		}
		if f == Q1 || f == TQ2 {
			if deq == nil {
				deq = make([]float32, cols)
			}
			t.DequantizeRow(r, deq)
			for c, v := range deq {
				t.addErr(row[c], v)
			}
		}
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

// maxAbs is the largest weight magnitude f stores, with why. The fp16 scales
// and minimums of q4, q2 and q1 hold what a weight may be; q8's scale is a
// group's largest |w| / 127. tq2 (a float32 scale) and f32 hold any finite value.
func (f Format) maxAbs() (float32, string) {
	switch f {
	case Q8:
		return 127 * maxF16, "its f16 scales, a group's largest |weight| / 127, hold at most 65504"
	case Q4, Q2:
		return maxF16, "its f16 scales and minimums hold at most 65504"
	case Q1:
		return maxF16, "its f16 scales hold at most 65504"
	case F16:
		return maxF16, "the largest f16 is 65504"
	case BF16:
		return half.BFloat16(0x7f7f).Float32(), "the largest bf16 is 3.3895314e+38"
	}
	return math.MaxFloat32, ""
}

// CheckRange reports the first weight of w, a matrix of cols columns whose
// first row is row firstRow of the whole (a caller converting a tensor chunk
// by chunk passes the chunk's first row), that f cannot store: NaN, ±Inf, or
// a finite value its scales would overflow on (1e10 at q4 would give an
// infinite scale and NaN weights).
func (f Format) CheckRange(w []float32, cols, firstRow int) error {
	limit, why := f.maxAbs()
	i := firstAbove(w, limit)
	if i < 0 {
		return nil
	}
	row, col := firstRow+i/cols, i%cols
	v := w[i]
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return fmt.Errorf("non-finite weight %v at row %d, column %d", v, row, col)
	}
	return fmt.Errorf("weight %g at row %d, column %d is out of range for %s (%s)", v, row, col, f, why)
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
// q1 -1/+1, tq2 -1/0/+1.
func (t *Tensor) RowCodes(row int) []int32 {
	out := make([]int32, t.Cols)
	rb := t.RowBytes()
	src := t.Data[row*rb : (row+1)*rb]
	for c := range out {
		out[c] = codeAt(t.Format, src, c)
	}
	return out
}

// codeAt reads the code of weight c of a packed row, straight from the
// layout's definition (the reference for every fast path).
func codeAt(f Format, row []byte, c int) int32 {
	b, j := c/block, c%block
	switch f {
	case Q8:
		return int32(int8(row[c]))
	case Q4:
		v := row[b*16+j%16]
		if j >= 16 {
			return int32(v >> 4)
		}
		return int32(v & 15)
	case Q2:
		return int32(row[b*8+j%8]>>(2*(j/8))) & 3
	case TQ2:
		return int32(row[b*8+j%8]>>(2*(j/8)))&3 - 1
	case Q1:
		if row[b*4+j/8]>>(j%8)&1 == 1 {
			return 1
		}
		return -1
	}
	return 0
}

// DequantizeRow writes row's weights into dst (len >= Cols), decoding the
// packed bytes a block at a time.
func (t *Tensor) DequantizeRow(row int, dst []float32) {
	rb := t.RowBytes()
	src := t.Data[row*rb : (row+1)*rb]
	if t.Format == TQ2 {
		for c := 0; c < t.Cols; c++ {
			dst[c] = float32(codeAt(TQ2, src, c)) * t.Scale
		}
		return
	}
	ng := t.Groups()
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		d := t.Scales[row*ng+g].Float32()
		var m float32
		if t.Mins != nil {
			m = t.Mins[row*ng+g].Float32()
		}
		out := dst[lo:hi]
		switch t.Format {
		case Q8:
			for i := range out {
				out[i] = d * float32(int8(src[lo+i]))
			}
		case Q4:
			for i := range out {
				c := lo + i
				b := src[c/32*16+c%16]
				if c%32 >= 16 {
					b >>= 4
				}
				out[i] = d*float32(b&15) + m
			}
		case Q2:
			for i := range out {
				c := lo + i
				out[i] = d*float32(src[c/32*8+c%8]>>(2*(c%32/8))&3) + m
			}
		case Q1:
			for i := range out {
				c := lo + i
				if src[c/8]>>(c%8)&1 == 1 {
					out[i] = d
				} else {
					out[i] = -d
				}
			}
		}
	}
}

// weight is one dequantized weight from its code.
func (t *Tensor) weight(row, c int, q int32) float32 {
	if t.Format == TQ2 {
		return float32(q) * t.Scale
	}
	g := row*t.Groups() + c/t.GroupSize
	d := t.Scales[g].Float32()
	switch t.Format {
	case Q4, Q2:
		return d*float32(q) + t.Mins[g].Float32()
	}
	return d * float32(q)
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
	switch t.Format {
	case Q8:
		return dotQ8(t, row, x)
	case Q4:
		return dotQ4(t, row, x)
	case Q2:
		return dotQ2(t, row, x)
	case Q1:
		return dotQ1(t, row, x)
	case TQ2:
		return dotTQ2(t, row, x)
	}
	return 0
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
