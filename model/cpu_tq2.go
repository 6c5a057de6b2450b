package model

import (
	"lowbit/quantize"
)

// BitNet's W2A8 product on the CPU, by table lookup. A tq2 byte holds the
// ternary codes of weights j, j+8, j+16, j+24 of a 32-weight block
// (quantize/tq2.go), so for one token the byte's whole contribution
// Σ t_i·q_i is one of 256 integers that depend only on the four int8
// activations it meets. Each token's activations are quantized per token to
// int8 (quantize.QuantizeInt8, as BitNet does before every ternary matmul),
// then one table of 256 int16 sums is built per byte position of a row
// (cols/4 tables, 64 entries per activation); a row's dot product is then
// one lookup and one integer add per byte, against four multiply-adds and
// the unpacking of four codes in quantize's general DotInt8. The integer sum
// is exact, so the result equals DotInt8's bit for bit:
// float32(Σ t·q) · S · activation scale.

// tq2TokensPerPass bounds the tokens whose tables are built at once (each
// table set is cols*128 bytes), so prefill reads every row once per pass
// while the tables stay in cache.
const tq2TokensPerPass = 4

// matMulTQ2 computes y[n, rows] = x[n, cols] · Wᵀ for a tq2 weight with
// int8 activations.
func (c *CPU) matMulTQ2(q *quantize.Tensor, x, y []float32, n int) {
	rows, cols, rb := q.Rows, q.Cols, q.RowBytes()
	acts := make([]quantize.Int8Vec, min(n, tq2TokensPerPass))
	luts := make([][]int16, len(acts))
	for t0 := 0; t0 < n; t0 += tq2TokensPerPass {
		nt := min(tq2TokensPerPass, n-t0)
		c.parallel(nt, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				quantize.QuantizeInt8(x[(t0+i)*cols:(t0+i+1)*cols], &acts[i])
				luts[i] = buildTQ2Tables(acts[i].Q, rb, luts[i])
			}
		})
		c.parallel(rows, 16, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				data := q.Data[r*rb : (r+1)*rb]
				for i := 0; i < nt; i++ {
					y[(t0+i)*rows+r] = float32(dotTQ2Tables(data, luts[i])) * q.Scale * acts[i].Scale
				}
			}
		})
	}
}

// buildTQ2Tables fills, for each of the rb byte positions k of a row (block
// k/8, offset j = k%8), the 256 sums Σ_i (code_i - 1)·q[32·(k/8) + j + 8i]
// over the four 2-bit codes of a byte; activations past len(q) count as 0.
func buildTQ2Tables(q []int8, rb int, buf []int16) []int16 {
	if cap(buf) < rb*256 {
		buf = make([]int16, rb*256)
	}
	buf = buf[:rb*256]
	act := func(i int) int16 {
		if i < len(q) {
			return int16(q[i])
		}
		return 0
	}
	var low [16]int16
	for k := 0; k < rb; k++ {
		base := (k/8)*32 + k%8
		a0, a1, a2, a3 := act(base), act(base+8), act(base+16), act(base+24)
		// Bits 0-3 hold the codes of a0 and a1, bits 4-7 those of a2 and a3.
		for lo := 0; lo < 16; lo++ {
			low[lo] = int16(lo&3-1)*a0 + int16(lo>>2-1)*a1
		}
		t := (*[256]int16)(buf[k*256 : k*256+256])
		for hi := 0; hi < 16; hi++ {
			h := int16(hi&3-1)*a2 + int16(hi>>2-1)*a3
			row := (*[16]int16)(t[hi*16 : hi*16+16])
			for lo := range row {
				row[lo] = h + low[lo]
			}
		}
	}
	return buf
}

// dotTQ2Tables is Σ over the bytes of a row of table[k][byte]. A row is
// whole 8-byte blocks (quantize/tq2.go), read a block at a time so the
// lookups need no bounds checks.
func dotTQ2Tables(data []byte, tables []int16) int32 {
	var a0, a1, a2, a3 int32
	for k := 0; k+8 <= len(data); k += 8 {
		d := (*[8]byte)(data[k : k+8])
		t := (*[8 * 256]int16)(tables[k<<8 : (k+8)<<8])
		a0 += int32(t[d[0]]) + int32(t[1024+int(d[4])])
		a1 += int32(t[256+int(d[1])]) + int32(t[1280+int(d[5])])
		a2 += int32(t[512+int(d[2])]) + int32(t[1536+int(d[6])])
		a3 += int32(t[768+int(d[3])]) + int32(t[1792+int(d[7])])
	}
	return a0 + a1 + a2 + a3
}
