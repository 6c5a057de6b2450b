package quantize

// q2k: GGUF's Q2_K, byte for byte. A super-block of 256 weights is 84
// bytes: a byte per 16-weight sub-block holding its 4-bit scale (low
// nibble) and minimum (high nibble) (bytes 0-15), 2-bit codes qs (16-79),
// and fp16 d (80-81) and dmin (82-83). Weight 128n+32j+l (n in 0..1, j in
// 0..3, l in 0..31) is bits 2j..2j+1 of qs[32n+l]. Weight i of sub-block
// k = i/16 is d*sc_k*q - dmin*m_k, q in 0..3.

// q2kSpec describes q2k. A matrix whose rows are not whole super-blocks
// falls back to q4 (group 32), the smallest of lowbit's formats that is no
// less exact.
var q2kSpec = Spec{
	Format: Q2K, Bits: 2.625, CodeBits: 2, Block: 256, BlockBytes: 84, MinCode: 0, MaxCode: 3,
	Group: 256, TableGroup: 256, BlockScales: true, Fallback: Q4,
	maxAbs: maxF16, maxAbsWhy: "its f16 super-block scales hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ2K, scale: scaleQ2K, halves: []int{80, 82},
	dequantize: dequantizeQ2K, dot: dotQ2K,
	blocks: &blockLayout{sub: 16, qlo: 0, qhi: 3, scLo: 0, scHi: 15, mins: true, pack: packQ2K},
}

// packQ2K writes one super-block.
func packQ2K(dst []byte, f *blockFields) {
	for k := range 16 {
		dst[k] = byte(f.sc[k]) | byte(f.mn[k])<<4
	}
	pack2x4(dst[16:80], f.q[:], 0)
	putF16(dst[80:], f.d)
	putF16(dst[82:], f.dmin)
}

// pack2x4 writes the low two bits of 256 codes (q+off) as q2k and q3k lay
// them out: weight 128n+32j+l in bits 2j..2j+1 of qs[32n+l].
func pack2x4(qs []byte, q []int32, off int32) {
	for n := range 2 {
		for l := range 32 {
			var v byte
			for j := range 4 {
				v |= byte(q[128*n+32*j+l]+off) & 3 << (2 * j)
			}
			qs[32*n+l] = v
		}
	}
}

// code2x4 reads the two bits of weight i (of a super-block) from qs.
func code2x4(qs []byte, i int) byte {
	return qs[32*(i/128)+i%32] >> (2 * (i % 128 / 32)) & 3
}

// codeQ2K reads weight c's code.
func codeQ2K(row []byte, c int) int32 {
	return int32(code2x4(row[c/256*84+16:], c%256))
}

// scaleQ2K reads the scale and minimum of weight c's sub-block.
func scaleQ2K(row []byte, c int, _ float32) (float32, float32) {
	blk := row[c/256*84:]
	s := blk[c%256/16]
	return float32(f16At(blk[80:]) * float32(s&15)), -float32(f16At(blk[82:]) * float32(s>>4))
}

// dequantizeQ2K decodes whole super-blocks.
func dequantizeQ2K(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/256; b++ {
		blk := blocks[b*84 : b*84+84]
		d, dm := f16At(blk[80:]), f16At(blk[82:])
		for n := range 2 {
			qs := (*[32]byte)(blk[16+32*n:])
			for j := range 4 {
				o := (*[32]float32)(out[b*256+128*n+32*j:])
				for half := range 2 {
					s := blk[8*n+2*j+half]
					ds, ms := float32(d*float32(s&15)), -float32(dm*float32(s>>4))
					for l := 16 * half; l < 16*half+16; l++ {
						o[l] = float32(ds*float32(qs[l]>>(2*j)&3)) + ms
					}
				}
			}
		}
	}
}

// dotQ2K is Σ sub-blocks d*sc*Σ q*x - dmin*m*Σ x on the packed bytes: by
// the AVX2 assembly where there is one, the scales decoded here a chunk of
// super-blocks at a time.
func dotQ2K(t *Tensor, r int, x []float32) float32 {
	nb := t.Cols / 256
	if !haveAVX2 || nb == 0 {
		return dotQ2KGo(t, r, x)
	}
	src := t.rowData(r)
	_ = x[nb*256-1] // the assembly reads this far
	var sc, mn [16 * kChunk]float32
	var sum float32
	for b0 := 0; b0 < nb; b0 += kChunk {
		n := min(kChunk, nb-b0)
		for b := range n {
			blk := src[(b0+b)*84 : (b0+b+1)*84]
			d, dm := f16At(blk[80:]), f16At(blk[82:])
			for k := range 16 {
				sc[16*b+k], mn[16*b+k] = d*float32(blk[k]&15), dm*float32(blk[k]>>4)
			}
		}
		sum += dotQ2KAVX2(&src[b0*84], &x[b0*256], &sc[0], &mn[0], n)
	}
	return sum
}

// dotQ2KGo is dotQ2K in plain Go (the reference of the assembly).
func dotQ2KGo(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/256; b++ {
		blk := src[b*84 : b*84+84]
		sc := (*[16]byte)(blk[0:16])
		var sq, sm float32
		for n := range 2 {
			qs := (*[32]byte)(blk[16+32*n:])
			xs := (*[128]float32)(x[b*256+128*n:])
			for half := range 2 {
				var a0, a1, a2, a3, s0, s1, s2, s3 float32
				for l := 16 * half; l < 16*half+16; l++ {
					v := qs[l]
					x0, x1, x2, x3 := xs[l], xs[l+32], xs[l+64], xs[l+96]
					a0 += float32(v&3) * x0
					a1 += float32(v>>2&3) * x1
					a2 += float32(v>>4&3) * x2
					a3 += float32(v>>6) * x3
					s0 += x0
					s1 += x1
					s2 += x2
					s3 += x3
				}
				k := 8*n + half // sub-block of weight 128n+32j+l is 8n+2j+l/16
				sq += float32(sc[k]&15)*a0 + float32(sc[k+2]&15)*a1 + float32(sc[k+4]&15)*a2 + float32(sc[k+6]&15)*a3
				sm += float32(sc[k]>>4)*s0 + float32(sc[k+2]>>4)*s1 + float32(sc[k+4]>>4)*s2 + float32(sc[k+6]>>4)*s3
			}
		}
		sum += f16At(blk[80:])*sq - f16At(blk[82:])*sm
	}
	return sum
}
