package quantize

import (
	"encoding/binary"
	"math"
	"math/bits"

	"lowbit/half"
)

// q1: 1-bit signs. A weight is d*s with s in {-1, +1} and one fp16 d per
// group: the group's mean |w|, which is the scale minimizing the squared
// error for sign codes. Layout: each block of 32 weights is a little-endian
// uint32 whose bit i is weight i (1 = +1, for w >= 0); padding bits are 0.

// q1Spec describes q1; its fp16 scales bound a weight to 65504.
var q1Spec = Spec{
	Format: Q1, Bits: 1, CodeBits: 1, Block: 32, BlockBytes: 4, MinCode: -1, MaxCode: 1, Group: 32, TableGroup: 32,
	maxAbs: maxF16, maxAbsWhy: "its f16 scales hold at most 65504",
	quantizeRow: quantizeQ1Row, code: codeQ1, dequantize: dequantizeQ1, dot: dotQ1,
}

// quantizeQ1Row packs one row. It has no search: the mean |w| is already
// the best scale for the signs, and with importance weights (under
// opt.Search) the weighted mean |w|: the signs do not depend on the scale.
func quantizeQ1Row(t *Tensor, r int, row []float32, opt *Options, _ []int32) {
	rb := t.RowBytes()
	dst := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, len(row))
		var s float64
		for i, v := range row[lo:hi] {
			s += math.Abs(float64(v))
			if v >= 0 {
				c := lo + i
				dst[c/8] |= 1 << (c % 8)
			}
		}
		mean := s / float64(hi-lo)
		if opt.Search && opt.Importance != nil {
			var sa, sw float64
			for i, v := range row[lo:hi] {
				a := float64(opt.Importance[lo+i])
				sa += a * math.Abs(float64(v))
				sw += a
			}
			if sw > 0 {
				mean = sa / sw
			}
		}
		d := half.FromFloat32(float32(mean))
		t.Scales[r*ng+g] = d
		df := d.Float32()
		for _, v := range row[lo:hi] {
			if v >= 0 {
				t.addErr(v, df) // as DequantizeRow computes it
			} else {
				t.addErr(v, -df)
			}
		}
	}
}

// codeQ1 reads weight c's code: +1 where its bit is set, else -1.
func codeQ1(row []byte, c int) int32 {
	b, j := c/block, c%block
	if row[b*4+j/8]>>(j%8)&1 == 1 {
		return 1
	}
	return -1
}

// dequantizeQ1 writes d times each weight's sign.
func dequantizeQ1(blocks []byte, d, _ float32, out []float32) {
	for c := range out {
		if blocks[c/8]>>(c%8)&1 == 1 {
			out[c] = d
		} else {
			out[c] = -d
		}
	}
}

// dotQ1 sums x with the signs of the bits, a group at a time: sum(s*x) =
// 2*sum(x where bit set) - sum(x).
func dotQ1(t *Tensor, r int, x []float32) float32 {
	rb := t.RowBytes()
	src := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	scales := t.Scales[r*ng : (r+1)*ng]
	var sum float32
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		var pos, all float32
		for b := lo; b < hi; b += block {
			word := binary.LittleEndian.Uint32(src[b/8:])
			n := min(block, hi-b)
			xs := x[b : b+n]
			for j, v := range xs {
				all += v
				if word>>j&1 == 1 {
					pos += v
				}
			}
		}
		sum += scales[g].Float32() * (2*pos - all)
	}
	return sum
}

// DotBinary is the binary-network dot product of a q1 row with binarized
// activations: per group, d_w * beta_x * (n - 2*popcount(w XOR x)), i.e.
// XNOR and popcount over the sign bits.
func (t *Tensor) DotBinary(row int, a *BinaryVec) float32 {
	rb := t.RowBytes()
	src := t.Data[row*rb : (row+1)*rb]
	ng := t.Groups()
	scales := t.Scales[row*ng : (row+1)*ng]
	wpg := t.GroupSize / block // words per group
	var sum float32
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		diff := 0
		for k := 0; k < wpg; k++ {
			b := lo + k*block
			if b >= hi {
				break
			}
			w := binary.LittleEndian.Uint32(src[b/8:])
			mask := uint32(math.MaxUint32)
			if n := hi - b; n < block {
				mask = 1<<n - 1
			}
			diff += bits.OnesCount32((w ^ a.Bits[b/block]) & mask)
		}
		n := hi - lo
		sum += scales[g].Float32() * a.Scales[g] * float32(n-2*diff)
	}
	return sum
}

// DotBinaryRef is DotBinary's reference: float64 products of dequantized
// signs and binarized activations, element by element.
func (t *Tensor) DotBinaryRef(row int, a *BinaryVec) float64 {
	codes := t.RowCodes(row)
	var s float64
	for c, q := range codes {
		xs := -1.0
		if a.Bits[c/block]>>(c%block)&1 == 1 {
			xs = 1
		}
		g := c / t.GroupSize
		s += float64(t.weight(row, c, q)) * xs * float64(a.Scales[g])
	}
	return s
}
