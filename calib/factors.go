package calib

import (
	"math"

	"lowbit/quantize"
)

// factorBlock is the width of the column blocks whose correlation the
// factors describe (quantize.Options.Factors).
const factorBlock = 32

// factorBlocks is the number of blocks of a row of cols.
func factorBlocks(cols int) int { return (cols + factorBlock - 1) / factorBlock }

// subspaceIterations bounds the power iterations per block: the factors
// need the dominant directions only roughly (the diagonal stays exact), and
// the dominant ones, well apart from the rest in activations, come first.
const subspaceIterations = 24

// factors turns blocks (sums of x xᵀ over rows inputs, lower triangles)
// into quantize.Options.Factors: per block, the factors u whose Σ u uᵀ is
// the block's mean correlation projected on its quantize.FactorRank
// dominant directions (found by subspace iteration), so that they carry
// the off-diagonal structure the diagonal misses.
func factors(blocks []float64, cols, rows int) []float32 {
	const n, k = factorBlock, quantize.FactorRank
	nb := factorBlocks(cols)
	out := make([]float32, nb*k*n)
	h := make([]float64, n*n)
	v, hv := make([]float64, n*k), make([]float64, n*k)
	for b := 0; b < nb; b++ {
		src := blocks[b*n*n : (b+1)*n*n]
		for i := 0; i < n; i++ {
			for j := 0; j <= i; j++ {
				x := src[i*n+j] / float64(rows)
				h[i*n+j], h[j*n+i] = x, x
			}
		}
		blockFactors(h, v, hv, out[b*k*n:(b+1)*k*n])
	}
	return out
}

// blockFactors writes into u (k rows of n) factors of the n×n symmetric
// positive semi-definite h: V spans h's dominant k-dimensional subspace
// (V orthonormal, n×k in v), M = Vᵀ h V = L Lᵀ, and u's rows are the
// columns of V L, so that Σ u uᵀ = V M Vᵀ. v and hv are scratch of n×k.
func blockFactors(h, v, hv []float64, u []float32) {
	const n, k = factorBlock, quantize.FactorRank
	clear(u)
	// Start from the columns of h at its k largest diagonal entries: the
	// directions of the strongest inputs.
	var picked [k]int
	for j := range picked {
		best := -1
		for i := 0; i < n; i++ {
			taken := false
			for _, p := range picked[:j] {
				taken = taken || p == i
			}
			if !taken && (best < 0 || h[i*n+i] > h[best*n+best]) {
				best = i
			}
		}
		picked[j] = best
	}
	for i := 0; i < n; i++ {
		for j, p := range picked {
			v[i*k+j] = h[i*n+p]
		}
	}
	if !orthonormalize(v, n, k) {
		return // h is zero
	}
	for it := 0; it < subspaceIterations; it++ {
		mulSym(h, v, hv, n, k)
		copy(v, hv)
		if !orthonormalize(v, n, k) {
			return
		}
	}
	// M = Vᵀ h V, then its Cholesky factor L (lower), dropping directions
	// with no weight.
	mulSym(h, v, hv, n, k)
	var m, l [k * k]float64
	for a := 0; a < k; a++ {
		for c := 0; c < k; c++ {
			var s float64
			for i := 0; i < n; i++ {
				s += v[i*k+a] * hv[i*k+c]
			}
			m[a*k+c] = s
		}
	}
	for c := 0; c < k; c++ {
		d := m[c*k+c]
		for j := 0; j < c; j++ {
			d -= l[c*k+j] * l[c*k+j]
		}
		if !(d > 1e-12*m[0]) {
			continue // column c of L stays zero
		}
		l[c*k+c] = math.Sqrt(d)
		for a := c + 1; a < k; a++ {
			s := m[a*k+c]
			for j := 0; j < c; j++ {
				s -= l[a*k+j] * l[c*k+j]
			}
			l[a*k+c] = s / l[c*k+c]
		}
	}
	for j := 0; j < k; j++ {
		for i := 0; i < n; i++ {
			var s float64
			for a := j; a < k; a++ {
				s += v[i*k+a] * l[a*k+j]
			}
			u[j*n+i] = float32(s)
		}
	}
}

// mulSym sets out (n×k) to h v for the n×n h.
func mulSym(h, v, out []float64, n, k int) {
	clear(out[:n*k])
	for i := 0; i < n; i++ {
		o := out[i*k : (i+1)*k]
		for c := 0; c < n; c++ {
			x := h[i*n+c]
			if x == 0 {
				continue
			}
			vr := v[c*k : (c+1)*k]
			for j := range o {
				o[j] += x * vr[j]
			}
		}
	}
}

// orthonormalize makes the k columns of v (n×k) orthonormal by modified
// Gram-Schmidt, zeroing a column left without length; false when the first
// is zero (v spans nothing).
func orthonormalize(v []float64, n, k int) bool {
	var first float64
	for j := 0; j < k; j++ {
		for p := 0; p < j; p++ {
			var d float64
			for i := 0; i < n; i++ {
				d += v[i*k+j] * v[i*k+p]
			}
			for i := 0; i < n; i++ {
				v[i*k+j] -= d * v[i*k+p]
			}
		}
		var s float64
		for i := 0; i < n; i++ {
			s += v[i*k+j] * v[i*k+j]
		}
		if j == 0 {
			first = s
		}
		if !(s > 1e-24*first) || s == 0 {
			for i := 0; i < n; i++ {
				v[i*k+j] = 0
			}
			continue
		}
		inv := 1 / math.Sqrt(s)
		for i := 0; i < n; i++ {
			v[i*k+j] *= inv
		}
	}
	return first > 0
}
