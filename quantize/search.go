package quantize

import (
	"lowbit/half"
)

// The asymmetric formats (q4, q2) store w ≈ d*q + m with q in [0, L]. Plain
// min/max sets m = min and d = (max-min)/L. The search, after llama.cpp's
// make_qkx2_quants, also tries ranges shrunk at either end (clipping the
// outliers that would otherwise waste levels); for each candidate it takes
// the codes, refits (d, m) by least squares for those codes, rounds both to
// fp16 as they will be stored, and scores the squared error in closed form
// from the sums it already has. The best candidate wins; min/max is always
// among the candidates, so the search is never worse than it.
//
// With importance weights (Options.Importance, one per column) every sum is
// weighted: the error scored is sum imp_i*(d*q_i + m - w_i)^2, the refit is
// the weighted least squares for the codes, and the codes (nearest level,
// whatever the weight) come from the same loop as without. With
// correlation factors (Options.Factors) the error is eᵀHe for each 32-wide
// block's H = diag + Σ u uᵀ: each u adds (u·e)² to the sums, still a
// quadratic in (d, m), so the same fit and score apply; nearest codes are
// then no longer the best for the stored pair, so the codes scored are the
// codes stored.

// asymSums are the sums that give a group's least-squares fit and error;
// with importance weights each term is weighted (n is then their sum).
type asymSums struct {
	n, sq, sqq, sqw, sw, sww float64
}

// fit solves for the (d, m) minimizing sum (d*q + m - w)^2 over the codes.
func (s asymSums) fit() (d, m float64, ok bool) {
	det := s.n*s.sqq - s.sq*s.sq
	if det <= 0 {
		return 0, 0, false
	}
	d = (s.n*s.sqw - s.sq*s.sw) / det
	m = (s.sqq*s.sw - s.sq*s.sqw) / det
	return d, m, true
}

// err is sum (d*q + m - w)^2 expanded over the sums.
func (s asymSums) err(d, m float64) float64 {
	return d*d*s.sqq + 2*d*m*s.sq + s.n*m*m - 2*d*s.sqw - 2*m*s.sw + s.sww
}

// asymCodes quantizes w to codes at (d, m) and returns the sums; sw and
// sww do not depend on the codes and are passed in.
func asymCodes(w []float32, d, m float32, levels int32, codes []int32, sw, sww float64) asymSums {
	s := asymSums{n: float64(len(w)), sw: sw, sww: sww}
	if d == 0 {
		for i := range w {
			codes[i] = 0
		}
		return s
	}
	inv, top := 1/d, float32(levels)
	var sq0, sq1, sqq0, sqq1 int32
	var sqw0, sqw1 float32
	i := 0
	if n := len(w) &^ 7; haveAVX2 && n > 0 {
		sq0, sqq0, sqw0 = asymCodesAVX2(&w[0], n, m, inv, top, &codes[0])
		i = n
	}
	for ; i+2 <= len(w); i += 2 {
		v0, v1 := w[i], w[i+1]
		x0, x1 := (v0-m)*inv, (v1-m)*inv
		if x0 < 0 {
			x0 = 0
		} else if x0 > top {
			x0 = top
		}
		if x1 < 0 {
			x1 = 0
		} else if x1 > top {
			x1 = top
		}
		q0, q1 := int32(x0+0.5), int32(x1+0.5) // x >= 0: rounds half up
		codes[i], codes[i+1] = q0, q1
		sq0 += q0
		sq1 += q1
		sqq0 += q0 * q0
		sqq1 += q1 * q1
		sqw0 += float32(q0) * v0
		sqw1 += float32(q1) * v1
	}
	for ; i < len(w); i++ {
		x := (w[i] - m) * inv
		if x < 0 {
			x = 0
		} else if x > top {
			x = top
		}
		q := int32(x + 0.5)
		codes[i] = q
		sq0 += q
		sqq0 += q * q
		sqw0 += float32(q) * w[i]
	}
	sq, sqq, sqw := sq0+sq1, sqq0+sqq1, sqw0+sqw1
	s.sq, s.sqq, s.sqw = float64(sq), float64(sqq), float64(sqw)
	return s
}

// plainSums are the code-independent sums of a group.
func plainSums(w []float32) (sw, sww float64) {
	for _, v := range w {
		sw += float64(v)
		sww += float64(v) * float64(v)
	}
	return sw, sww
}

// weightedPlainSums are plainSums weighted by imp, with the weights' sum.
func weightedPlainSums(w, imp []float32) (n, sw, sww float64) {
	for i, v := range w {
		a, x := float64(imp[i]), float64(v)
		n += a
		sw += a * x
		sww += a * x * x
	}
	return n, sw, sww
}

// weightedCodes quantizes w at (d, m) as asymCodes does and returns the
// sums weighted by imp; n, sw and sww (weightedPlainSums) are passed in.
func weightedCodes(w, imp []float32, d, m float32, levels int32, codes []int32, n, sw, sww float64) asymSums {
	s := asymSums{n: n, sw: sw, sww: sww}
	if d == 0 {
		for i := range w {
			codes[i] = 0
		}
		return s
	}
	inv, top := 1/d, float32(levels)
	var sq, sqq, sqw float32
	i := 0
	if k := len(w) &^ 7; haveAVX2 && k > 0 {
		sq, sqq, sqw = asymCodesWeightedAVX2(&w[0], &imp[0], k, m, inv, top, &codes[0])
		i = k
	}
	for ; i < len(w); i++ {
		x := min(max((w[i]-m)*inv, 0), top)
		q := int32(x + 0.5) // x >= 0: rounds half up
		codes[i] = q
		a := imp[i] * float32(q)
		sq += a
		sqq += a * float32(q)
		sqw += a * w[i]
	}
	s.sq, s.sqq, s.sqw = float64(sq), float64(sqq), float64(sqw)
	return s
}

