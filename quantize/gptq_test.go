package quantize

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// correlated draws n inputs of cols features that share a few factors, as
// a model's activations do, and returns them with their Hessian (mean x xᵀ).
func correlated(r *rand.Rand, n, cols int) ([]float32, []float32) {
	const factors = 6
	mix := make([]float64, factors*cols)
	for i := range mix {
		mix[i] = r.NormFloat64()
	}
	x := make([]float32, n*cols)
	for t := 0; t < n; t++ {
		var f [factors]float64
		for k := range f {
			f[k] = r.NormFloat64()
		}
		for c := 0; c < cols; c++ {
			v := 0.3 * r.NormFloat64()
			for k := range f {
				v += f[k] * mix[k*cols+c]
			}
			x[t*cols+c] = float32(v)
		}
	}
	h := make([]float32, cols*cols)
	for i := 0; i < cols; i++ {
		for j := 0; j < cols; j++ {
			var s float64
			for t := 0; t < n; t++ {
				s += float64(x[t*cols+i]) * float64(x[t*cols+j])
			}
			h[i*cols+j] = float32(s / float64(n))
		}
	}
	return x, h
}

// outputErr is the mean over inputs x of ‖x·(w - dq)ᵀ‖².
func outputErr(x, w, dq []float32, n, rows, cols int) float64 {
	var e float64
	for t := 0; t < n; t++ {
		xs := x[t*cols : (t+1)*cols]
		for r := 0; r < rows; r++ {
			var s float64
			for c, v := range xs {
				s += float64(v) * float64(w[r*cols+c]-dq[r*cols+c])
			}
			e += s * s
		}
	}
	return e / float64(n)
}

// TestCompensationLowersOutputError: on correlated inputs, compensating
// each column's error lowers the error of the outputs (what the model
// reads) well below the uncompensated quantizer's, in every format that
// takes it, at the same bytes.
func TestCompensationLowersOutputError(t *testing.T) {
	const rows, cols, n = 48, 96, 400
	r := rand.New(rand.NewPCG(21, 22))
	w := heavy(r, rows*cols)
	x, h := correlated(r, n, cols)
	u, err := CompensationFactor(h, cols)
	if err != nil {
		t.Fatal(err)
	}
	imp := make([]float32, cols)
	for c := range imp {
		imp[c] = h[c*cols+c]
	}
	for _, tc := range []struct {
		f    Format
		gain float64
	}{{Q8, 0.5}, {Q4, 0.5}, {Q2, 0.5}, {Q1, 0.5}, {Q2S, 0.5}, {Q3S, 0.5}, {Q4S, 0.5}} {
		plain, err := Quantize(ctx, tc.f, w, rows, cols, Options{Search: true, Importance: imp})
		if err != nil {
			t.Fatal(err)
		}
		comp, err := Quantize(ctx, tc.f, w, rows, cols, Options{Search: true, Importance: imp, Compensate: u})
		if err != nil {
			t.Fatal(err)
		}
		ep, ec := outputErr(x, w, plain.Dequantize(), n, rows, cols), outputErr(x, w, comp.Dequantize(), n, rows, cols)
		t.Logf("%s: output error %.4g weighted search, %.4g compensated (%.0f%% lower)", tc.f, ep, ec, 100*(1-ec/ep))
		if !(ec < (1-tc.gain)*ep) {
			t.Errorf("%s: compensated output error %.4g, not %.0f%% below %.4g", tc.f, ec, 100*tc.gain, ep)
		}
		if len(comp.Data) != len(plain.Data) || len(comp.Scales) != len(plain.Scales) {
			t.Errorf("%s: compensation changed the layout", tc.f)
		}
		// SqErr is the stored weights' error against the original ones.
		var sq float64
		for i, v := range comp.Dequantize() {
			d := float64(v) - float64(w[i])
			sq += d * d
		}
		if math.Abs(sq-comp.SqErr) > 1e-6*sq {
			t.Errorf("%s: SqErr %v, the dequantized weights' %v", tc.f, comp.SqErr, sq)
		}
	}
}

