package quantize

import "fmt"

// FactorRank is how many directions of each 32-column block's input
// correlation the calibration keeps for Options.Factors: the few that carry
// most of its off-diagonal part, at a search cost of one short dot product
// each per candidate.
const FactorRank = 4

// factorBlocks is the number of 32-column blocks of a row of cols.
func factorBlocks(cols int) int { return (cols + block - 1) / block }

// setResidual checks o.Factors against cols and sets o.residual and
// o.factorOnes.
func (o *Options) setResidual(cols int) error {
	if o.Importance == nil {
		return fmt.Errorf("correlation factors without importance weights")
	}
	nb := factorBlocks(cols)
	if len(o.Factors) != nb*FactorRank*block {
		return fmt.Errorf("%d correlation factor values for %d columns, want %d (%d blocks of %d rows of %d)",
			len(o.Factors), cols, nb*FactorRank*block, nb, FactorRank, block)
	}
	res := make([]float32, cols)
	for c := range res {
		b, i := c/block, c%block
		f := o.Factors[b*FactorRank*block:]
		v := o.Importance[c]
		for j := 0; j < FactorRank; j++ {
			u := f[j*block+i]
			v -= u * u
		}
		res[c] = max(v, 0) // the factors come from the same matrix; rounding can overshoot
	}
	ones := make([]float32, nb*FactorRank)
	for r := range ones {
		for _, u := range o.Factors[r*block : (r+1)*block] {
			ones[r] += u
		}
	}
	o.residual, o.factorOnes = res, ones
	return nil
}

// lowRank holds a group's correlation factors (Options.Factors: FactorRank
// rows of 32 per block) and their products with ones and with the group's
// weights, so that each candidate's codes cost FactorRank more dot
// products a block, in the pass that rounds them: the error d*q + m - w
// projects on a factor u as d*(u·q) + m*(u·1) - u·w, and its square adds
// to the sums as one more weighted term.
type lowRank struct {
	u       []float32
	blocks  int
	ones    []float32 // u·1 per factor row
	weights []float32 // u·w per factor row
	proj    []float32 // u·q per factor row, scratch
	// best holds the codes chooseAsym chose, when kept.
	best []int32
	kept bool
}

// newLowRank makes the scratch for groups of up to size weights.
func newLowRank(size int) *lowRank {
	n := factorBlocks(size) * FactorRank
	return &lowRank{weights: make([]float32, n), proj: make([]float32, n), best: make([]int32, size)}
}

// set points lr at the factors f and their sums ones of group w, both
// starting at the group's first block.
func (lr *lowRank) set(f, ones, w []float32) {
	lr.blocks = factorBlocks(len(w))
	k := lr.blocks * FactorRank
	lr.u, lr.ones = f[:k*block], ones[:k]
	if haveAVX2 && len(w) == block {
		factorDotsAVX2(&lr.u[0], &w[0], &lr.weights[0])
		return
	}
	for r := range k {
		lo := r / FactorRank * block
		x := w[lo:min(lo+block, len(w))]
		u := lr.u[r*block : r*block+len(x)]
		var s float32
		for i, v := range x {
			s += u[i] * v
		}
		lr.weights[r] = s
	}
}

// addPlain adds the factors' code-independent terms to n, sw and sww.
func (lr *lowRank) addPlain(n, sw, sww float64) (float64, float64, float64) {
	for r := range lr.blocks * FactorRank {
		o, x := float64(lr.ones[r]), float64(lr.weights[r])
		n += o * o
		sw += o * x
		sww += x * x
	}
	return n, sw, sww
}

// codes is weightedCodes with the factors' terms: it rounds w at (d, m)
// and returns the sums weighted by imp (the residual diagonal) plus the
// projections'; n, sw and sww include addPlain's terms.
func (lr *lowRank) codes(w, imp []float32, d, m float32, levels int32, codes []int32, n, sw, sww float64) asymSums {
	s := asymSums{n: n, sw: sw, sww: sww}
	if d == 0 {
		clear(codes[:len(w)])
		return s // every u·q is 0
	}
	inv, top := 1/d, float32(levels)
	if haveAVX2 && len(w) == block {
		// One full block, the usual group: the same sums without the loops.
		sq, sqq, sqw := asymCodesFactoredAVX2(&w[0], &imp[0], &lr.u[0], block, m, inv, top, &codes[0], &lr.proj[0])
		p, o, x := (*[FactorRank]float32)(lr.proj), (*[FactorRank]float32)(lr.ones), (*[FactorRank]float32)(lr.weights)
		p0, p1, p2, p3 := float64(p[0]), float64(p[1]), float64(p[2]), float64(p[3])
		s.sq = float64(sq) + p0*float64(o[0]) + p1*float64(o[1]) + p2*float64(o[2]) + p3*float64(o[3])
		s.sqq = float64(sqq) + p0*p0 + p1*p1 + p2*p2 + p3*p3
		s.sqw = float64(sqw) + p0*float64(x[0]) + p1*float64(x[1]) + p2*float64(x[2]) + p3*float64(x[3])
		return s
	}
	var sq, sqq, sqw float32
	for b := range lr.blocks {
		lo, hi := b*block, min((b+1)*block, len(w))
		p := lr.proj[b*FactorRank : (b+1)*FactorRank]
		u := lr.u[b*FactorRank*block : (b+1)*FactorRank*block]
		i := lo
		if k := (hi - lo) &^ 7; haveAVX2 && k > 0 {
			a, aq, aw := asymCodesFactoredAVX2(&w[lo], &imp[lo], &u[0], k, m, inv, top, &codes[lo], &p[0])
			sq, sqq, sqw = sq+a, sqq+aq, sqw+aw
			i += k
		} else {
			clear(p)
		}
		for ; i < hi; i++ {
			x := min(max((w[i]-m)*inv, 0), top)
			q := int32(x + 0.5) // x >= 0: rounds half up
			codes[i] = q
			fq := float32(q)
			a := imp[i] * fq
			sq += a
			sqq += a * fq
			sqw += a * w[i]
			for j := range p {
				p[j] += u[j*block+i-lo] * fq
			}
		}
	}
	s.sq, s.sqq, s.sqw = float64(sq), float64(sqq), float64(sqw)
	for r, p := range lr.proj[:lr.blocks*FactorRank] {
		q := float64(p)
		s.sq += q * float64(lr.ones[r])
		s.sqq += q * q
		s.sqw += q * float64(lr.weights[r])
	}
	return s
}
