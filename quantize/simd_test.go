package quantize

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAsymCodesSIMD holds the assembly code search to the plain-Go loop:
// the same codes and integer sums, and Σq·w equal up to float32 rounding
// (the assembly adds in another order).
func TestAsymCodesSIMD(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 and FMA here: the plain-Go loop is the only one")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{8, 32, 37, 64, 128, 3} {
		for trial := 0; trial < 200; trial++ {
			w := make([]float32, n)
			for i := range w {
				w[i] = float32(rng.NormFloat64() * (1 + 10*float64(rng.IntN(50)/49)))
			}
			lo, hi := slices.Min(w), slices.Max(w)
			for _, levels := range []int32{3, 15} {
				shrink := float32(rng.Float64() * 0.2)
				m := lo + shrink*(hi-lo)
				d := (hi - shrink*(hi-lo) - m) / float32(levels)
				sw, sww := plainSums(w)
				fast := make([]int32, n)
				got := asymCodes(w, d, m, levels, fast, sw, sww)
				haveAVX2 = false
				slow := make([]int32, n)
				want := asymCodes(w, d, m, levels, slow, sw, sww)
				haveAVX2 = true
				var mag float64 // Σ|q·w|: the scale of float32 rounding in Σq·w
				for i, q := range slow {
					mag += math.Abs(float64(q) * float64(w[i]))
				}
				if !slices.Equal(fast, slow) || got.sq != want.sq || got.sqq != want.sqq ||
					math.Abs(got.sqw-want.sqw) > 1e-6*mag+1e-9 {
					t.Fatalf("n %d levels %d: codes %v sums %+v; Go %v %+v", n, levels, fast, got, slow, want)
				}
			}
		}
	}
}

// TestWeightedCodesSIMD holds the weighted code search's assembly to its
// plain-Go loop: the same codes, and sums equal up to float32 rounding.
func TestWeightedCodesSIMD(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 and FMA here: the plain-Go loop is the only one")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{8, 32, 37, 64, 128, 3} {
		for trial := 0; trial < 200; trial++ {
			w, imp := make([]float32, n), make([]float32, n)
			for i := range w {
				w[i] = float32(rng.NormFloat64() * (1 + 10*float64(rng.IntN(50)/49)))
				imp[i] = float32(math.Exp(rng.NormFloat64()))
			}
			lo, hi := slices.Min(w), slices.Max(w)
			for _, levels := range []int32{3, 15} {
				shrink := float32(rng.Float64() * 0.2)
				m := lo + shrink*(hi-lo)
				d := (hi - shrink*(hi-lo) - m) / float32(levels)
				n0, sw, sww := weightedPlainSums(w, imp)
				fast := make([]int32, n)
				got := weightedCodes(w, imp, d, m, levels, fast, n0, sw, sww)
				haveAVX2 = false
				slow := make([]int32, n)
				want := weightedCodes(w, imp, d, m, levels, slow, n0, sw, sww)
				haveAVX2 = true
				var mag float64 // Σ|imp·q²| + Σ|imp·q·w|: the scale of float32 rounding
				for i, q := range slow {
					mag += float64(imp[i]) * float64(q) * (float64(q) + math.Abs(float64(w[i])))
				}
				if !slices.Equal(fast, slow) || math.Abs(got.sq-want.sq) > 1e-6*mag+1e-9 ||
					math.Abs(got.sqq-want.sqq) > 1e-6*mag+1e-9 || math.Abs(got.sqw-want.sqw) > 1e-6*mag+1e-9 {
					t.Fatalf("n %d levels %d: codes %v sums %+v; Go %v %+v", n, levels, fast, got, slow, want)
				}
			}
		}
	}
}
