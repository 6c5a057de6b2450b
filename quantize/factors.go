package quantize

import "fmt"

// FactorRank is how many directions of each 32-column block's input
// correlation the calibration keeps for Options.Factors: the few that carry
// most of its off-diagonal part, at a search cost of one short dot product
// each per candidate.
const FactorRank = 4

// factorBlocks is the number of 32-column blocks of a row of cols.
func factorBlocks(cols int) int { return (cols + block - 1) / block }

// setResidual checks o.Factors against cols and sets o.residual.
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
	o.residual = res
	return nil
}

// project sets out[j] to the dot product of factor row j of one block (rank
// rows of 32) with the block's 32 codes.
func project(u []float32, codes []int32, out []float32) {
	if haveAVX2 {
		projectAVX2(&u[0], len(out), &codes[0], &out[0])
		return
	}
	for j := range out {
		r := u[j*block : (j+1)*block]
		var s float32
		for i, q := range codes[:block] {
			s += r[i] * float32(q)
		}
		out[j] = s
	}
}
