package quantize

// q2s: lowbit's 2-bit super-block format (sblock.go). A block of 32
// weights is 10 bytes: the bytes of its two 16-weight sub-blocks (scale
// code k in the low nibble, zero-point code z in the high), then the codes
// laid out as q2's: byte 2+j holds weights j, j+8, j+16, j+24 in bits 0-1,
// 2-3, 4-5, 6-7, so sub-block 0 is the low four bits of the eight code
// bytes and sub-block 1 the high four. 2.5 bits a weight.

// q2sLayout is q2s's layout for the shared code.
var q2sLayout = sblockLayout{bits: 2, blockBytes: 10, pack: packQ2S, code: codeQ2S, sums: sumsQ2S}

// q2sSpec describes q2s.
var q2sSpec = Spec{
	Format: Q2S, Bits: 2.5, CodeBits: 2, Block: 32, BlockBytes: 10, MinCode: 0, MaxCode: 3, TensorScale: true,
	maxAbs: sblockMaxAbs, maxAbsWhy: sblockMaxAbsWhy,
	quantizeRow: quantizeSblockRow, code: q2sLayout.rowCode, scale: q2sLayout.rowScale,
	dequantize: q2sLayout.dequantize, dot: dotSblock, sblock: &q2sLayout,
}

// packQ2S writes a block's codes.
func packQ2S(dst []byte, q *[32]int32) {
	for j := range 8 {
		dst[j] = byte(q[j]) | byte(q[j+8])<<2 | byte(q[j+16])<<4 | byte(q[j+24])<<6
	}
}

// codeQ2S reads weight i: bits 2(i/8)..2(i/8)+1 of byte i%8.
func codeQ2S(src []byte, i int) int32 { return int32(src[i%8]>>(2*(i/8))) & 3 }

// sumsQ2S is Σ q*x and Σ x of each sub-block of a whole block.
func sumsQ2S(src []byte, x []float32) (qx0, sx0, qx1, sx1 float32) {
	p, xs := src[:8:8], x[:32:32]
	var a0, a1, a2, a3 float32
	for j := range 8 {
		v := p[j]
		a0 += float32(v&3) * xs[j]
		a1 += float32(v>>2&3) * xs[j+8]
		a2 += float32(v>>4&3) * xs[j+16]
		a3 += float32(v>>6) * xs[j+24]
		sx0 += xs[j] + xs[j+8]
		sx1 += xs[j+16] + xs[j+24]
	}
	return a0 + a1, sx0, a2 + a3, sx1
}
