package quantize

import (
	"math"
	"math/rand/v2"
	"testing"
)

// skewedImportance is a per-column importance with the spread calibration
// gives: most columns near 1, a few hundreds of times larger, some near 0.
func skewedImportance(r *rand.Rand, cols int) []float32 {
	imp := make([]float32, cols)
	for c := range imp {
		imp[c] = float32(math.Exp(2 * r.NormFloat64()))
	}
	return imp
}

// weightedErr is sum imp[col]*(w - dq)^2 over the matrix.
func weightedErr(w, dq, imp []float32, cols int) float64 {
	var e float64
	for i, v := range w {
		d := float64(dq[i]) - float64(v)
		a := 1.0
		if imp != nil {
			a = float64(imp[i%cols])
		}
		e += a * d * d
	}
	return e
}

// TestImportanceLowersWeightedError: the search with importance weights
// finds scales whose weighted error is lower than the unweighted search's,
// by a margin that shows the weights are used, for every searched format.
func TestImportanceLowersWeightedError(t *testing.T) {
	const rows, cols = 64, 512
	r := rand.New(rand.NewPCG(11, 12))
	w := heavy(r, rows*cols)
	imp := skewedImportance(r, cols)
	for _, tc := range []struct {
		f    Format
		gain float64 // least relative drop of the weighted error
	}{{Q8, 0.05}, {Q4, 0.2}, {Q2, 0.2}, {Q1, 0.1}} {
		plain, err := Quantize(ctx, tc.f, w, rows, cols, Options{Search: true})
		if err != nil {
			t.Fatal(err)
		}
		weighted, err := Quantize(ctx, tc.f, w, rows, cols, Options{Search: true, Importance: imp})
		if err != nil {
			t.Fatal(err)
		}
		ep := weightedErr(w, plain.Dequantize(), imp, cols)
		ew := weightedErr(w, weighted.Dequantize(), imp, cols)
		t.Logf("%s: weighted error %.4g unweighted search, %.4g weighted (%.1f%% lower)", tc.f, ep, ew, 100*(1-ew/ep))
		if !(ew <= ep*(1-tc.gain)) {
			t.Errorf("%s: weighted error %.4g with importance, %.4g without: less than %.0f%% lower", tc.f, ew, ep, 100*tc.gain)
		}
		// What the format stores is unchanged: the same layout, only scales differ.
		if len(weighted.Data) != len(plain.Data) || len(weighted.Scales) != len(plain.Scales) || len(weighted.Mins) != len(plain.Mins) {
			t.Errorf("%s: importance changed the tensor's layout", tc.f)
		}
	}
}

// TestImportanceNeverWorseThanMinMax: min/max is among the weighted
// search's candidates, so no group's weighted error is above it.
func TestImportanceNeverWorseThanMinMax(t *testing.T) {
	const rows, cols = 100, 128
	r := rand.New(rand.NewPCG(13, 14))
	w := heavy(r, rows*cols)
	imp := skewedImportance(r, cols)
	imp[3], imp[40] = 0, 0 // dead columns weigh nothing
	for _, f := range []Format{Q8, Q4, Q2} {
		plain, _ := Quantize(ctx, f, w, rows, cols, Options{})
		srch, err := Quantize(ctx, f, w, rows, cols, Options{Search: true, Importance: imp})
		if err != nil {
			t.Fatal(err)
		}
		pd, sd := plain.Dequantize(), srch.Dequantize()
		for g := 0; g < len(w)/32; g++ {
			var ep, es float64
			for i := g * 32; i < (g+1)*32; i++ {
				a := float64(imp[i%cols])
				ep += a * sq(pd[i]-w[i])
				es += a * sq(sd[i]-w[i])
			}
			if es > ep*(1+1e-6)+1e-12 {
				t.Fatalf("%s group %d: weighted search error %g > min/max error %g", f, g, es, ep)
			}
		}
	}
}

// TestUniformImportance: equal weights search what the unweighted search
// does, then refit: the error is never above the unweighted search's, and
// close to it.
func TestUniformImportance(t *testing.T) {
	const rows, cols = 64, 256
	r := rand.New(rand.NewPCG(15, 16))
	w := heavy(r, rows*cols)
	ones := make([]float32, cols)
	for i := range ones {
		ones[i] = 1
	}
	for _, f := range []Format{Q8, Q4, Q2, Q1} {
		plain, _ := Quantize(ctx, f, w, rows, cols, Options{Search: true})
		uni, err := Quantize(ctx, f, w, rows, cols, Options{Search: true, Importance: ones})
		if err != nil {
			t.Fatal(err)
		}
		if uni.SqErr > plain.SqErr*(1+1e-6) || uni.SqErr < 0.9*plain.SqErr {
			t.Errorf("%s: uniform importance error %.6g, none %.6g", f, uni.SqErr, plain.SqErr)
		}
	}
}

// TestQ1WeightedScale: q1's scale is the importance-weighted mean |w| of
// its group, the weighted least-squares scale for sign codes.
func TestQ1WeightedScale(t *testing.T) {
	w := make([]float32, 32)
	imp := make([]float32, 32)
	for i := range w {
		w[i] = float32(i%5) - 2.5
		imp[i] = 1
	}
	imp[0], w[0] = 9, 4 // one heavy column pulls the scale toward its |w|
	q, err := Quantize(ctx, Q1, w, 1, 32, Options{Search: true, Importance: imp})
	if err != nil {
		t.Fatal(err)
	}
	var sa, sw float64
	for i, v := range w {
		sa += float64(imp[i]) * math.Abs(float64(v))
		sw += float64(imp[i])
	}
	want := sa / sw
	if got := float64(q.Scales[0].Float32()); math.Abs(got-want) > 2e-3*want {
		t.Errorf("q1 scale %v, want the weighted mean |w| %v", got, want)
	}
}
