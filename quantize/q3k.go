package quantize

// q3k: GGUF's Q3_K, byte for byte. A super-block of 256 weights is 110
// bytes: the codes' high bits hmask (bytes 0-31), their low two bits qs
// (32-95, laid out as q2k's), twelve bytes of 6-bit scales of the sixteen
// 16-weight sub-blocks (96-107, q3kScale) and an fp16 d (108-109). Weight
// 128n+32j+l (n in 0..1, j in 0..3, l in 0..31) has its high bit in bit
// 4n+j of hmask[l]. Weight i is d*(s-32)*(q-4), q its 3-bit code and s the
// 6-bit scale of sub-block i/16: the code RowCodes reads is q-4, in -4..3.

// q3kSpec describes q3k. A matrix whose rows are not whole super-blocks
// falls back to q4 (group 32), the smallest of lowbit's formats that is no
// less exact.
var q3kSpec = Spec{
	Format: Q3K, Bits: 3.4375, CodeBits: 3, Block: 256, BlockBytes: 110, MinCode: -4, MaxCode: 3,
	Group: 256, TableGroup: 256, BlockScales: true, Fallback: Q4,
	maxAbs: maxF16, maxAbsWhy: "its f16 super-block scales hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ3K, scale: scaleQ3K, halves: []int{108},
	dequantize: dequantizeQ3K, dot: dotQ3K,
	blocks: &blockLayout{sub: 16, qlo: -4, qhi: 3, scLo: -32, scHi: 31, pack: packQ3K},
}

// q3kScale reads sub-block k's 6-bit scale s from the 12 bytes sc: its low
// four bits are the low nibble of sc[k] for k < 8, the high nibble of
// sc[k-8] after; its high two bits are bits 2(k/4)..2(k/4)+1 of sc[8+k%4].
func q3kScale(sc []byte, k int) int32 {
	lo := sc[k%8]
	if k >= 8 {
		lo >>= 4
	}
	return int32(lo&15 | sc[8+k%4]>>(2*(k/4))&3<<4)
}

// packQ3K writes one super-block.
func packQ3K(dst []byte, f *blockFields) {
	for l := range 32 {
		var h byte
		for n := range 2 {
			for j := range 4 {
				h |= byte(f.q[128*n+32*j+l]+4) >> 2 << (4*n + j)
			}
		}
		dst[l] = h
	}
	pack2x4(dst[32:96], f.q[:], 4)
	var u [16]byte
	for k := range 16 {
		u[k] = byte(f.sc[k] + 32)
	}
	for k := range 8 {
		dst[96+k] = u[k]&15 | u[k+8]&15<<4
	}
	for k := range 4 {
		dst[104+k] = u[k]>>4 | u[k+4]>>4<<2 | u[k+8]>>4<<4 | u[k+12]>>4<<6
	}
	putF16(dst[108:], f.d)
}

// codeQ3K reads weight c's low bits and high bit, less 4.
func codeQ3K(row []byte, c int) int32 {
	blk := row[c/256*110:]
	i := c % 256
	hb := blk[i%32] >> (4*(i/128) + i%128/32) & 1
	return int32(code2x4(blk[32:], i)|hb<<2) - 4
}

// scaleQ3K reads the scale of weight c's sub-block: d*(s-32).
func scaleQ3K(row []byte, c int, _ float32) (float32, float32) {
	blk := row[c/256*110:]
	return float32(f16At(blk[108:]) * float32(q3kScale(blk[96:108], c%256/16)-32)), 0
}

// dequantizeQ3K decodes whole super-blocks.
func dequantizeQ3K(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/256; b++ {
		blk := blocks[b*110 : b*110+110]
		d := f16At(blk[108:])
		hm := (*[32]byte)(blk[0:32])
		for n := range 2 {
			qs := (*[32]byte)(blk[32+32*n:])
			for j := range 4 {
				o := (*[32]float32)(out[b*256+128*n+32*j:])
				sh, hs := uint(2*j), uint(4*n+j)
				for half := range 2 {
					ds := float32(d * float32(q3kScale(blk[96:108], 8*n+2*j+half)-32))
					for l := 16 * half; l < 16*half+16; l++ {
						o[l] = ds * float32(int32(qs[l]>>sh&3|hm[l]>>hs&1<<2)-4)
					}
				}
			}
		}
	}
}

// dotQ3K is Σ sub-blocks d*(s-32)*Σ (q-4)*x on the packed bytes: by the
// AVX2 assembly where there is one, the scales decoded here a chunk of
// super-blocks at a time.
func dotQ3K(t *Tensor, r int, x []float32) float32 {
	nb := t.Cols / 256
	if !haveAVX2 || nb == 0 {
		return dotQ3KGo(t, r, x)
	}
	return dotK16Scaled(t.rowData(r), x, nb, 110, func(blk []byte, sc []float32) {
		d := f16At(blk[108:])
		for k := range 16 {
			sc[k] = d * float32(q3kScale(blk[96:108], k)-32)
		}
	}, dotQ3KAVX2)
}

// dotQ3KGo is dotQ3K in plain Go (the reference of the assembly).
func dotQ3KGo(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/256; b++ {
		blk := src[b*110 : b*110+110]
		hm := (*[32]byte)(blk[0:32])
		var scales [16]float32
		for k := range scales {
			scales[k] = float32(q3kScale(blk[96:108], k) - 32)
		}
		var s float32
		for n := range 2 {
			qs := (*[32]byte)(blk[32+32*n:])
			xs := (*[128]float32)(x[b*256+128*n:])
			hs := uint(4 * n)
			for half := range 2 {
				var a0, a1, a2, a3 float32
				for l := 16 * half; l < 16*half+16; l++ {
					v, h := qs[l], hm[l]>>hs
					a0 += float32(int32(v&3|h&1<<2)-4) * xs[l]
					a1 += float32(int32(v>>2&3|h&2<<1)-4) * xs[l+32]
					a2 += float32(int32(v>>4&3|h&4)-4) * xs[l+64]
					a3 += float32(int32(v>>6|h&8>>1)-4) * xs[l+96]
				}
				k := 8*n + half
				s += scales[k]*a0 + scales[k+2]*a1 + scales[k+4]*a2 + scales[k+6]*a3
			}
		}
		sum += f16At(blk[108:]) * s
	}
	return sum
}
