package quantize

import (
	"lowbit/half"
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

// TestBlockDotsSIMD holds the K formats' assembly products to their
// plain-Go loops on random blocks (every code and sub-block scale), up to
// float32 rounding: the assembly adds in another order.
func TestBlockDotsSIMD(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 and FMA here: the plain-Go loops are the only ones")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		f     Format
		goDot func(*Tensor, int, []float32) float32
	}{{Q2K, dotQ2KGo}, {Q3K, dotQ3KGo}, {Q4K, dotQ4KGo}, {Q5K, dotQ5KGo}, {Q6K, dotQ6KGo}} {
		s := tc.f.spec()
		for _, nb := range []int{1, 3, kChunk, kChunk + 1, 2*kChunk + 5} {
			q := &Tensor{Format: tc.f, Rows: 2, Cols: nb * 256, GroupSize: 256, Data: make([]byte, 2*nb*s.BlockBytes)}
			for i := range q.Data {
				q.Data[i] = byte(rng.IntN(256))
			}
			for b := 0; b < 2*nb; b++ {
				for _, off := range s.halves {
					putF16(q.Data[b*s.BlockBytes+off:], half.FromFloat32(float32(rng.NormFloat64())))
				}
			}
			x := make([]float32, q.Cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			deq := q.Dequantize()
			for row := range 2 {
				var mag float64 // Σ|w·x|: the scale of float32 rounding
				for c, v := range x {
					mag += math.Abs(float64(deq[row*q.Cols+c]) * float64(v))
				}
				got, want := q.Dot(row, x), tc.goDot(q, row, x)
				if math.Abs(float64(got-want)) > 1e-5*mag {
					t.Errorf("%s, %d super-blocks, row %d: assembly %v, Go %v", tc.f, nb, row, got, want)
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
