package quantize

// q5k: GGUF's Q5_K, byte for byte. A super-block of 256 weights is 176
// bytes: fp16 d (bytes 0-1) and dmin (2-3), the twelve bytes of q4k's 6-bit
// scales and minimums of eight 32-weight sub-blocks (4-15, kScales), the
// fifth bits qh (16-47) and the low four bits qs (48-175). The low bits are
// laid out as q4k's; weight 32j+l (sub-block j) has its fifth bit in bit j
// of qh[l]. Weight i of sub-block j is d*sc_j*q - dmin*m_j, q in 0..31.

// q5kSpec describes q5k. A matrix whose rows are not whole super-blocks
// falls back to q8, which is no less exact.
var q5kSpec = Spec{
	Format: Q5K, Bits: 5.5, CodeBits: 5, Block: 256, BlockBytes: 176, MinCode: 0, MaxCode: 31,
	Group: 256, TableGroup: 256, BlockScales: true, Fallback: Q8,
	maxAbs: maxF16, maxAbsWhy: "its f16 super-block scales hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ5K, scale: scaleQ5K, halves: []int{0, 2},
	dequantize: dequantizeQ5K, dot: dotQ5K,
	blocks: &blockLayout{sub: 32, qlo: 0, qhi: 31, scLo: 0, scHi: 63, mins: true, pack: packQ5K},
}

// packQ5K writes one super-block.
func packQ5K(dst []byte, f *blockFields) {
	putF16(dst[0:], f.d)
	putF16(dst[2:], f.dmin)
	putKScales(dst[4:16], &f.sc, &f.mn)
	for l := range 32 {
		var h byte
		for j := range 8 {
			h |= byte(f.q[32*j+l]>>4&1) << j
		}
		dst[16+l] = h
	}
	for c := range 4 {
		for l := range 32 {
			dst[48+32*c+l] = byte(f.q[64*c+l]&15) | byte(f.q[64*c+32+l]&15)<<4
		}
	}
}

// codeQ5K reads weight c's nibble and fifth bit.
func codeQ5K(row []byte, c int) int32 {
	blk := row[c/256*176:]
	i := c % 256
	v := blk[48+32*(i/64)+i%32]
	if i%64 >= 32 {
		v >>= 4
	}
	return int32(v&15 | blk[16+i%32]>>(i/32)&1<<4)
}

// scaleQ5K reads the scale and minimum of weight c's sub-block.
func scaleQ5K(row []byte, c int, _ float32) (float32, float32) {
	return kSubScale(row[c/256*176:], c%256/32)
}

// dequantizeQ5K decodes whole super-blocks.
func dequantizeQ5K(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/256; b++ {
		blk := blocks[b*176 : b*176+176]
		qh := (*[32]byte)(blk[16:48])
		for c := range 4 {
			d0, m0 := kSubScale(blk, 2*c)
			d1, m1 := kSubScale(blk, 2*c+1)
			qs := (*[32]byte)(blk[48+32*c:])
			o := (*[64]float32)(out[b*256+64*c:])
			for l, v := range qs {
				h := qh[l] >> (2 * c)
				o[l] = float32(d0*float32(v&15|h&1<<4)) + m0
				o[l+32] = float32(d1*float32(v>>4|h&2<<3)) + m1
			}
		}
	}
}

// dotQ5K is Σ sub-blocks d*sc*Σ q*x - dmin*m*Σ x on the packed bytes: by
// the AVX2 assembly where there is one, the scales decoded here a chunk of
// super-blocks at a time.
func dotQ5K(t *Tensor, r int, x []float32) float32 {
	if !haveAVX2 || t.Cols < 256 {
		return dotQ5KGo(t, r, x)
	}
	return dotKScaled(t.rowData(r), x, t.Cols/256, 176, dotQ5KAVX2)
}

// dotQ5KGo is dotQ5K in plain Go (the reference of the assembly).
func dotQ5KGo(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/256; b++ {
		blk := src[b*176 : b*176+176]
		s := blk[4:16]
		qh := (*[32]byte)(blk[16:48])
		var sq, sm float32
		for c := range 4 {
			qs := (*[32]byte)(blk[48+32*c:])
			xs := (*[64]float32)(x[b*256+64*c:])
			sh := uint(2 * c)
			var a0, a1, a2, a3, s0, s1 float32
			for l := 0; l < 32; l += 2 {
				v0, v1 := qs[l], qs[l+1]
				h0, h1 := qh[l]>>sh, qh[l+1]>>sh
				a0 += float32(v0&15|h0&1<<4) * xs[l]
				a1 += float32(v0>>4|h0&2<<3) * xs[l+32]
				a2 += float32(v1&15|h1&1<<4) * xs[l+1]
				a3 += float32(v1>>4|h1&2<<3) * xs[l+33]
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
