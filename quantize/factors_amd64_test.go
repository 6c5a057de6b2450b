package quantize

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestFactoredCodesSIMD holds the assembly rounding and projections to
// the plain-Go loop, for full blocks, wider groups and short last blocks.
func TestFactoredCodesSIMD(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 and FMA here: the plain-Go loop is the only one")
	}
	r := rand.New(rand.NewPCG(27, 28))
	for _, n := range []int{32, 64, 20, 3, 44} {
		w := heavy(r, n)
		imp, fac := blockCorrelated(r, n)
		ones := make([]float32, factorBlocks(n)*FactorRank)
		for i := range ones {
			for _, u := range fac[i*block : (i+1)*block] {
				ones[i] += u
			}
		}
		lr := newLowRank(64)
		haveAVX2 = false
		lr.set(fac, ones, w)
		goDots := append([]float32(nil), lr.weights...)
		haveAVX2 = true
		lr.set(fac, ones, w)
		for j, v := range goDots {
			if math.Abs(float64(v-lr.weights[j])) > 1e-4*(1+math.Abs(float64(v))) {
				t.Errorf("n %d: u·w %d is %v, Go %v", n, j, lr.weights[j], v)
			}
		}
		d, m := float32(0.2), float32(-1.5)
		fast, slow := make([]int32, 96), make([]int32, 96)
		got := lr.codes(w, imp, d, m, 15, fast, 0, 0, 0)
		gotProj := append([]float32(nil), lr.proj...)
		haveAVX2 = false
		want := lr.codes(w, imp, d, m, 15, slow, 0, 0, 0)
		haveAVX2 = true
		if string(fmt.Sprint(fast[:n])) != string(fmt.Sprint(slow[:n])) {
			t.Fatalf("n %d: codes %v, Go %v", n, fast[:n], slow[:n])
		}
		for j := range gotProj {
			if math.Abs(float64(gotProj[j]-lr.proj[j])) > 1e-4*(1+math.Abs(float64(lr.proj[j]))) {
				t.Errorf("n %d: projection %d %v, Go %v", n, j, gotProj[j], lr.proj[j])
			}
		}
		for _, v := range [][2]float64{{got.sq, want.sq}, {got.sqq, want.sqq}, {got.sqw, want.sqw}} {
			if math.Abs(v[0]-v[1]) > 1e-4*(1+math.Abs(v[1])) {
				t.Errorf("n %d: sums %+v, Go %+v", n, got, want)
			}
		}
	}
}