// quantizeAsymRow packs one q4 or q2 row.
func quantizeAsymRow(t *Tensor, r int, row []float32, opt *Options, codes []int32) {
	search := opt.Search
	s := t.Format.spec()
	levels, pack := s.MaxCode, s.pack
	rb := t.RowBytes()
	dst := t.Data[r*rb : (r+1)*rb]
	ng := t.Groups()
	gBytes := t.GroupSize / block * s.BlockBytes
	var lr *lowRank
	if opt.residual != nil && search {
		lr = newLowRank(t.GroupSize)
	}
	for g := 0; g < ng; g++ {
		lo, hi := groupBounds(g, t.GroupSize, len(row))
		w := row[lo:hi]
		var imp []float32
		if opt.Importance != nil {
			imp = opt.Importance[lo:hi]
		}
		if lr != nil {
			imp = opt.residual[lo:hi]
			lr.set(opt.Factors[lo*FactorRank:], opt.factorOnes[lo/block*FactorRank:], w)
		}
		d, m := chooseAsym(w, imp, lr, levels, search, codes)
		t.Scales[r*ng+g], t.Mins[r*ng+g] = d, m
		df, mf := d.Float32(), m.Float32()
		if lr != nil && lr.kept {
			copy(codes, lr.best[:len(w)])
		} else {
			asymCodes(w, df, mf, levels, codes, 0, 0)
		}
		for i, v := range w {
			t.addErr(v, df*float32(codes[i])+mf) // as DequantizeRow computes it
		}
		for i := len(w); i < t.GroupSize; i++ {
			codes[i] = 0
		}
		pack(dst[g*gBytes:(g+1)*gBytes], codes[:t.GroupSize])
	}
}

// chooseAsym picks the stored (d, m) of a group, minimizing the squared
// error weighted by imp (nil: unweighted), plus with lr (nil: none) the
// error's squared projections on the correlation factors. Nearest codes
// minimize a weighted error at any (d, m), so the codes are those of the
// stored pair; with lr they need not, and the best candidate's codes,
// whose error was scored, are kept in lr.best (lr.kept).
func chooseAsym(w, imp []float32, lr *lowRank, levels int32, search bool, codes []int32) (half.Float16, half.Float16) {
	lo, hi := w[0], w[0]
	for _, v := range w {
		lo, hi = min(lo, v), max(hi, v)
	}
	L := float32(levels)
	bestD, bestM := half.FromFloat32((hi-lo)/L), half.FromFloat32(lo)
	if lr != nil {
		lr.kept = false
	}
	if !search || hi == lo {
		return bestD, bestM
	}
	var sums func(d, m float32) asymSums
	if imp == nil {
		sw, sww := plainSums(w)
		sums = func(d, m float32) asymSums { return asymCodes(w, d, m, levels, codes, sw, sww) }
	} else {
		n, sw, sww := weightedPlainSums(w, imp)
		sums = func(d, m float32) asymSums { return weightedCodes(w, imp, d, m, levels, codes, n, sw, sww) }
		if lr != nil {
			n, sw, sww = lr.addPlain(n, sw, sww)
			sums = func(d, m float32) asymSums { return lr.codes(w, imp, d, m, levels, codes, n, sw, sww) }
		}
	}
	s := sums(bestD.Float32(), bestM.Float32())
	bestErr := s.err(float64(bestD.Float32()), float64(bestM.Float32()))
	if lr != nil {
		copy(lr.best, codes[:len(w)])
		lr.kept = true
	}
	try := func(d, m float32) {
		s := sums(d, m)
		fd, fm, ok := s.fit()
		if !ok {
			return
		}
		// The fit is the least-squares optimum for these codes, so the
		// fp16-rounded pair cannot beat bestErr when the fit itself does
		// not (the margin covers the closed form's rounding).
		if s.err(fd, fm) > bestErr*(1+1e-9)+1e-30 {
			return
		}
		hd, hm := half.FromFloat32(float32(fd)), half.FromFloat32(float32(fm))
		if e := s.err(float64(hd.Float32()), float64(hm.Float32())); e < bestErr {
			bestD, bestM, bestErr = hd, hm, e
			if lr != nil {
				copy(lr.best, codes[:len(w)])
			}
		}
	}
	span := hi - lo
	// Shrink the range from both ends by small steps (the refit recovers the
	// exact optimum for whichever codes a candidate produces).
	for _, c := range [...][2]float32{{0, 0}, {0.03, 0.03}, {0.08, 0.08}, {0.06, 0}, {0, 0.06}, {0.14, 0.14}, {0.2, 0.2}} {
		a, b := lo+c[0]*span, hi-c[1]*span
		try((b-a)/L, a)
	}
	if imp != nil {
		// Weighted, min/max is further from the optimum: requantizing at
		// the best fit and fitting again (a round of Lloyd's algorithm)
		// recovers part of the distance; more rounds gain little more.
		try(bestD.Float32(), bestM.Float32())
	}
	return bestD, bestM
}
