package quantize

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// blockCorrelated makes per-column importance and block factors as calibration
// gives them: each 32-column block's correlation is a diagonal plus a few
// strong shared directions (a common mean, outlier features), so the
// diagonal is Importance and the factors carry the rest.
func blockCorrelated(r *rand.Rand, cols int) (imp, fac []float32) {
	nb := factorBlocks(cols)
	imp = make([]float32, cols)
	fac = make([]float32, nb*FactorRank*block)
	for c := range imp {
		imp[c] = float32(0.2 + r.Float64())
	}
	for b := 0; b < nb; b++ {
		for j := 0; j < FactorRank; j++ {
			scale := 2 / float64(j+1)
			for i := 0; i < block && b*block+i < cols; i++ {
				c := b*block + i
				u := float32(scale * (0.5 + r.NormFloat64()))
				fac[(b*FactorRank+j)*block+i] = u
				imp[c] += u * u
			}
		}
	}
	return imp, fac
}

// quadErr is Σ over rows and blocks of eᵀ H e for e = dq - w, with each
// block's H = diag(imp - Σu²) + Σ u uᵀ: the error the factored search
// minimizes.
func quadErr(w, dq, imp, fac []float32, cols int) float64 {
	var total float64
	for r := 0; r < len(w)/cols; r++ {
		e := make([]float64, cols)
		for c := range e {
			e[c] = float64(dq[r*cols+c]) - float64(w[r*cols+c])
		}
		for c := range e {
			b, i := c/block, c%block
			d := float64(imp[c])
			for j := 0; j < FactorRank; j++ {
				u := float64(fac[(b*FactorRank+j)*block+i])
				d -= u * u
			}
			total += d * e[c] * e[c]
		}
		for b := 0; b < factorBlocks(cols); b++ {
			for j := 0; j < FactorRank; j++ {
				var p float64
				for i := 0; i < block && b*block+i < cols; i++ {
					p += float64(fac[(b*FactorRank+j)*block+i]) * e[b*block+i]
				}
				total += p * p
			}
		}
	}
	return total
}

// TestFactorsLowerCorrelatedError: with the factors, q4's and q2's search
// finds a lower correlated error than with their diagonal alone, by a
// margin that shows they are used, for full groups, wider groups and a
// row whose last group is short; and the layout is unchanged.
func TestFactorsLowerCorrelatedError(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, tc := range []struct {
		f     Format
		cols  int
		group int
		gain  float64
	}{{Q4, 256, 32, 0.1}, {Q4, 256, 64, 0.1}, {Q4, 172, 32, 0.1}, {Q2, 256, 32, 0.05}} {
		const rows = 48
		w := heavy(r, rows*tc.cols)
		imp, fac := blockCorrelated(r, tc.cols)
		diag, err := Quantize(ctx, tc.f, w, rows, tc.cols, Options{GroupSize: tc.group, Search: true, Importance: imp})
		if err != nil {
			t.Fatal(err)
		}
		full, err := Quantize(ctx, tc.f, w, rows, tc.cols, Options{GroupSize: tc.group, Search: true, Importance: imp, Factors: fac})
		if err != nil {
			t.Fatal(err)
		}
		ed := quadErr(w, diag.Dequantize(), imp, fac, tc.cols)
		ef := quadErr(w, full.Dequantize(), imp, fac, tc.cols)
		t.Logf("%s cols %d group %d: correlated error %.4g diagonal search, %.4g factored (%.1f%% lower)", tc.f, tc.cols, tc.group, ed, ef, 100*(1-ef/ed))
		if !(ef <= ed*(1-tc.gain)) {
			t.Errorf("%s cols %d group %d: correlated error %.4g with factors, %.4g without: less than %.0f%% lower", tc.f, tc.cols, tc.group, ef, ed, 100*tc.gain)
		}
		if len(full.Data) != len(diag.Data) || len(full.Scales) != len(diag.Scales) || len(full.Mins) != len(diag.Mins) {
			t.Errorf("%s: factors changed the tensor's layout", tc.f)
		}
		// SqErr is what the stored codes dequantize to.
		var sq float64
		for i, v := range full.Dequantize() {
			sq += sq64(v - w[i])
		}
		if math.Abs(sq-full.SqErr) > 1e-4*sq {
			t.Errorf("%s: SqErr %g, the stored weights' %g", tc.f, full.SqErr, sq)
		}
	}
}

func sq64(x float32) float64 { return float64(x) * float64(x) }

// TestFactorsNeverWorseThanMinMax: min/max stays a candidate, scored with
// the codes it stores, so no group's correlated error is above it.
func TestFactorsNeverWorseThanMinMax(t *testing.T) {
	const rows, cols = 40, 96
	r := rand.New(rand.NewPCG(23, 24))
	w := heavy(r, rows*cols)
	imp, fac := blockCorrelated(r, cols)
	for _, f := range []Format{Q4, Q2} {
		plain, _ := Quantize(ctx, f, w, rows, cols, Options{})
		srch, err := Quantize(ctx, f, w, rows, cols, Options{Search: true, Importance: imp, Factors: fac})
		if err != nil {
			t.Fatal(err)
		}
		pd, sd := plain.Dequantize(), srch.Dequantize()
		for row := 0; row < rows; row++ {
			for g := 0; g < cols/block; g++ {
				// One group alone: zero the rest of a copy of the row.
				one := func(dq []float32) float64 {
					wr := make([]float32, cols)
					dr := make([]float32, cols)
					copy(wr[g*block:(g+1)*block], w[row*cols+g*block:])
					copy(dr[g*block:(g+1)*block], dq[row*cols+g*block:])
					return quadErr(wr, dr, imp, fac, cols)
				}
				if es, ep := one(sd), one(pd); es > ep*(1+1e-5)+1e-9 {
					t.Fatalf("%s row %d group %d: factored search error %g > min/max error %g", f, row, g, es, ep)
				}
			}
		}
	}
}

// TestFactorsChecked: factors of the wrong length, or without importance,
// are refused with what was expected; formats without the factored search
// and error compensation accept them and ignore them.
func TestFactorsChecked(t *testing.T) {
	const rows, cols = 4, 64
	r := rand.New(rand.NewPCG(25, 26))
	w := heavy(r, rows*cols)
	imp, fac := blockCorrelated(r, cols)
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"short", Options{Search: true, Importance: imp, Factors: fac[:len(fac)-1]}, "want 256"},
		{"no importance", Options{Search: true, Factors: fac}, "without importance"},
	} {
		_, err := Quantize(ctx, Q4, w, rows, cols, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	for _, f := range []Format{Q8, Q1, Q4S} {
		a, err := Quantize(ctx, f, w, rows, cols, Options{Search: true, Importance: imp, Factors: fac})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b, _ := Quantize(ctx, f, w, rows, cols, Options{Search: true, Importance: imp})
		if string(a.Data) != string(b.Data) {
			t.Errorf("%s: the factors changed a format that does not use them", f)
		}
	}
}
