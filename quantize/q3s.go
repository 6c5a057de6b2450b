package quantize

import "encoding/binary"

// q3s: lowbit's 3-bit super-block format (sblock.go). A block of 32
// weights is 14 bytes: the bytes of its two 16-weight sub-blocks (scale
// code k in the low nibble, zero-point code z in the high), the codes' low
// two bits laid out as q2's (bytes 2-9: byte 2+j holds weights j, j+8,
// j+16, j+24), and their high bits (bytes 10-13, a little-endian uint32
// whose bit i is weight i's). 3.5 bits a weight.

// q3sLayout is q3s's layout for the shared code.
var q3sLayout = sblockLayout{bits: 3, blockBytes: 14, pack: packQ3S, code: codeQ3S, sums: sumsQ3S}

// q3sSpec describes q3s.
var q3sSpec = Spec{
	Format: Q3S, Bits: 3.5, CodeBits: 3, Block: 32, BlockBytes: 14, MinCode: 0, MaxCode: 7, TensorScale: true,
	maxAbs: sblockMaxAbs, maxAbsWhy: sblockMaxAbsWhy,
	quantizeRow: quantizeSblockRow, code: q3sLayout.rowCode, scale: q3sLayout.rowScale,
	dequantize: q3sLayout.dequantize, dot: dotSblock, sblock: &q3sLayout,
}

// packQ3S writes a block's codes.
func packQ3S(dst []byte, q *[32]int32) {
	var lo [32]int32
	var hi uint32
	for i, c := range q {
		lo[i] = c & 3
		hi |= uint32(c>>2&1) << i
	}
	packQ2S(dst, &lo)
	binary.LittleEndian.PutUint32(dst[8:], hi)
}

// codeQ3S reads weight i: its low bits as q2s's, its high bit i of the uint32.
func codeQ3S(src []byte, i int) int32 {
	return codeQ2S(src, i) | int32(binary.LittleEndian.Uint32(src[8:])>>i&1)<<2
}

// sumsQ3S is Σ q*x and Σ x of each sub-block of a whole block.
func sumsQ3S(src []byte, x []float32) (qx0, sx0, qx1, sx1 float32) {
	p, xs := src[:12:12], x[:32:32]
	h := binary.LittleEndian.Uint32(p[8:])
	var a0, a1, a2, a3 float32
	for j := range 8 {
		v := uint32(p[j])
		a0 += float32(v&3|h>>j&1<<2) * xs[j]
		a1 += float32(v>>2&3|h>>(j+8)&1<<2) * xs[j+8]
		a2 += float32(v>>4&3|h>>(j+16)&1<<2) * xs[j+16]
		a3 += float32(v>>6|h>>(j+24)&1<<2) * xs[j+24]
		sx0 += xs[j] + xs[j+8]
		sx1 += xs[j+16] + xs[j+24]
	}
	return a0 + a1, sx0, a2 + a3, sx1
}
