package model

import (
	"context"

	"lowbit/quantize"
)

// cpuMat is a weight prepared for the CPU kernels. For q4 and q8 whose rows
// are whole groups, the fp16 scales (and q4 minimums) are widened to
// float32 once at upload, and the kernels below replace package quantize's
// general dot products: the same arithmetic, arranged for the 2-core decode
// case (codes turned into floats by table lookups instead of conversions,
// q4's per-group sums of x computed once per token instead of once per row).
// Other formats and shapes use quantize.MatMul. A sequence that brings 4
// or more tokens to a step (a prompt) has each row dequantized once and
// takes float dot products; see runs.
type cpuMat struct {
	w            *Weight
	scales, mins []float32
}

// prepare widens the scales of weights the fast kernels handle.
func prepare(w *Weight) *cpuMat {
	m := &cpuMat{w: w}
	q := w.Q
	if q == nil || (q.Format != quantize.Q4 && q.Format != quantize.Q8) || q.Cols%q.GroupSize != 0 {
		return m
	}
	m.scales = make([]float32, len(q.Scales))
	for i, s := range q.Scales {
		m.scales[i] = s.Float32()
	}
	if q.Format == quantize.Q4 {
		m.mins = make([]float32, len(q.Mins))
		for i, s := range q.Mins {
			m.mins[i] = s.Float32()
		}
	}
	return m
}

// prefillTokens is how many tokens of one sequence in a step make the
// dequantized rows worth their decoding.
const prefillTokens = 4

// runs splits the n rows of a product's input by sequence: the step's
// sequences when the rows are the step's tokens, else one row each (the
// logits of the last token of each sequence that asked for them).
func (c *CPU) runs(n int) []int {
	if n == len(c.tokens) {
		return c.seqLen
	}
	one := make([]int, n)
	for i := range one {
		one[i] = 1
	}
	return one
}

// matMulQuant computes y[n, rows] = x[n, cols] · Wᵀ for a quantized weight.
// The two ways of computing a row round differently, so the way is chosen
// per sequence (runs), never per step: a sequence's products, and so its
// tokens, do not depend on what else is in the step (the CPU is the
// reference that batching changes no token).
func (c *CPU) matMulQuant(m *cpuMat, x, y []float32, n int) {
	q := m.w.Q
	if q.Format.Spec().Int8Activations {
		quantize.MatMul(context.Background(), q, x[:n*q.Cols], n, y[:n*q.Rows], c.workers())
		return
	}
	var wide, packed []int // the tokens of prompts, and the others
	i := 0
	for _, k := range c.runs(n) {
		for range k {
			if k >= prefillTokens {
				wide = append(wide, i)
			} else {
				packed = append(packed, i)
			}
			i++
		}
	}
	if len(wide) > 0 {
		// Prefill: decode each row to floats once and use it for every token.
		c.parallel(q.Rows, 16, func(lo, hi int) {
			row := make([]float32, q.Cols)
			for r := lo; r < hi; r++ {
				q.DequantizeRow(r, row)
				for _, i := range wide {
					y[i*q.Rows+r] = dot(row, x[i*q.Cols:(i+1)*q.Cols])
				}
			}
		})
	}
	if len(packed) == 0 {
		return
	}
	if len(wide) > 0 {
		// Gather the others' rows, multiply them, scatter the products.
		xs := make([]float32, len(packed)*q.Cols)
		for j, i := range packed {
			copy(xs[j*q.Cols:(j+1)*q.Cols], x[i*q.Cols:(i+1)*q.Cols])
		}
		ys := make([]float32, len(packed)*q.Rows)
		c.matMulPacked(m, xs, ys, len(packed))
		for j, i := range packed {
			copy(y[i*q.Rows:(i+1)*q.Rows], ys[j*q.Rows:(j+1)*q.Rows])
		}
		return
	}
	c.matMulPacked(m, x, y, n)
}

// matMulPacked computes y[n, rows] = x[n, cols] · Wᵀ on the packed codes.
func (c *CPU) matMulPacked(m *cpuMat, x, y []float32, n int) {
	q := m.w.Q
	if m.scales == nil {
		quantize.MatMul(context.Background(), q, x[:n*q.Cols], n, y[:n*q.Rows], c.workers())
		return
	}
	rows, cols, rb, ng := q.Rows, q.Cols, q.RowBytes(), q.Groups()
	var xsum []float32
	if q.Format == quantize.Q4 {
		// Sum of x over each group, per token: the minimums' share of every row.
		xsum = make([]float32, n*ng)
		for i := 0; i < n; i++ {
			for g := 0; g < ng; g++ {
				var s float32
				for _, v := range x[i*cols+g*q.GroupSize : i*cols+(g+1)*q.GroupSize] {
					s += v
				}
				xsum[i*ng+g] = s
			}
		}
	}
	// Code tables: a q8 byte as a float; a q4 byte as its two nibbles.
	lut, nib := new([256]float32), new([256][2]float32)
	for i := range lut {
		lut[i] = float32(int8(i))
		nib[i] = [2]float32{float32(i & 15), float32(i >> 4)}
	}
	c.parallel(rows, 16, func(lo, hi int) {
		r := lo
		if q.Format == quantize.Q4 && !haveAVX2 {
			// Two rows at a time share the loads of x.
			for ; r+2 <= hi; r += 2 {
				for i := 0; i < n; i++ {
					y[i*rows+r], y[i*rows+r+1] = dotQ4Rows2(q.Data[r*rb:(r+2)*rb], rb, m.scales[r*ng:(r+2)*ng], m.mins[r*ng:(r+2)*ng],
						x[i*cols:(i+1)*cols], xsum[i*ng:(i+1)*ng], q.GroupSize, nib)
				}
			}
		}
		for ; r < hi; r++ {
			data := q.Data[r*rb : (r+1)*rb]
			scales := m.scales[r*ng : (r+1)*ng]
			for i := 0; i < n; i++ {
				xs := x[i*cols : (i+1)*cols]
				if q.Format == quantize.Q4 {
					y[i*rows+r] = dotQ4Rows(data, scales, m.mins[r*ng:(r+1)*ng], xs, xsum[i*ng:(i+1)*ng], q.GroupSize)
				} else {
					y[i*rows+r] = dotQ8Rows(data, scales, xs, q.GroupSize, lut)
				}
			}
		}
	})
}

