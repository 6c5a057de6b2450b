package quantize

import (
	"fmt"
	"math"

	"lowbit/half"
)

// Error compensation (Options.Compensate), after GPTQ (Frantar et al.,
// 2022): a row is quantized a column at a time, and each column's rounding
// error, divided by its diagonal entry of U (the upper Cholesky factor of
// the inverse of the inputs' Hessian), is taken off the row's later columns
// in proportion to U's row: the least-squares correction of the output
// x·w for the inputs the Hessian was measured on. A group's scales are
// chosen, by the format's own search, when the group's first column is
// reached, from the row as corrected so far. Rows are independent, so a
// tensor quantized a chunk of rows at a time gets the same codes.

// compensable says whether f's codes can be chosen one at a time at fixed
// group scales and packed: the formats with a scale per group and one code
// per weight in a layout of this package, and the super-block formats
// (their sub-blocks' scales chosen as a group's are).
func compensable(f Format) bool {
	switch f {
	case Q8, Q4, Q2, Q1, Q2S, Q3S, Q4S:
		return true
	}
	return false
}

// Compensable says whether Options.Compensate works with f.
func (f Format) Compensable() bool { return compensable(f) }

// compensator holds one Quantize call's scratch for compensated rows.
type compensator struct {
	work    []float64
	seg     []float32
	scratch Tensor
}

// quantizeRowCompensated packs row r of t from row, compensating each
// column's error (Options.Compensate).
func (cp *compensator) quantizeRow(t *Tensor, r int, row []float32, opt *Options, codes []int32) {
	s := t.Format.spec()
	cols, u := t.Cols, opt.Compensate
	w := cp.work[:cols]
	for c, v := range row {
		w[c] = float64(v)
	}
	gopt := *opt
	gopt.Compensate = nil
	rb := t.RowBytes()
	dst := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	gBytes := t.GroupSize / block * s.BlockBytes
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, cols)
		// The group's scales, from its values as corrected so far.
		seg := cp.seg[:hi-lo]
		for i := range seg {
			seg[i] = float32(w[lo+i])
		}
		sc := &cp.scratch
		sc.Format, sc.Rows, sc.Cols, sc.GroupSize = t.Format, 1, hi-lo, t.GroupSize
		sc.Data = sc.Data[:sc.RowBytes()]
		clear(sc.Data)
		sc.Scales = sc.Scales[:1]
		sc.Mins = sc.Mins[:0]
		if s.Mins {
			sc.Mins = sc.Mins[:1]
		}
		if opt.Importance != nil {
			gopt.Importance = opt.Importance[lo:hi]
		}
		s.quantizeRow(sc, 0, seg, &gopt, codes)
		t.Scales[r*ng+g] = sc.Scales[0]
		d, m := sc.Scales[0].Float32(), float32(0)
		if s.Mins {
			t.Mins[r*ng+g] = sc.Mins[0]
			m = sc.Mins[0].Float32()
		}
		for c := lo; c < hi; c++ {
			q := compensableCode(t.Format, float32(w[c]), d, m)
			codes[c-lo] = q
			v := d*float32(q) + m // as DequantizeRow computes it (m is 0 without Mins)
			t.addErr(row[c], v)
			e := (w[c] - float64(v)) / float64(u[c*cols+c])
			ur := u[c*cols : (c+1)*cols]
			for k := c + 1; k < cols; k++ {
				w[k] -= e * float64(ur[k])
			}
		}
		for i := hi - lo; i < t.GroupSize; i++ {
			codes[i] = padCode(t.Format)
		}
		packGroup(t.Format, dst, g*gBytes, lo, codes[:t.GroupSize])
	}
}

// compensableCode is the code of v at scale d (and minimum m) in a compensable
// format, as its quantizer rounds.
func compensableCode(f Format, v, d, m float32) int32 {
	switch f {
	case Q1:
		if v >= 0 {
			return 1
		}
		return -1
	case Q8:
		return symCode(v, d, 127)
	}
	if d == 0 {
		return 0
	}
	x := min(max((v-m)*(1/d), 0), float32(f.spec().MaxCode))
	return int32(x + 0.5)
}

// padCode is the code that pads a short last group.
func padCode(f Format) int32 {
	if f == Q1 {
		return -1 // a clear bit, as quantizeQ1Row leaves it
	}
	return 0
}

