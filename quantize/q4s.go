package quantize

// q4s: lowbit's 4-bit super-block format (sblock.go). A block of 32
// weights is 18 bytes: the bytes of its two 16-weight sub-blocks (scale
// code k in the low nibble, zero-point code z in the high), then the codes
// laid out as q4's: byte 2+j holds weight j in its low nibble and weight
// j+16 in its high one, so sub-block 0 is the low nibbles and sub-block 1
// the high. 4.5 bits a weight.

// q4sLayout is q4s's layout for the shared code.
var q4sLayout = sblockLayout{bits: 4, blockBytes: 18, pack: packQ4S, code: codeQ4S, sums: sumsQ4S}

// q4sSpec describes q4s.
var q4sSpec = Spec{
	Format: Q4S, Bits: 4.5, CodeBits: 4, Block: 32, BlockBytes: 18, MinCode: 0, MaxCode: 15, TensorScale: true,
	maxAbs: sblockMaxAbs, maxAbsWhy: sblockMaxAbsWhy,
	quantizeRow: quantizeSblockRow, code: q4sLayout.rowCode, scale: q4sLayout.rowScale,
	dequantize: q4sLayout.dequantize, dot: dotSblock, sblock: &q4sLayout,
}

// packQ4S writes a block's codes.
func packQ4S(dst []byte, q *[32]int32) {
	for j := range 16 {
		dst[j] = byte(q[j]) | byte(q[j+16])<<4
	}
}

// codeQ4S reads weight i: the low nibble of byte i for i < 16, the high
// nibble of byte i-16 after.
func codeQ4S(src []byte, i int) int32 { return int32(src[i%16]>>(4*(i/16))) & 15 }

// sumsQ4S is Σ q*x and Σ x of each sub-block of a whole block.
func sumsQ4S(src []byte, x []float32) (qx0, sx0, qx1, sx1 float32) {
	p, xs := src[:16:16], x[:32:32]
	var a0, a1, a2, a3, s0, s1, s2, s3 float32
	for j := 0; j < 16; j += 2 {
		v0, v1 := p[j], p[j+1]
		a0 += float32(v0&15) * xs[j]
		a1 += float32(v1&15) * xs[j+1]
		a2 += float32(v0>>4) * xs[j+16]
		a3 += float32(v1>>4) * xs[j+17]
		s0 += xs[j]
		s1 += xs[j+1]
		s2 += xs[j+16]
		s3 += xs[j+17]
	}
	return a0 + a1, s0 + s1, a2 + a3, s2 + s3
}