// dotQ4Rows is one q4 row times x: per group d*Σq·x + m*Σx, with Σx given.
// Block layout (ARCHITECTURE.md): byte j of a 32-weight block holds weight j
// in its low nibble and weight j+16 in its high nibble.
func dotQ4Rows(data []byte, scales, mins, x, xsum []float32, groupSize int) float32 {
	if haveAVX2 && len(scales) > 0 {
		_, _ = x[len(scales)*groupSize-1], data[len(scales)*groupSize/2-1] // the assembly reads this far
		sum := dotQ4AVX2(&data[0], &scales[0], &x[0], len(scales), groupSize/32)
		for g, m := range mins {
			sum += m * xsum[g]
		}
		return sum
	}
	return dotQ4RowsGo(data, scales, mins, x, xsum, groupSize)
}

// dotQ4RowsGo is dotQ4Rows in plain Go (the reference of the assembly).
func dotQ4RowsGo(data []byte, scales, mins, x, xsum []float32, groupSize int) float32 {
	nib := [16]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	blocks := groupSize / 32
	var sum float32
	for g := range scales {
		var acc float32
		for b := g * blocks; b < (g+1)*blocks; b++ {
			p := (*[16]byte)(data[b*16 : b*16+16])
			xs := (*[32]float32)(x[b*32 : b*32+32])
			var a0, a1, a2, a3 float32
			for j := 0; j < 16; j += 2 {
				v0, v1 := p[j], p[j+1]
				a0 += nib[v0&15] * xs[j]
				a1 += nib[v0>>4] * xs[j+16]
				a2 += nib[v1&15] * xs[j+1]
				a3 += nib[v1>>4] * xs[j+17]
			}
			acc += (a0 + a1) + (a2 + a3)
		}
		sum += scales[g]*acc + mins[g]*xsum[g]
	}
	return sum
}

// dotQ4Rows2 is dotQ4Rows for two consecutive rows (data holds both, rb
// bytes each; scales and mins hold both rows' groups). nib maps a packed
// byte to its low and high nibble as floats, saving the shifts and masks.
func dotQ4Rows2(data []byte, rb int, scales, mins, x, xsum []float32, groupSize int, nib *[256][2]float32) (float32, float32) {
	blocks := groupSize / 32
	ng := len(scales) / 2
	var sum0, sum1 float32
	for g := 0; g < ng; g++ {
		var acc0, acc1 float32
		for b := g * blocks; b < (g+1)*blocks; b++ {
			p := (*[16]byte)(data[b*16 : b*16+16])
			p1 := (*[16]byte)(data[rb+b*16 : rb+b*16+16])
			xs := (*[32]float32)(x[b*32 : b*32+32])
			var a0, a1, a2, a3 float32
			for j := 0; j < 16; j++ {
				x0, x1 := xs[j], xs[j+16]
				n0, n1 := &nib[p[j]], &nib[p1[j]]
				a0 += n0[0] * x0
				a1 += n0[1] * x1
				a2 += n1[0] * x0
				a3 += n1[1] * x1
			}
			acc0 += a0 + a1
			acc1 += a2 + a3
		}
		sum0 += scales[g]*acc0 + mins[g]*xsum[g]
		sum1 += scales[ng+g]*acc1 + mins[ng+g]*xsum[g]
	}
	return sum0, sum1
}

// dotQ8Rows is one q8 row times x: per group d*Σq·x, the int8 codes read
// as floats through lut.
func dotQ8Rows(data []byte, scales, x []float32, groupSize int, lut *[256]float32) float32 {
	if haveAVX2 && len(scales) > 0 {
		_ = x[len(scales)*groupSize-1] // the assembly reads this far
		return dotQ8AVX2(&data[0], &scales[0], &x[0], len(scales), groupSize/32)
	}
	return dotQ8RowsGo(data, scales, x, groupSize, lut)
}

// dotQ8RowsGo is dotQ8Rows in plain Go (the reference of the assembly).
func dotQ8RowsGo(data []byte, scales, x []float32, groupSize int, lut *[256]float32) float32 {
	var sum float32
	for g := range scales {
		var acc float32
		for b := g * groupSize; b < (g+1)*groupSize; b += 32 {
			p := (*[32]byte)(data[b : b+32])
			xs := (*[32]float32)(x[b : b+32])
			var a0, a1, a2, a3 float32
			for j := 0; j < 32; j += 4 {
				a0 += lut[p[j]] * xs[j]
				a1 += lut[p[j+1]] * xs[j+1]
				a2 += lut[p[j+2]] * xs[j+2]
				a3 += lut[p[j+3]] * xs[j+3]
			}
			acc += (a0 + a1) + (a2 + a3)
		}
		sum += scales[g] * acc
	}
	return sum
}
