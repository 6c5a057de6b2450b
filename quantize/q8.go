package quantize

import (
	"math"

	"lowbit/half"
)

// q8: symmetric 8-bit. A weight is d*q with q in [-127, 127] and one fp16 d
// per group. Layout: one int8 per weight, groups back to back (32 bytes per
// 32 weights); padding of a short last group is 0.

// q8Spec describes q8. An embedding table or output head takes groups of
// 128: these are a model's largest tensors, and at batch 1 the head is read
// whole every token; a 128-weight group has a quarter of the fp16 scales
// to read for a rounding error only slightly larger, still far below what
// fewer bits in the head would cost (BENCHMARKS.md has the figures). Its scale is a group's largest |w| / 127,
// so weights up to 127 times the largest fp16 fit.
var q8Spec = Spec{
	Format: Q8, Bits: 8, CodeBits: 8, Block: 32, BlockBytes: 32, MinCode: -127, MaxCode: 127, Group: 32, TableGroup: 128,
	maxAbs: 127 * maxF16, maxAbsWhy: "its f16 scales, a group's largest |weight| / 127, hold at most 65504",
	quantizeRow: quantizeQ8Row, code: codeQ8, dequantize: dequantizeQ8, dot: dotQ8, dotInt8: dotInt8Q8,
}

// quantizeQ8Row packs one row. With search, scales below absmax/127 (which
// clip the largest weights) and the least-squares scale for the chosen codes
// are tried, keeping the one with the smallest squared error (weighted by
// opt.Importance where given).
func quantizeQ8Row(t *Tensor, r int, row []float32, opt *Options, codes []int32) {
	search := opt.Search
	rb := t.RowBytes()
	dst := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, len(row))
		w := row[lo:hi]
		var imp []float32
		if opt.Importance != nil {
			imp = opt.Importance[lo:hi]
		}
		var amax float32
		for _, v := range w {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		best := half.FromFloat32(amax / 127)
		if search && amax > 0 {
			bestErr := symErr(w, imp, best.Float32(), 127)
			for _, ratio := range []float32{0.995, 0.99, 0.98, 0.97, 0.96, 0.94, 0.92, 0.9} {
				d := half.FromFloat32(amax * ratio / 127)
				if e := symErr(w, imp, d.Float32(), 127); e < bestErr {
					best, bestErr = d, e
				}
			}
			// Least-squares refit of the scale for the best codes.
			if d := lsScale(w, imp, best.Float32(), 127); d > 0 {
				h := half.FromFloat32(d)
				if e := symErr(w, imp, h.Float32(), 127); e < bestErr {
					best = h
				}
			}
		}
		t.Scales[r*ng+g] = best
		d := best.Float32()
		for i, v := range w {
			q := int8(symCode(v, d, 127))
			dst[lo+i] = byte(q)
			t.addErr(v, d*float32(q)) // as DequantizeRow computes it
		}
	}
}

// symCode is the nearest code in [-n, n] for v at scale d.
func symCode(v, d float32, n int32) int32 {
	if d == 0 {
		return 0
	}
	q := int32(math.RoundToEven(float64(v / d)))
	return min(max(q, -n), n)
}

// symErr is the squared error of a group at scale d, each weight's
// weighted by imp (nil: unweighted).
func symErr(w, imp []float32, d float32, n int32) float64 {
	var e float64
	for i, v := range w {
		x := float64(d*float32(symCode(v, d, n)) - v)
		if imp != nil {
			e += float64(imp[i]) * x * x
		} else {
			e += x * x
		}
	}
	return e
}

// lsScale is the scale minimizing the squared error (weighted by imp
// where given) for the codes chosen at d.
func lsScale(w, imp []float32, d float32, n int32) float32 {
	var sqw, sqq float64
	for i, v := range w {
		q := float64(symCode(v, d, n))
		a := 1.0
		if imp != nil {
			a = float64(imp[i])
		}
		sqw += a * q * float64(v)
		sqq += a * q * q
	}
	if sqq == 0 {
		return 0
	}
	return float32(sqw / sqq)
}

// codeQ8 reads weight c's code: its byte as an int8.
func codeQ8(row []byte, c int) int32 { return int32(int8(row[c])) }

// dequantizeQ8 writes d*q.
func dequantizeQ8(blocks []byte, d, _ float32, out []float32) {
	for c := range out {
		out[c] = d * float32(int8(blocks[c]))
	}
}

// dotQ8 multiplies int8 codes by x a group at a time, scaling once per group.
func dotQ8(t *Tensor, r int, x []float32) float32 {
	rb := t.RowBytes()
	src := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	scales := t.Scales[r*ng : (r+1)*ng]
	var sum float32
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		q := src[lo:hi]
		xs := x[lo:hi]
		var a0, a1, a2, a3 float32
		i := 0
		for ; i+4 <= len(q); i += 4 {
			a0 += float32(int8(q[i])) * xs[i]
			a1 += float32(int8(q[i+1])) * xs[i+1]
			a2 += float32(int8(q[i+2])) * xs[i+2]
			a3 += float32(int8(q[i+3])) * xs[i+3]
		}
		for ; i < len(q); i++ {
			a0 += float32(int8(q[i])) * xs[i]
		}
		sum += scales[g].Float32() * (a0 + a1 + a2 + a3)
	}
	return sum
}

// dotInt8Q8 is W8A8: a.Scale * sum over groups of d*sum(qw*qx), integer
// inside groups.
func dotInt8Q8(t *Tensor, row int, a *Int8Vec) float32 {
	rb := t.RowBytes()
	src := t.Data[row*rb : (row+1)*rb]
	ng := t.Groups()
	var sum float32
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, t.Cols)
		var acc int32
		for i := lo; i < hi; i++ {
			acc += int32(int8(src[i])) * int32(a.Q[i])
		}
		sum += t.Scales[row*ng+g].Float32() * float32(acc)
	}
	return sum * a.Scale
}
