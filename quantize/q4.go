package quantize

// q4: asymmetric 4-bit. A weight is d*q + m with q in [0, 15] and fp16 d and
// m per group. Layout: each block of 32 weights is 16 bytes; byte j holds
// weight j in its low nibble and weight j+16 in its high nibble, so one
// 32-bit word masked with 0x0F0F0F0F yields four consecutive weights. Groups
// of 64 or 128 are consecutive blocks.

// q4Spec describes q4; its fp16 scales and minimums bound a weight to 65504.
var q4Spec = Spec{
	Format: Q4, Bits: 4, CodeBits: 4, Block: 32, BlockBytes: 16, MinCode: 0, MaxCode: 15, Group: 32, TableGroup: 32, Mins: true,
	maxAbs: maxF16, maxAbsWhy: "its f16 scales and minimums hold at most 65504",
	quantizeRow: quantizeAsymRow, pack: packQ4, code: codeQ4, dequantize: dequantizeQ4, dot: dotQ4,
}

// packQ4 packs a group's codes (a multiple of 32) into dst.
func packQ4(dst []byte, codes []int32) {
	for b := 0; b < len(codes)/block; b++ {
		c := codes[b*block:]
		out := dst[b*16 : b*16+16]
		for j := 0; j < 16; j++ {
			out[j] = byte(c[j]) | byte(c[j+16])<<4
		}
	}
}

// codeQ4 reads weight c's code: the low nibble of byte j of its block for
// j < 16, the high nibble of byte j-16 after.
func codeQ4(row []byte, c int) int32 {
	b, j := c/block, c%block
	v := row[b*16+j%16]
	if j >= 16 {
		return int32(v >> 4)
	}
	return int32(v & 15)
}

// dequantizeQ4 writes d*q + m.
func dequantizeQ4(blocks []byte, d, m float32, out []float32) {
	for c := range out {
		b := blocks[c/32*16+c%16]
		if c%32 >= 16 {
			b >>= 4
		}
		out[c] = d*float32(b&15) + m
	}
}

// dotQ4 computes sum over groups of d*sum(q*x) + m*sum(x) on the nibbles.
func dotQ4(t *Tensor, r int, x []float32) float32 {
	rb := t.RowBytes()
	src := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	scales, mins := t.Scales[r*ng:(r+1)*ng], t.Mins[r*ng:(r+1)*ng]
	var sum float32
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		var qx, sx float32
		for b := lo; b < hi; b += block {
			p := src[b/2 : b/2+16]
			if b+block <= hi {
				xs := x[b : b+32 : b+32]
				var a0, a1, a2, a3, s0, s1 float32
				for j := 0; j < 16; j += 2 {
					v0, v1 := p[j], p[j+1]
					a0 += float32(v0&15) * xs[j]
					a1 += float32(v0>>4) * xs[j+16]
					a2 += float32(v1&15) * xs[j+1]
					a3 += float32(v1>>4) * xs[j+17]
					s0 += xs[j] + xs[j+16]
					s1 += xs[j+1] + xs[j+17]
				}
				qx += a0 + a1 + a2 + a3
				sx += s0 + s1
				continue
			}
			for j := 0; b+j < hi; j++ { // short last block
				v := p[j%16]
				if j >= 16 {
					v >>= 4
				}
				qx += float32(v&15) * x[b+j]
				sx += x[b+j]
			}
		}
		sum += scales[g].Float32()*qx + mins[g].Float32()*sx
	}
	return sum
}
