package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSIMDKernelsMatchGo checks the assembly dot products against their
// plain-Go references on random codes, scales and activations, for every
// group size and lengths with tails.
func TestSIMDKernelsMatchGo(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 and FMA on this machine: the plain-Go kernels run")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lut, nib := new([256]float32), new([256][2]float32)
	for i := range lut {
		lut[i] = float32(int8(i))
		nib[i] = [2]float32{float32(i & 15), float32(i >> 4)}
	}
	close := func(got, want float32, scale float64) bool {
		return math.Abs(float64(got-want)) <= 1e-5*scale+1e-6
	}
	for _, c := range []struct{ cols, group int }{{32, 32}, {64, 32}, {2048, 32}, {5632, 32}, {128, 64}, {2048, 128}, {96, 32}} {
		ng := c.cols / c.group
		data := make([]byte, c.cols)
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		x, scales, mins, xsum := make([]float32, c.cols), make([]float32, ng), make([]float32, ng), make([]float32, ng)
		var mag float64
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if i%97 == 0 {
				x[i] *= 40 // outliers
			}
			mag += math.Abs(float64(x[i])) * 128
		}
		for g := range scales {
			scales[g], mins[g] = float32(rng.Float64()), -float32(rng.Float64())
			for _, v := range x[g*c.group : (g+1)*c.group] {
				xsum[g] += v
			}
		}
		if got, want := dotQ4Rows(data[:c.cols/2], scales, mins, x, xsum, c.group), dotQ4RowsGo(data[:c.cols/2], scales, mins, x, xsum, c.group); !close(got, want, mag) {
			t.Errorf("q4 %d cols group %d: asm %g, Go %g", c.cols, c.group, got, want)
		}
		if got, want := dotQ8Rows(data, scales, x, c.group, lut), dotQ8RowsGo(data, scales, x, c.group, lut); !close(got, want, mag) {
			t.Errorf("q8 %d cols group %d: asm %g, Go %g", c.cols, c.group, got, want)
		}
	}
	for _, n := range []int{1, 31, 32, 33, 64, 100, 2048, 2049} {
		a, b := make([]float32, n), make([]float32, n)
		var mag float64
		for i := range a {
			a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			mag += math.Abs(float64(a[i] * b[i]))
		}
		if got, want := dot(a, b), dotGo(a, b); !close(got, want, mag) {
			t.Errorf("dot of %d: asm %g, Go %g", n, got, want)
		}
	}
}
