package quantize

import "math"

// tq2: BitNet b1.58 ternary. A weight is S*t with t in {-1, 0, +1} and one
// float32 S per tensor, quantized exactly as BitNet b1.58 trains:
// S = max(mean |W|, 1e-5) over the whole tensor, t = clip(round(W/S), -1, 1)
// (round half to even, as torch.round). Layout: the q2 layout with code t+1
// (0, 1, 2): each block of 32 weights is 8 bytes, byte j holding weights j,
// j+8, j+16, j+24 in bits 0-1, 2-3, 4-5, 6-7; padding code 1 (t = 0).
// Activations are quantized per token to int8 by absmax at run time (Int8Vec).
// transformers' WeightQuant computes the same codes as round(W*(1/S)) in
// float32; model/bitnet_test.go finds them equal on all 14 linears (139M
// weights) of a 2B-4T-shaped model, its S within 4 ulps of this exact mean.

// tq2Spec describes tq2: 2-bit codes carrying log2(3) bits, a float32
// scale per tensor (any finite weight fits) and int8 activations.
var tq2Spec = Spec{
	Format: TQ2, Bits: math.Log2(3), CodeBits: 2, Block: 32, BlockBytes: 8, MinCode: -1, MaxCode: 1, TensorScale: true, Int8Activations: true,
	maxAbs:      math.MaxFloat32,
	quantizeRow: quantizeTQ2Row, code: codeTQ2, dequantize: dequantizeTQ2, dot: dotTQ2, dotInt8: dotInt8TQ2,
}

// tq2MinScale is BitNet's clamp on the absmean.
const tq2MinScale = 1e-5

// quantizeTQ2Row packs one row at the tensor's scale (set by Quantize);
// there is nothing to search.
func quantizeTQ2Row(t *Tensor, r int, row []float32, _ *Options, _ []int32) {
	rb := t.RowBytes()
	dst := t.Data[r*rb : (r+1)*rb]
	inv := 1 / float64(t.Scale)
	for i := range dst {
		dst[i] = 0x55 // every code 1 (t = 0), so padding is zero
	}
	for c, v := range row {
		q := int32(math.RoundToEven(float64(v) * inv))
		q = min(max(q, -1), 1)
		t.addErr(v, float32(q)*t.Scale) // as DequantizeRow computes it
		b, j := c/block, c%block
		k := b*8 + j%8
		shift := 2 * (j / 8)
		dst[k] = dst[k]&^(3<<shift) | byte(q+1)<<shift
	}
}

// codeTQ2 reads weight c's code: q2's, less 1.
func codeTQ2(row []byte, c int) int32 { return codeQ2(row, c) - 1 }

// dequantizeTQ2 writes d*t, d being the tensor's scale.
func dequantizeTQ2(blocks []byte, d, _ float32, out []float32) {
	for c := range out {
		out[c] = float32(codeTQ2(blocks, c)) * d
	}
}

// tq2Values maps a packed byte to its four ternary values, in the order of
// the bit pairs (weights j, j+8, j+16, j+24 of a block).
func tq2Values(b byte) [4]int32 {
	return [4]int32{int32(b&3) - 1, int32(b>>2&3) - 1, int32(b>>4&3) - 1, int32(b>>6) - 1}
}

// dotTQ2 is the float path: S * sum(t*x).
func dotTQ2(t *Tensor, r int, x []float32) float32 {
	rb := t.RowBytes()
	src := t.Data[r*rb : (r+1)*rb]
	var s float32
	for b := 0; b < t.Cols; b += block {
		p := src[b/4 : b/4+8]
		if b+block <= t.Cols {
			xs := x[b : b+32 : b+32]
			var a0, a1, a2, a3 float32
			for j := 0; j < 8; j++ {
				v := p[j]
				a0 += float32(int32(v&3)-1) * xs[j]
				a1 += float32(int32(v>>2&3)-1) * xs[j+8]
				a2 += float32(int32(v>>4&3)-1) * xs[j+16]
				a3 += float32(int32(v>>6)-1) * xs[j+24]
			}
			s += a0 + a1 + a2 + a3
			continue
		}
		for j := 0; b+j < t.Cols; j++ {
			s += float32(tq2Values(p[j%8])[j/8]) * x[b+j]
		}
	}
	return s * t.Scale
}

// dotInt8TQ2 is W2A8: S*a.Scale*sum(t*q), integer throughout.
func dotInt8TQ2(t *Tensor, row int, a *Int8Vec) float32 {
	rb := t.RowBytes()
	src := t.Data[row*rb : (row+1)*rb]
	var acc int32
	for b := 0; b < t.Cols; b += block {
		p := src[b/4 : b/4+8]
		if b+block <= t.Cols {
			q := a.Q[b : b+32 : b+32]
			for j := 0; j < 8; j++ {
				v := p[j]
				acc += (int32(v&3)-1)*int32(q[j]) + (int32(v>>2&3)-1)*int32(q[j+8]) +
					(int32(v>>4&3)-1)*int32(q[j+16]) + (int32(v>>6)-1)*int32(q[j+24])
			}
			continue
		}
		for j := 0; b+j < t.Cols; j++ {
			acc += tq2Values(p[j%8])[j/8] * int32(a.Q[b+j])
		}
	}
	return float32(acc) * t.Scale * a.Scale
}
