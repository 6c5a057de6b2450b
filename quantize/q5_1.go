package quantize

import "encoding/binary"

// q5_1: GGUF's Q5_1, byte for byte. A block of 32 weights is 24 bytes: an
// fp16 scale d (bytes 0-1) and minimum m (bytes 2-3), the codes' fifth
// bits qh (bytes 4-7, a little-endian uint32, bit j for weight j) and their
// low four bits qs (bytes 8-23, laid out as q4's nibbles). Weight j is
// d*q + m, q the 5-bit code in 0..31.

// q5_1Spec describes q5_1. A matrix whose rows are not whole blocks falls
// back to q8, which is no less exact.
var q5_1Spec = Spec{
	Format: Q5_1, Bits: 6, CodeBits: 5, Block: 32, BlockBytes: 24, MinCode: 0, MaxCode: 31,
	Group: 32, TableGroup: 32, BlockScales: true, Fallback: Q8,
	maxAbs: maxF16, maxAbsWhy: "its f16 block scales and minimums hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ5_1, scale: scaleQ5_1, halves: []int{0, 2},
	dequantize: dequantizeQ5_1, dot: dotQ5_1,
	blocks: &blockLayout{sub: 32, qlo: 0, qhi: 31, mins: true, pack: packQ5_1},
}

// packQ5_1 writes one block (f.dmin is its minimum).
func packQ5_1(dst []byte, f *blockFields) {
	putF16(dst[0:], f.d)
	putF16(dst[2:], f.dmin)
	binary.LittleEndian.PutUint32(dst[4:], pack5(dst[8:24], f.q[:32], 0))
}

// codeQ5_1 reads weight c's code: its nibble of qs and its bit of qh.
func codeQ5_1(row []byte, c int) int32 {
	blk := row[c/32*24:]
	j := c % 32
	qh := binary.LittleEndian.Uint32(blk[4:])
	v := blk[8+j%16]
	if j >= 16 {
		v >>= 4
	}
	return int32(v&15 | byte(qh>>j&1)<<4)
}

// scaleQ5_1 reads the scale and minimum of weight c's block.
func scaleQ5_1(row []byte, c int, _ float32) (float32, float32) {
	blk := row[c/32*24:]
	return f16At(blk), f16At(blk[2:])
}

// dequantizeQ5_1 decodes whole blocks: d*q + m.
func dequantizeQ5_1(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/32; b++ {
		blk := blocks[b*24 : b*24+24]
		d, m := f16At(blk), f16At(blk[2:])
		qh := binary.LittleEndian.Uint32(blk[4:])
		qs := (*[16]byte)(blk[8:24])
		o := (*[32]float32)(out[b*32:])
		for j := range 16 {
			o[j] = float32(d*float32(qs[j]&15|byte(qh>>j&1)<<4)) + m
			o[j+16] = float32(d*float32(qs[j]>>4|byte(qh>>(j+16)&1)<<4)) + m
		}
	}
}

// dotQ5_1 is Σ blocks d*Σ q*x + m*Σ x on the packed bytes.
func dotQ5_1(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/32; b++ {
		blk := src[b*24 : b*24+24]
		qh := binary.LittleEndian.Uint32(blk[4:])
		qs := (*[16]byte)(blk[8:24])
		xs := (*[32]float32)(x[b*32:])
		var a0, a1, a2, a3, s0, s1 float32
		for j := 0; j < 16; j += 2 {
			a0 += float32(qs[j]&15|byte(qh>>j&1)<<4) * xs[j]
			a1 += float32(qs[j]>>4|byte(qh>>(j+16)&1)<<4) * xs[j+16]
			a2 += float32(qs[j+1]&15|byte(qh>>(j+1)&1)<<4) * xs[j+1]
			a3 += float32(qs[j+1]>>4|byte(qh>>(j+17)&1)<<4) * xs[j+17]
			s0 += xs[j] + xs[j+16]
			s1 += xs[j+1] + xs[j+17]
		}
		sum += f16At(blk)*((a0+a1)+(a2+a3)) + f16At(blk[2:])*(s0+s1)
	}
	return sum
}