// TestCompensationIdentity: with U the identity no error travels, and each
// format stores what its own quantizer stores, byte for byte.
func TestCompensationIdentity(t *testing.T) {
	const rows, cols = 20, 100 // a short last group
	r := rand.New(rand.NewPCG(23, 24))
	w := heavy(r, rows*cols)
	u := make([]float32, cols*cols)
	for c := 0; c < cols; c++ {
		u[c*cols+c] = 1
	}
	imp := skewedImportance(r, cols)
	for _, f := range []Format{Q8, Q4, Q2, Q1, Q2S, Q3S, Q4S} {
		for _, g := range []int{32, 64} {
			opt := Options{Search: true, Importance: imp, GroupSize: g}
			a, _ := Quantize(ctx, f, w, rows, cols, opt)
			opt.Compensate = u
			b, err := Quantize(ctx, f, w, rows, cols, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Data, b.Data) || !slices.Equal(a.Scales, b.Scales) || !slices.Equal(a.Mins, b.Mins) {
				t.Errorf("%s group %d: the identity factor changed the tensor", f, g)
			}
		}
	}
}

// TestCompensationFactor: UᵀU is the inverse of the damped Hessian; a
// column no input excited gets a factor all the same; bad input is refused.
func TestCompensationFactor(t *testing.T) {
	const cols = 24
	r := rand.New(rand.NewPCG(25, 26))
	_, h := correlated(r, 200, cols)
	for c := 0; c < cols; c++ { // column 5 is dead
		h[5*cols+c], h[c*cols+5] = 0, 0
	}
	u, err := CompensationFactor(h, cols)
	if err != nil {
		t.Fatal(err)
	}
	var mean float64
	hd := make([]float64, cols*cols)
	for i := range hd {
		hd[i] = float64(h[i])
	}
	hd[5*cols+5] = 1
	for i := 0; i < cols; i++ {
		mean += hd[i*cols+i]
	}
	for i := 0; i < cols; i++ {
		hd[i*cols+i] += compensationDamp * mean / cols
	}
	// (UᵀU)·Hd = I
	for i := 0; i < cols; i++ {
		for j := 0; j < cols; j++ {
			var s float64
			for k := 0; k < cols; k++ {
				var inv float64 // (UᵀU)[i][k]
				for m := 0; m <= min(i, k); m++ {
					inv += float64(u[m*cols+i]) * float64(u[m*cols+k])
				}
				s += inv * hd[k*cols+j]
			}
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(s-want) > 1e-3 {
				t.Fatalf("(UᵀU·H)[%d][%d] = %v, want %v", i, j, s, want)
			}
		}
		for j := 0; j < i; j++ {
			if u[i*cols+j] != 0 {
				t.Fatalf("U[%d][%d] = %v below the diagonal", i, j, u[i*cols+j])
			}
		}
	}
	for _, tc := range []struct {
		h    []float32
		n    int
		want string
	}{
		{h[:10], cols, "not ["},
		{[]float32{float32(math.NaN())}, 1, "NaN"},
		{[]float32{1, 2, 2, 1}, 2, "positive definite"},
	} {
		if _, err := CompensationFactor(tc.h, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CompensationFactor(%v): %v, want %q", tc.h, err, tc.want)
		}
	}
	w := make([]float32, 2*cols)
	for _, tc := range []struct {
		f    Format
		u    []float32
		want string
	}{
		{TQ2, u, "does not support"},
		{Q4, u[:cols], "compensation factor of"},
		{Q4, make([]float32, cols*cols), "diagonal entry 0"},
	} {
		if _, err := Quantize(ctx, tc.f, w, 2, cols, Options{Compensate: tc.u}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.f, err, tc.want)
		}
	}
}
