package quantize

import "encoding/binary"

// q5_0: GGUF's Q5_0, byte for byte. A block of 32 weights is 22 bytes: an
// fp16 scale d (bytes 0-1), the codes' fifth bits qh (bytes 2-5, a
// little-endian uint32, bit j for weight j) and their low four bits qs
// (bytes 6-21; byte j holds weight j in its low nibble and weight j+16 in
// its high one, as q4). Weight j is d*(q-16), q the 5-bit code: the code
// RowCodes reads is q-16, in -16..15.

// q5_0Spec describes q5_0. A matrix whose rows are not whole blocks falls
// back to q8, which is no less exact.
var q5_0Spec = Spec{
	Format: Q5_0, Bits: 5.5, CodeBits: 5, Block: 32, BlockBytes: 22, MinCode: -16, MaxCode: 15,
	Group: 32, TableGroup: 32, BlockScales: true, Fallback: Q8,
	maxAbs: maxF16, maxAbsWhy: "its f16 block scales hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ5_0, scale: scaleQ5_0, halves: []int{0},
	dequantize: dequantizeQ5_0, dot: dotQ5_0,
	blocks: &blockLayout{sub: 32, qlo: -16, qhi: 15, pack: packQ5_0},
}

// packQ5_0 writes one block.
func packQ5_0(dst []byte, f *blockFields) {
	putF16(dst[0:], f.d)
	binary.LittleEndian.PutUint32(dst[2:], pack5(dst[6:22], f.q[:32], 16))
}

// pack5 writes 32 five-bit codes (q+off) as q4's nibbles into qs and
// returns their fifth bits, bit j for code j.
func pack5(qs []byte, q []int32, off int32) uint32 {
	var qh uint32
	for j := range 16 {
		u0, u1 := uint32(q[j]+off), uint32(q[j+16]+off)
		qs[j] = byte(u0&15 | (u1&15)<<4)
		qh |= (u0>>4&1)<<j | (u1>>4&1)<<(j+16)
	}
	return qh
}

// codeQ5_0 reads weight c's code: the nibble of qs that q4 would hold it
// in, the fifth bit from qh, less 16.
func codeQ5_0(row []byte, c int) int32 {
	blk := row[c/32*22:]
	j := c % 32
	qh := binary.LittleEndian.Uint32(blk[2:])
	v := blk[6+j%16]
	if j >= 16 {
		v >>= 4
	}
	return int32(v&15|byte(qh>>j&1)<<4) - 16
}

// scaleQ5_0 reads the scale of weight c's block.
func scaleQ5_0(row []byte, c int, _ float32) (float32, float32) { return f16At(row[c/32*22:]), 0 }

// dequantizeQ5_0 decodes whole blocks: d*(q-16).
func dequantizeQ5_0(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/32; b++ {
		blk := blocks[b*22 : b*22+22]
		d := f16At(blk)
		qh := binary.LittleEndian.Uint32(blk[2:])
		qs := (*[16]byte)(blk[6:22])
		o := (*[32]float32)(out[b*32:])
		for j := range 16 {
			o[j] = d * float32(int32(qs[j]&15|byte(qh>>j&1)<<4)-16)
			o[j+16] = d * float32(int32(qs[j]>>4|byte(qh>>(j+16)&1)<<4)-16)
		}
	}
}

// dotQ5_0 is Σ blocks d*Σ (q-16)*x on the packed bytes.
func dotQ5_0(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/32; b++ {
		blk := src[b*22 : b*22+22]
		qh := binary.LittleEndian.Uint32(blk[2:])
		qs := (*[16]byte)(blk[6:22])
		xs := (*[32]float32)(x[b*32:])
		var a0, a1, a2, a3 float32
		for j := 0; j < 16; j += 2 {
			a0 += float32(int32(qs[j]&15|byte(qh>>j&1)<<4)-16) * xs[j]
			a1 += float32(int32(qs[j]>>4|byte(qh>>(j+16)&1)<<4)-16) * xs[j+16]
			a2 += float32(int32(qs[j+1]&15|byte(qh>>(j+1)&1)<<4)-16) * xs[j+1]
			a3 += float32(int32(qs[j+1]>>4|byte(qh>>(j+17)&1)<<4)-16) * xs[j+17]
		}
		sum += f16At(blk) * ((a0 + a1) + (a2 + a3))
	}
	return sum
}
