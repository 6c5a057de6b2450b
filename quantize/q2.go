package quantize

// q2: asymmetric 2-bit. A weight is d*q + m with q in [0, 3] and fp16 d and m
// per group (default 32). Layout: each block of 32 weights is 8 bytes; byte j
// holds weights j, j+8, j+16, j+24 in bits 0-1, 2-3, 4-5, 6-7, so one 32-bit
// word shifted by 2k and masked with 0x03030303 yields four consecutive
// weights (tq2 uses the same layout).

// q2Spec describes q2. Its default group is 32 as well: the fp16 scale and
// minimum then cost 1 bit per weight; group 64 would halve that at the
// price of a larger error, and with only four levels per weight the smaller
// group is the safer default (--group-size 64 trades it back).
var q2Spec = Spec{
	Format: Q2, Bits: 2, CodeBits: 2, Block: 32, BlockBytes: 8, MinCode: 0, MaxCode: 3, Group: 32, TableGroup: 32, Mins: true,
	maxAbs: maxF16, maxAbsWhy: "its f16 scales and minimums hold at most 65504",
	quantizeRow: quantizeAsymRow, pack: packQ2, code: codeQ2, dequantize: dequantizeQ2, dot: dotQ2,
}

// packQ2 packs a group's codes (a multiple of 32) into dst.
func packQ2(dst []byte, codes []int32) {
	for b := 0; b < len(codes)/block; b++ {
		c := codes[b*block:]
		out := dst[b*8 : b*8+8]
		for j := 0; j < 8; j++ {
			out[j] = byte(c[j]) | byte(c[j+8])<<2 | byte(c[j+16])<<4 | byte(c[j+24])<<6
		}
	}
}

// codeQ2 reads weight c's code: weight j of its block is in bits 2k and
// 2k+1 of the block's byte j%8, k = j/8.
func codeQ2(row []byte, c int) int32 {
	b, j := c/block, c%block
	return int32(row[b*8+j%8]>>(2*(j/8))) & 3
}

// dequantizeQ2 writes d*q + m.
func dequantizeQ2(blocks []byte, d, m float32, out []float32) {
	for c := range out {
		out[c] = d*float32(blocks[c/32*8+c%8]>>(2*(c%32/8))&3) + m
	}
}

// dotQ2 computes sum over groups of d*sum(q*x) + m*sum(x) on the bit pairs.
func dotQ2(t *Tensor, r int, x []float32) float32 {
	rb := t.RowBytes()
	src := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	scales, mins := t.Scales[r*ng:(r+1)*ng], t.Mins[r*ng:(r+1)*ng]
	var sum float32
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		var qx, sx float32
		for b := lo; b < hi; b += block {
			p := src[b/4 : b/4+8]
			if b+block <= hi {
				xs := x[b : b+32 : b+32]
				var a0, a1, a2, a3 float32
				for j := 0; j < 8; j++ {
					v := p[j]
					a0 += float32(v&3) * xs[j]
					a1 += float32(v>>2&3) * xs[j+8]
					a2 += float32(v>>4&3) * xs[j+16]
					a3 += float32(v>>6) * xs[j+24]
					sx += xs[j] + xs[j+8] + xs[j+16] + xs[j+24]
				}
				qx += a0 + a1 + a2 + a3
				continue
			}
			for j := 0; b+j < hi; j++ {
				qx += float32(p[j%8]>>(2*(j/8))&3) * x[b+j]
				sx += x[b+j]
			}
		}
		sum += scales[g].Float32()*qx + mins[g].Float32()*sx
	}
	return sum
}
