package quantize

// q4k: GGUF's Q4_K, byte for byte. A super-block of 256 weights is 144
// bytes: fp16 d (bytes 0-1) and dmin (2-3), twelve bytes of 6-bit scales
// and minimums of its eight 32-weight sub-blocks (4-15, kScales), and 128
// bytes of 4-bit codes qs (16-143). Weights 64c..64c+31 are the low
// nibbles of qs[32c..32c+31], weights 64c+32..64c+63 their high nibbles.
// Weight i of sub-block j is d*sc_j*q - dmin*m_j, q in 0..15.

// q4kSpec describes q4k. A matrix whose rows are not whole super-blocks
// falls back to q4 (group 32), of like size and error.
var q4kSpec = Spec{
	Format: Q4K, Bits: 4.5, CodeBits: 4, Block: 256, BlockBytes: 144, MinCode: 0, MaxCode: 15,
	Group: 256, TableGroup: 256, BlockScales: true, Fallback: Q4,
	maxAbs: maxF16, maxAbsWhy: "its f16 super-block scales hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ4K, scale: scaleQ4K, halves: []int{0, 2},
	dequantize: dequantizeQ4K, dot: dotQ4K,
	blocks: &blockLayout{sub: 32, qlo: 0, qhi: 15, scLo: 0, scHi: 63, mins: true, pack: packQ4K},
}

// kScales reads sub-block j's (of 8) 6-bit scale and minimum from the 12
// bytes s of q4k and q5k: for j < 4, the low 6 bits of s[j] and s[j+4];
// for j >= 4, the low and high nibble of s[j+4], topped by the high 2 bits
// of s[j-4] and of s[j].
func kScales(s []byte, j int) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// putKScales packs eight scales and minimums (0..63) as kScales reads them.
func putKScales(s []byte, sc, mn *[16]int32) {
	for j := range 4 {
		s[j] = byte(sc[j]) | byte(sc[j+4]>>4)<<6
		s[j+4] = byte(mn[j]) | byte(mn[j+4]>>4)<<6
		s[j+8] = byte(sc[j+4]&15) | byte(mn[j+4]&15)<<4
	}
}

// kSubScale is sub-block j's scale and minimum in a q4k or q5k block.
func kSubScale(blk []byte, j int) (float32, float32) {
	sc, m := kScales(blk[4:16], j)
	return float32(f16At(blk) * float32(sc)), -float32(f16At(blk[2:]) * float32(m))
}

// packQ4K writes one super-block.
func packQ4K(dst []byte, f *blockFields) {
	putF16(dst[0:], f.d)
	putF16(dst[2:], f.dmin)
	putKScales(dst[4:16], &f.sc, &f.mn)
	for c := range 4 {
		for l := range 32 {
			dst[16+32*c+l] = byte(f.q[64*c+l]) | byte(f.q[64*c+32+l])<<4
		}
	}
}

// codeQ4K reads weight c's nibble.
func codeQ4K(row []byte, c int) int32 {
	blk := row[c/256*144:]
	i := c % 256
	v := blk[16+32*(i/64)+i%32]
	if i%64 >= 32 {
		v >>= 4
	}
	return int32(v & 15)
}

// scaleQ4K reads the scale and minimum of weight c's sub-block.
func scaleQ4K(row []byte, c int, _ float32) (float32, float32) {
	return kSubScale(row[c/256*144:], c%256/32)
}

// dequantizeQ4K decodes whole super-blocks.
func dequantizeQ4K(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/256; b++ {
		blk := blocks[b*144 : b*144+144]
		for c := range 4 {
			d0, m0 := kSubScale(blk, 2*c)
			d1, m1 := kSubScale(blk, 2*c+1)
			qs := (*[32]byte)(blk[16+32*c:])
			o := (*[64]float32)(out[b*256+64*c:])
			for l, v := range qs {
				o[l] = float32(d0*float32(v&15)) + m0
				o[l+32] = float32(d1*float32(v>>4)) + m1
			}
		}
	}
}

