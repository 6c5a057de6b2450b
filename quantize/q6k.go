package quantize

// q6k: GGUF's Q6_K, byte for byte. A super-block of 256 weights is 210
// bytes: the low four bits ql (bytes 0-127), the high two bits qh
// (128-191), sixteen int8 scales of its 16-weight sub-blocks (192-207) and
// an fp16 d (208-209). Each half h of 128 weights has ql[64h..64h+63] and
// qh[32h..32h+31]: weight 128h+32p+l (p in 0..3, l in 0..31) has its low
// bits in the low nibble of ql[64h+l+32(p%2)] for p < 2, the high nibble
// for p >= 2, and its high bits in bits 2p..2p+1 of qh[32h+l]. Weight i is
// d*sc*(q-32), sc the int8 scale of sub-block i/16: the code RowCodes reads
// is q-32, in -32..31.

// q6kSpec describes q6k. A matrix whose rows are not whole super-blocks
// falls back to q8, which is no less exact.
var q6kSpec = Spec{
	Format: Q6K, Bits: 6.5625, CodeBits: 6, Block: 256, BlockBytes: 210, MinCode: -32, MaxCode: 31,
	Group: 256, TableGroup: 256, BlockScales: true, Fallback: Q8,
	maxAbs: maxF16, maxAbsWhy: "its f16 super-block scales hold at most 65504",
	quantizeRow: quantizeBlockRow, code: codeQ6K, scale: scaleQ6K, halves: []int{208},
	dequantize: dequantizeQ6K, dot: dotQ6K,
	blocks: &blockLayout{sub: 16, qlo: -32, qhi: 31, scLo: -128, scHi: 127, pack: packQ6K},
}

// packQ6K writes one super-block.
func packQ6K(dst []byte, f *blockFields) {
	for h := range 2 {
		for l := range 32 {
			var u [4]byte
			for p := range 4 {
				u[p] = byte(f.q[128*h+32*p+l] + 32)
			}
			dst[64*h+l] = u[0]&15 | u[2]&15<<4
			dst[64*h+l+32] = u[1]&15 | u[3]&15<<4
			dst[128+32*h+l] = u[0]>>4 | u[1]>>4<<2 | u[2]>>4<<4 | u[3]>>4<<6
		}
	}
	for j := range 16 {
		dst[192+j] = byte(int8(f.sc[j]))
	}
	putF16(dst[208:], f.d)
}

// codeQ6K reads weight c's low and high bits, less 32.
func codeQ6K(row []byte, c int) int32 {
	blk := row[c/256*210:]
	i := c % 256
	h, p, l := i/128, i%128/32, i%32
	lo := blk[64*h+l+32*(p%2)]
	if p >= 2 {
		lo >>= 4
	}
	hi := blk[128+32*h+l] >> (2 * p) & 3
	return int32(lo&15|hi<<4) - 32
}

// scaleQ6K reads the scale of weight c's sub-block: d times its int8.
func scaleQ6K(row []byte, c int, _ float32) (float32, float32) {
	blk := row[c/256*210:]
	return float32(f16At(blk[208:]) * float32(int8(blk[192+c%256/16]))), 0
}

// dequantizeQ6K decodes whole super-blocks.
func dequantizeQ6K(blocks []byte, _, _ float32, out []float32) {
	for b := 0; b < len(out)/256; b++ {
		blk := blocks[b*210 : b*210+210]
		d := f16At(blk[208:])
		for h := range 2 {
			ql := (*[64]byte)(blk[64*h:])
			qh := (*[32]byte)(blk[128+32*h:])
			o := (*[128]float32)(out[b*256+128*h:])
			for l := range 32 {
				k := 192 + 8*h + l/16
				v0, v1, hb := ql[l], ql[l+32], qh[l]
				o[l] = float32(d*float32(int8(blk[k]))) * float32(int32(v0&15|hb&3<<4)-32)
				o[l+32] = float32(d*float32(int8(blk[k+2]))) * float32(int32(v1&15|hb>>2&3<<4)-32)
				o[l+64] = float32(d*float32(int8(blk[k+4]))) * float32(int32(v0>>4|hb>>4&3<<4)-32)
				o[l+96] = float32(d*float32(int8(blk[k+6]))) * float32(int32(v1>>4|hb>>6<<4)-32)
			}
		}
	}
}

// dotQ6K is Σ sub-blocks d*sc*Σ (q-32)*x on the packed bytes: by the AVX2
// assembly where there is one, the scales decoded here a chunk of
// super-blocks at a time.
func dotQ6K(t *Tensor, r int, x []float32) float32 {
	nb := t.Cols / 256
	if !haveAVX2 || nb == 0 {
		return dotQ6KGo(t, r, x)
	}
	return dotK16Scaled(t.rowData(r), x, nb, 210, func(blk []byte, sc []float32) {
		d := f16At(blk[208:])
		for k := range 16 {
			sc[k] = d * float32(int8(blk[192+k]))
		}
	}, dotQ6KAVX2)
}

// dotQ6KGo is dotQ6K in plain Go (the reference of the assembly).
func dotQ6KGo(t *Tensor, r int, x []float32) float32 {
	src := t.rowData(r)
	var sum float32
	for b := 0; b < t.Cols/256; b++ {
		blk := src[b*210 : b*210+210]
		sc := (*[16]byte)(blk[192:208])
		var s float32
		for h := range 2 {
			ql := (*[64]byte)(blk[64*h:])
			qh := (*[32]byte)(blk[128+32*h:])
			xs := (*[128]float32)(x[b*256+128*h:])
			for half := range 2 {
				var a0, a1, a2, a3 float32
				for l := 16 * half; l < 16*half+16; l++ {
					v0, v1, hb := ql[l], ql[l+32], qh[l]
					a0 += float32(int32(v0&15|hb&3<<4)-32) * xs[l]
					a1 += float32(int32(v1&15|hb>>2&3<<4)-32) * xs[l+32]
					a2 += float32(int32(v0>>4|hb>>4&3<<4)-32) * xs[l+64]
					a3 += float32(int32(v1>>4|hb>>6<<4)-32) * xs[l+96]
				}
				k := 8*h + half
				s += float32(int8(sc[k]))*a0 + float32(int8(sc[k+2]))*a1 + float32(int8(sc[k+4]))*a2 + float32(int8(sc[k+6]))*a3
			}
		}
		sum += f16At(blk[208:]) * s
	}
	return sum
}
