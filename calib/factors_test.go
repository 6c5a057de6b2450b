package calib

import (
	"math"
	"math/rand/v2"
	"testing"

	"lowbit/quantize"
)

// checkFactors holds name's correlation factors to its Hessian h
// ([cols, cols]): one block of quantize.FactorRank rows of 32 per 32
// columns, zero past the last column, finite; within each block Σ u uᵀ
// puts no more on a diagonal entry than h has there, and leaves less of
// the off-diagonal part than h has (it carries some of it).
func checkFactors(t *testing.T, name string, f, h []float32, cols int) {
	t.Helper()
	const n, k = factorBlock, quantize.FactorRank
	nb := factorBlocks(cols)
	if len(f) != nb*k*n {
		t.Fatalf("%s: %d factor values for %d columns, want %d", name, len(f), cols, nb*k*n)
	}
	var offH, offRes float64
	for b := 0; b < nb; b++ {
		u := f[b*k*n : (b+1)*k*n]
		for i := 0; i < n; i++ {
			c := b*n + i
			for j := 0; j < k; j++ {
				if v := u[j*n+i]; math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || c >= cols && v != 0 {
					t.Fatalf("%s block %d: factor %d column %d is %v", name, b, j, i, v)
				}
			}
			if c >= cols {
				continue
			}
			for i2 := 0; i2 <= i && b*n+i2 < cols; i2++ {
				var uu float64
				for j := 0; j < k; j++ {
					uu += float64(u[j*n+i]) * float64(u[j*n+i2])
				}
				hv := float64(h[c*cols+b*n+i2])
				if i2 == i {
					if uu > hv*(1+1e-3)+1e-9 {
						t.Fatalf("%s column %d: the factors put %v on the diagonal, the Hessian has %v", name, c, uu, hv)
					}
					continue
				}
				offH += hv * hv
				offRes += (hv - uu) * (hv - uu)
			}
		}
	}
	if offH > 0 && !(offRes < offH) {
		t.Fatalf("%s: off-diagonal correlation %g left %g by the factors", name, offH, offRes)
	}
}

// TestBlockFactorsExact: a block correlation of rank FactorRank or less is
// reproduced exactly by its factors; a zero block gives zero factors.
func TestBlockFactorsExact(t *testing.T) {
	const n, k = factorBlock, quantize.FactorRank
	r := rand.New(rand.NewPCG(31, 32))
	for _, rank := range []int{0, 1, 2, k} {
		// h = Σ a aᵀ over rank random vectors, as blocks of sums over rows
		// (lower triangles, rows=1).
		var a [k][n]float64
		for j := 0; j < rank; j++ {
			for i := range a[j] {
				a[j][i] = r.NormFloat64() * float64(j+1)
			}
		}
		blocks := make([]float64, n*n)
		for i := 0; i < n; i++ {
			for i2 := 0; i2 <= i; i2++ {
				for j := 0; j < rank; j++ {
					blocks[i*n+i2] += a[j][i] * a[j][i2]
				}
			}
		}
		u := factors(blocks, n, 1)
		var scale float64
		for i := 0; i < n; i++ {
			scale = max(scale, blocks[i*n+i])
		}
		for i := 0; i < n; i++ {
			for i2 := 0; i2 <= i; i2++ {
				var uu float64
				for j := 0; j < k; j++ {
					uu += float64(u[j*n+i]) * float64(u[j*n+i2])
				}
				if math.Abs(uu-blocks[i*n+i2]) > 1e-4*scale+1e-12 {
					t.Fatalf("rank %d: (%d, %d) is %v from the factors, %v in the block", rank, i, i2, uu, blocks[i*n+i2])
				}
			}
		}
	}
}

// TestAddBlocks: the block sums are the lower triangles of x xᵀ within
// each 32 columns, a short last block included.
func TestAddBlocks(t *testing.T) {
	const n = factorBlock
	r := rand.New(rand.NewPCG(33, 34))
	const cols = 70
	blocks := make([]float64, factorBlocks(cols)*n*n)
	rows := make([][]float32, 3)
	for i := range rows {
		rows[i] = make([]float32, cols)
		for c := range rows[i] {
			rows[i][c] = float32(r.NormFloat64())
		}
		rows[i][5] = 0
		addBlocks(blocks, rows[i])
	}
	for c := 0; c < cols; c++ {
		for c2 := c - c%n; c2 <= c; c2++ {
			var want float64
			for _, x := range rows {
				want += float64(x[c]) * float64(x[c2])
			}
			b, i, j := c/n, c%n, c2%n
			if got := blocks[b*n*n+i*n+j]; math.Abs(got-want) > 1e-9*(1+math.Abs(want)) {
				t.Fatalf("(%d, %d): %v, want %v", c, c2, got, want)
			}
		}
	}
}