// kChunk is the super-blocks whose sub-block scales the assembly products
// take at a time, decoded into arrays on the stack.
const kChunk = 16

// dotQ4K is Σ sub-blocks d*sc*Σ q*x - dmin*m*Σ x on the packed bytes: by
// the AVX2 assembly where there is one, the scales decoded here a chunk of
// super-blocks at a time.
func dotQ4K(t *Tensor, r int, x []float32) float32 {
	if !haveAVX2 || t.Cols < 256 {
		return dotQ4KGo(t, r, x)
	}
	return dotKScaled(t.rowData(r), x, t.Cols/256, 144, dotQ4KAVX2)
}

// dotQ4KGo is dotQ4K in plain Go (the reference of the assembly).
func dotQ4KGo(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/256; b++ {
		blk := src[b*144 : b*144+144]
		s := blk[4:16]
		var sq, sm float32
		for c := range 4 {
			qs := (*[32]byte)(blk[16+32*c:])
			xs := (*[64]float32)(x[b*256+64*c:])
			var a0, a1, a2, a3, s0, s1 float32
			for l := 0; l < 32; l += 2 {
				v0, v1 := qs[l], qs[l+1]
				a0 += float32(v0&15) * xs[l]
				a1 += float32(v0>>4) * xs[l+32]
				a2 += float32(v1&15) * xs[l+1]
				a3 += float32(v1>>4) * xs[l+33]
				s0 += xs[l] + xs[l+1]
				s1 += xs[l+32] + xs[l+33]
			}
			sc0, m0 := kScales(s, 2*c)
			sc1, m1 := kScales(s, 2*c+1)
			sq += float32(sc0)*(a0+a2) + float32(sc1)*(a1+a3)
			sm += float32(m0)*s0 + float32(m1)*s1
		}
		sum += f16At(blk)*sq - f16At(blk[2:])*sm
	}
	return sum
}

// dotKScaled runs asm, the assembly product of a format whose super-blocks
// (bb bytes: fp16 d and dmin, then the 6-bit sub-block scales and minimums
// kScales reads) hold 256 weights (q4k, q5k), over the nb super-blocks of
// a row, a chunk at a time, with the chunk's scales and minimums decoded
// here.
func dotKScaled(src []byte, x []float32, nb, bb int, asm func(q *byte, x *float32, sc, mn *float32, n int) float32) float32 {
	_ = x[nb*256-1] // the assembly reads this far
	var sc, mn [8 * kChunk]float32
	var sum float32
	for b0 := 0; b0 < nb; b0 += kChunk {
		n := min(kChunk, nb-b0)
		for b := range n {
			blk := src[(b0+b)*bb : (b0+b+1)*bb]
			d, dm := f16At(blk), f16At(blk[2:])
			for j := range 8 {
				s, m := kScales(blk[4:16], j)
				sc[8*b+j], mn[8*b+j] = d*float32(s), dm*float32(m)
			}
		}
		sum += asm(&src[b0*bb], &x[b0*256], &sc[0], &mn[0], n)
	}
	return sum
}

// dotK16Scaled is dotKScaled for the formats of 16 signed sub-block
// scales and no minimums (q3k, q6k): scales writes a block's 16 scales
// (d folded in) into sc.
func dotK16Scaled(src []byte, x []float32, nb, bb int, scales func(blk []byte, sc []float32), asm func(q *byte, x *float32, sc *float32, n int) float32) float32 {
	_ = x[nb*256-1] // the assembly reads this far
	var sc [16 * kChunk]float32
	var sum float32
	for b0 := 0; b0 < nb; b0 += kChunk {
		n := min(kChunk, nb-b0)
		for b := range n {
			scales(src[(b0+b)*bb:(b0+b+1)*bb], sc[16*b:16*b+16])
		}
		sum += asm(&src[b0*bb], &x[b0*256], &sc[0], n)
	}
	return sum
}