// packGroup packs a group's codes (GroupSize of them) into a row's bytes
// dst: at byte off for q4 and q2, at weight lo for q8 and q1.
func packGroup(f Format, dst []byte, off, lo int, codes []int32) {
	switch f {
	case Q8:
		for i, q := range codes {
			dst[lo+i] = byte(int8(q))
		}
	case Q1:
		for i, q := range codes {
			if q > 0 {
				c := lo + i
				dst[c/8] |= 1 << (c % 8)
			}
		}
	default:
		s := f.spec()
		s.pack(dst[off:off+len(codes)/block*s.BlockBytes], codes)
	}
}

// checkCompensate checks Options.Compensate against a tensor of cols
// columns in f: the format, the size, and a positive finite diagonal.
func checkCompensate(f Format, u []float32, cols int) error {
	if !compensable(f) {
		return fmt.Errorf("%s does not support error compensation", f)
	}
	if len(u) != cols*cols {
		return fmt.Errorf("a compensation factor of %d values for %d columns (want %d)", len(u), cols, cols*cols)
	}
	for c := 0; c < cols; c++ {
		if d := u[c*cols+c]; !(d > 0) || math.IsInf(float64(d), 0) {
			return fmt.Errorf("compensation factor's diagonal entry %d is %v, not a positive number", c, d)
		}
	}
	return nil
}

// newCompensator allocates the scratch of compensated rows of cols columns.
func newCompensator(cols, group int) *compensator {
	return &compensator{work: make([]float64, cols), seg: make([]float32, group), scratch: Tensor{
		Data: make([]byte, group), Scales: make([]half.Float16, 1), Mins: make([]half.Float16, 1)}}
}

// compensationDamp is added to the Hessian's diagonal, times its mean, before
// it is inverted: GPTQ's 1%, which keeps the factor finite where inputs are
// nearly dependent, at little cost to the correction.
const compensationDamp = 0.01

// CompensationFactor is Options.Compensate for inputs whose Hessian (the
// mean of x xᵀ over calibration tokens) is h, [n, n] row-major: the upper
// Cholesky factor U of (h + damp)⁻¹, so that (h + damp)⁻¹ = Uᵀ U. A column
// no input excited (a zero diagonal) gets 1 there, as GPTQ does. It costs
// O(n³) in float64.
func CompensationFactor(h []float32, n int) ([]float32, error) {
	if n <= 0 || len(h) != n*n {
		return nil, fmt.Errorf("quantize: a Hessian of %d values is not [%d, %d]", len(h), n, n)
	}
	a := make([]float64, n*n)
	var mean float64
	for i, v := range h {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("quantize: Hessian entry %d is %v", i, v)
		}
		a[i] = float64(v)
	}
	for i := 0; i < n; i++ {
		if a[i*n+i] <= 0 {
			a[i*n+i] = 1
		}
		mean += a[i*n+i]
	}
	mean /= float64(n)
	for i := 0; i < n; i++ {
		a[i*n+i] += compensationDamp * mean
	}
	// a = L Lᵀ, in place (lower triangle).
	if err := cholesky(a, n); err != nil {
		return nil, err
	}
	// a⁻¹ = L⁻ᵀ L⁻¹: invert L in place, then form the product.
	for i := 0; i < n; i++ {
		a[i*n+i] = 1 / a[i*n+i]
		for j := 0; j < i; j++ {
			var s float64
			for k := j; k < i; k++ {
				s += a[i*n+k] * a[k*n+j]
			}
			a[i*n+j] = -s * a[i*n+i]
		}
	}
	inv := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			var s float64
			for k := i; k < n; k++ {
				s += a[k*n+i] * a[k*n+j]
			}
			inv[i*n+j], inv[j*n+i] = s, s
		}
	}
	// inv = Uᵀ U: the Cholesky factor of inv, transposed.
	if err := cholesky(inv, n); err != nil {
		return nil, err
	}
	u := make([]float32, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			u[j*n+i] = float32(inv[i*n+j])
		}
	}
	return u, nil
}

// cholesky factors the symmetric positive definite a ([n, n]) as L Lᵀ, L
// in a's lower triangle (the upper is left as it was).
func cholesky(a []float64, n int) error {
	for j := 0; j < n; j++ {
		s := a[j*n+j]
		for k := 0; k < j; k++ {
			s -= a[j*n+k] * a[j*n+k]
		}
		if !(s > 0) {
			return fmt.Errorf("quantize: the damped Hessian is not positive definite (pivot %d is %g)", j, s)
		}
		d := math.Sqrt(s)
		a[j*n+j] = d
		for i := j + 1; i < n; i++ {
			s := a[i*n+j]
			for k := 0; k < j; k++ {
				s -= a[i*n+k] * a[j*n+k]
			}
			a[i*n+j] = s / d
		}
	}
	return nil
}
