package quantize

import (
	"math"
)

// Int8Vec is an activation vector quantized to int8 per token by absmax, as
// BitNet b1.58 quantizes activations before every ternary matmul: x ≈ Scale*Q.
type Int8Vec struct {
	Q     []int8
	Scale float32
}

// QuantizeInt8 quantizes x into dst, reusing its buffer: Scale =
// max(max|x|, 1e-5)/127, Q = clip(round(x/Scale), -128, 127), round half to
// even, as the reference implementation (torch.round) does.
func QuantizeInt8(x []float32, dst *Int8Vec) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	amax = max(amax, 1e-5)
	if cap(dst.Q) < len(x) {
		dst.Q = make([]int8, len(x))
	}
	dst.Q = dst.Q[:len(x)]
	s := 127 / amax
	for i, v := range x {
		q := math.RoundToEven(float64(v * s))
		dst.Q[i] = int8(min(max(q, -128), 127))
	}
	dst.Scale = 1 / s
}

// DotInt8 is the dot product of a row with int8 activations, integer inside
// groups: tq2 gives S*Scale*sum(t*q) (W2A8); q8 gives Scale*sum over groups of
// d*sum(qw*qx) (W8A8). Other formats dequantize the activations.
func (t *Tensor) DotInt8(row int, a *Int8Vec) float32 {
	if dot := t.Format.spec().dotInt8; dot != nil {
		return dot(t, row, a)
	}
	x := make([]float32, len(a.Q))
	for i, q := range a.Q {
		x[i] = float32(q) * a.Scale
	}
	return t.Dot(row, x)
}

// DotInt8Ref is DotInt8's reference: float64 products of dequantized weights
// and dequantized int8 activations.
func (t *Tensor) DotInt8Ref(row int, a *Int8Vec) float64 {
	x := make([]float64, len(a.Q))
	for i, q := range a.Q {
		x[i] = float64(q) * float64(a.Scale)
	}
	return t.DotRef(row, x)
}

// BinaryVec is an activation vector binarized for XNOR-popcount products:
// sign bits (bit i of Bits[i/32] set when x[i] >= 0) and per group the mean
// |x| (beta), as binary networks (XNOR-Net) scale them.
type BinaryVec struct {
	Bits      []uint32
	Scales    []float32
	Len       int
	GroupSize int
}

// Binarize fills dst from x with groups of groupSize (a multiple of 32).
func Binarize(x []float32, groupSize int, dst *BinaryVec) {
	nw := (len(x) + block - 1) / block
	ng := (len(x) + groupSize - 1) / groupSize
	dst.Bits = append(dst.Bits[:0], make([]uint32, nw)...)
	dst.Scales = append(dst.Scales[:0], make([]float32, ng)...)
	dst.Len, dst.GroupSize = len(x), groupSize
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, groupSize, len(x))
		var s float64
		for i := lo; i < hi; i++ {
			s += math.Abs(float64(x[i]))
			if x[i] >= 0 {
				dst.Bits[i/block] |= 1 << (i % block)
			}
		}
		dst.Scales[g] = float32(s / float64(hi-lo))
	}
}
