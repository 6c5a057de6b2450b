package quantize

import (
	"encoding/binary"
	"math"

	"lowbit/half"
)

// The quantizer of the block formats (GGUF's layouts, scales inside each
// block). A block is split in sub-blocks (the K-quants: 8 of 32 weights or
// 16 of 16 in a 256-weight super-block; q5_0 and q5_1: one of 32). A
// weight decodes as ds*q + ms, where the sub-block's scale ds and minimum ms
// come from the block's fp16 fields d and dmin:
//
//   - K-quants: ds = d*sc and ms = -(dmin*mn), with integer sub-block codes
//     sc and mn (no mn where the format is symmetric);
//   - q5_0: ds = d; q5_1: ds = d and ms = dmin (its fp16 minimum).
//
// The quantizer works in three steps. First each sub-block gets its best
// real scale (and minimum) by a search over clipping ranges, each candidate
// refitted by weighted least squares for the codes it gives (fitSub).
// Second the sub-block scales are themselves quantized: d (and dmin) put
// the largest on the top code, sc and mn round to that grid. Third, with
// the scales as they will be stored, the codes are rounded again and
// refined: d and dmin are refitted jointly over the whole block by least
// squares for the codes, each sub-block's sc and mn try their grid
// neighbours, and every change is kept only where the block's error (as
// decoded) drops. Errors are weighted by Options.Importance where given.

// blockLayout is what the quantizer needs to know of a block format.
type blockLayout struct {
	// sub is the weights of a sub-block.
	sub int
	// qlo and qhi bound the codes (signed where the layout stores an offset).
	qlo, qhi int32
	// scLo and scHi bound the sub-block scale codes sc (and mn, from 0 to
	// scHi); both 0 where d applies directly (q5_0, q5_1).
	scLo, scHi int32
	// mins says sub-blocks have minimums: mn codes (K), or q5_1's fp16 one.
	mins bool
	// pack writes a block's fields in the layout.
	pack func(dst []byte, f *blockFields)
}

// direct says the block's fp16 fields are its one sub-block's scale and
// minimum, with no integer sub-block codes.
func (l *blockLayout) direct() bool { return l.scHi == 0 }

// blockFields are one block's values before packing.
type blockFields struct {
	// d and dmin are the block's fp16 scale and minimum scale (q5_1: its
	// minimum).
	d, dmin half.Float16
	// sc and mn are the sub-blocks' integer scales and minimums.
	sc, mn [16]int32
	// q are the weights' codes.
	q [256]int32
}

// subScale is sub-block j's scale and minimum, computed as the decoders
// compute them (the explicit conversions keep Go from fusing them).
func (f *blockFields) subScale(l *blockLayout, j int) (ds, ms float32) {
	d, dm := f.d.Float32(), f.dmin.Float32()
	if l.direct() {
		if l.mins {
			return d, dm
		}
		return d, 0
	}
	ds = float32(d * float32(f.sc[j]))
	if l.mins {
		ms = -float32(dm * float32(f.mn[j]))
	}
	return ds, ms
}

// requantSub rounds sub-block j's codes to the nearest for its stored
// scales and returns its weighted squared error as decoded.
func (f *blockFields) requantSub(l *blockLayout, j int, w, a []float32) float64 {
	ds, ms := f.subScale(l, j)
	lo := j * l.sub
	q := f.q[lo : lo+len(w)]
	var inv float32
	if ds != 0 {
		inv = 1 / ds
	}
	span := float32(l.qhi - l.qlo)
	var e float64
	for i, v := range w {
		x := (v-ms)*inv - float32(l.qlo)
		if !(x > 0) { // NaN-safe: ds = 0 gives code 0 below
			x = 0
		} else if x > span {
			x = span
		}
		c := int32(x+0.5) + l.qlo
		if ds == 0 {
			c = max(l.qlo, 0)
		}
		q[i] = c
		diff := float64(float32(ds*float32(c))+ms) - float64(v)
		e += weightOf(a, i) * diff * diff
	}
	return e
}

// requant rounds every code for the stored scales; it returns the block's
// error and fills subErr with each sub-block's.
func (f *blockFields) requant(l *blockLayout, w, a []float32, subErr []float64) float64 {
	var e float64
	for j := range subErr {
		subErr[j] = f.requantSub(l, j, w[j*l.sub:(j+1)*l.sub], subSlice(a, j*l.sub, (j+1)*l.sub))
		e += subErr[j]
	}
	return e
}

// weightOf is a[i], or 1 where no importance is given.
func weightOf(a []float32, i int) float64 {
	if a == nil {
		return 1
	}
	return float64(a[i])
}

// subSlice is a[lo:hi], or nil for nil.
func subSlice(a []float32, lo, hi int) []float32 {
	if a == nil {
		return nil
	}
	return a[lo:hi]
}

// wsums are the weighted sums that give a least-squares fit of w ≈ d*q + m
// over a sub-block's codes, and its error in closed form.
type wsums struct{ a, aq, aqq, aqw, aw, aww float64 }

// err is Σ a(d*q + m - w)² expanded over the sums.
func (s wsums) err(d, m float64) float64 {
	return d*d*s.aqq + 2*d*m*s.aq + m*m*s.a - 2*d*s.aqw - 2*m*s.aw + s.aww
}

// subKind is the shape of a sub-block's fit.
type subKind int

const (
	// symmetric fits w ≈ d*q.
	symmetric subKind = iota
	// affine fits w ≈ d*q + m, any m (q5_1).
	affine
	// affineNeg fits w ≈ d*q + m with m <= 0: the K-quants store -m as an
	// unsigned code.
	affineNeg
)

// fit is the least-squares (d, m) of the sums under kind's constraint;
// ok is false where the codes do not determine it.
func (s wsums) fit(kind subKind) (d, m float64, ok bool) {
	if kind == symmetric {
		if s.aqq <= 0 {
			return 0, 0, false
		}
		return s.aqw / s.aqq, 0, true
	}
	det := s.a*s.aqq - s.aq*s.aq
	if det > 0 {
		d = (s.a*s.aqw - s.aq*s.aw) / det
		m = (s.aqq*s.aw - s.aq*s.aqw) / det
		if kind == affine || m <= 0 {
			return d, m, true
		}
	}
	if kind == affineNeg && s.aqq > 0 { // the best with m = 0
		return max(s.aqw/s.aqq, 0), 0, true
	}
	return 0, 0, false
}

// subCodes sets codes to the nearest codes of w at (d, m) within [qlo, qhi]
// and returns the weighted sums.
func subCodes(w, a []float32, d, m float32, qlo, qhi int32, codes []int32) wsums {
	var s wsums
	var inv float32
	if d != 0 {
		inv = 1 / d
	}
	span := float32(qhi - qlo)
	for i, v := range w {
		x := (v-m)*inv - float32(qlo)
		if !(x > 0) {
			x = 0
		} else if x > span {
			x = span
		}
		c := int32(x+0.5) + qlo
		if d == 0 {
			c = max(qlo, 0)
		}
		codes[i] = c
		wa, q, wv := weightOf(a, i), float64(c), float64(v)
		s.a += wa
		s.aq += wa * q
		s.aqq += wa * q * q
		s.aqw += wa * q * wv
		s.aw += wa * wv
		s.aww += wa * wv * wv
	}
	return s
}

// fitSub finds a sub-block's real scale and minimum (m = 0 where kind is
// symmetric) for codes in [qlo, qhi]. Plain, it maps the range of the
// weights onto the codes (symmetric: the largest magnitude onto qlo, the
// side with one level more). With search it also tries ranges clipped at
// the ends, refits each candidate by least squares for the codes it gives
// (twice, codes rounded again between), and keeps the one of least
// weighted error.
func fitSub(w, a []float32, qlo, qhi int32, kind subKind, search bool, codes []int32) (float32, float32) {
	lo, hi, big := w[0], w[0], w[0]
	for _, v := range w {
		lo, hi = min(lo, v), max(hi, v)
		if abs32(v) > abs32(big) {
			big = v
		}
	}
	if kind == affineNeg {
		lo = min(lo, 0)
	}
	bestD, bestM, bestErr := float32(0), float32(0), math.Inf(1)
	try := func(d, m float32) {
		s := subCodes(w, a, d, m, qlo, qhi, codes)
		if !search {
			if e := s.err(float64(d), float64(m)); e < bestErr {
				bestD, bestM, bestErr = d, m, e
			}
			return
		}
		for range 2 {
			fd, fm, ok := s.fit(kind)
			if !ok {
				break
			}
			d, m = float32(fd), float32(fm)
			s = subCodes(w, a, d, m, qlo, qhi, codes)
		}
		if fd, fm, ok := s.fit(kind); ok {
			if e := s.err(fd, fm); e < bestErr {
				bestD, bestM, bestErr = float32(fd), float32(fm), e
			}
		} else if e := s.err(float64(d), float64(m)); e < bestErr {
			bestD, bestM, bestErr = d, m, e
		}
	}
	if kind == symmetric {
		if big == 0 {
			return 0, 0
		}
		ql, qh := float32(qlo), float32(qhi)
		try(big/ql, 0)
		if search {
			try(big/qh, 0)
			for _, x := range [...]float32{0.5, 1, 1.5, 2, 3} {
				try(big/(ql-x), 0)
				try(big/(qh+x), 0)
			}
		}
		return bestD, bestM
	}
	span := hi - lo
	if span == 0 {
		return 0, lo
	}
	L := float32(qhi - qlo)
	try(span/L, lo)
	if search {
		for _, x := range [...]float32{0.25, 0.5, 1, 1.5, 2, 3} {
			d := span / (L + x)
			try(d, lo+(span-L*d)/2)
		}
	}
	return bestD, bestM
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundCode is the integer nearest x within [lo, hi] (lo for NaN).
func roundCode(x float32, lo, hi int32) int32 {
	if !(x > float32(lo)) {
		return lo
	}
	if x >= float32(hi) {
		return hi
	}
	return int32(math.Floor(float64(x) + 0.5))
}

// quantizeBlock sets f to the quantized block of w (a whole block) with
// importance a (nil: uniform), and returns its weighted error.
func quantizeBlock(l *blockLayout, w, a []float32, search bool, f *blockFields) float64 {
	nsub := len(w) / l.sub
	kind := symmetric
	switch {
	case l.mins && l.direct():
		kind = affine
	case l.mins:
		kind = affineNeg
	}
	var ds, ms [16]float32
	for j := range nsub {
		ds[j], ms[j] = fitSub(w[j*l.sub:(j+1)*l.sub], subSlice(a, j*l.sub, (j+1)*l.sub), l.qlo, l.qhi, kind, search, f.q[j*l.sub:])
	}
	subErr := make([]float64, nsub)
	var best blockFields
	bestErr := math.Inf(1)
	// keep evaluates f and keeps it where it is the best so far.
	keep := func() {
		if e := f.requant(l, w, a, subErr); e < bestErr {
			best, bestErr = *f, e
		}
	}
	if l.direct() {
		f.d, f.dmin = half.FromFloat32(ds[0]), half.FromFloat32(ms[0])
		keep()
	} else {
		f.dmin = 0
		if l.mins {
			var smax, mmax float32
			for j := range nsub {
				smax, mmax = max(smax, ds[j]), max(mmax, -ms[j])
			}
			f.d, f.dmin = half.FromFloat32(smax/float32(l.scHi)), half.FromFloat32(mmax/float32(l.scHi))
			f.gridScales(l, ds[:nsub], ms[:nsub])
			keep()
		} else {
			// The scale of largest magnitude onto the extra negative code,
			// or onto the top one.
			var big float32
			for _, s := range ds[:nsub] {
				if abs32(s) > abs32(big) {
					big = s
				}
			}
			for _, top := range []int32{l.scLo, l.scHi} {
				if top == l.scHi && !search {
					break
				}
				f.d = half.FromFloat32(big / float32(top))
				f.gridScales(l, ds[:nsub], ms[:nsub])
				keep()
			}
		}
	}
	*f = best
	if !search {
		return bestErr
	}
	for range 3 {
		before := bestErr
		f.refitD(l, w, a)
		keep()
		*f = best
		if !l.direct() {
			bestErr = f.neighbours(l, w, a, subErr)
			best = *f
		}
		if bestErr >= before {
			break
		}
	}
	*f = best
	return bestErr
}

// gridScales rounds the sub-block scales ds and minimums ms to codes on the
// grid of f.d and f.dmin.
func (f *blockFields) gridScales(l *blockLayout, ds, ms []float32) {
	d, dm := f.d.Float32(), f.dmin.Float32()
	for j := range ds {
		f.sc[j], f.mn[j] = 0, 0
		if d != 0 {
			f.sc[j] = roundCode(ds[j]/d, l.scLo, l.scHi)
		}
		if l.mins && dm != 0 {
			f.mn[j] = roundCode(-ms[j]/dm, 0, l.scHi)
		}
	}
}

// refitD sets d (and dmin) to the least-squares fit over the whole block
// for its codes and sub-block codes: w ≈ d*u + dmin*v with u = sc*q and
// v = -mn (u = q and v = 1 for q5_0 and q5_1).
func (f *blockFields) refitD(l *blockLayout, w, a []float32) {
	var suu, suv, svv, suw, svw float64
	for i, x := range w {
		j := i / l.sub
		u, v := float64(f.q[i]), 1.0
		if !l.direct() {
			u *= float64(f.sc[j])
			v = -float64(f.mn[j])
		}
		wa, xv := weightOf(a, i), float64(x)
		suu += wa * u * u
		suw += wa * u * xv
		if l.mins {
			suv += wa * u * v
			svv += wa * v * v
			svw += wa * v * xv
		}
	}
	if !l.mins {
		if suu > 0 {
			f.d = half.FromFloat32(float32(suw / suu))
		}
		return
	}
	det := suu*svv - suv*suv
	if !(det > 0) {
		return
	}
	f.d = half.FromFloat32(float32((svv*suw - suv*svw) / det))
	f.dmin = half.FromFloat32(float32((suu*svw - suv*suw) / det))
}

// neighbours tries, sub-block by sub-block, the grid codes next to each sc
// (and mn), keeping those that lower the sub-block's error, and returns
// the block's error (subErr: each sub-block's).
func (f *blockFields) neighbours(l *blockLayout, w, a []float32, subErr []float64) float64 {
	e := f.requant(l, w, a, subErr)
	for j := range subErr {
		lo, hi := j*l.sub, (j+1)*l.sub
		ws, as := w[lo:hi], subSlice(a, lo, hi)
		sc0, mn0 := f.sc[j], f.mn[j]
		bestSc, bestMn, bestE := sc0, mn0, subErr[j]
		for dsc := int32(-1); dsc <= 1; dsc++ {
			for dmn := int32(-1); dmn <= 1; dmn++ {
				if (dsc == 0 && dmn == 0) || (!l.mins && dmn != 0) {
					continue
				}
				sc, mn := sc0+dsc, mn0+dmn
				if sc < l.scLo || sc > l.scHi || mn < 0 || mn > l.scHi {
					continue
				}
				f.sc[j], f.mn[j] = sc, mn
				if se := f.requantSub(l, j, ws, as); se < bestE {
					bestSc, bestMn, bestE = sc, mn, se
				}
			}
		}
		f.sc[j], f.mn[j] = bestSc, bestMn
		f.requantSub(l, j, ws, as)
		e += bestE - subErr[j]
		subErr[j] = bestE
	}
	return e
}

// quantizeBlockRow packs row r of t in a block format (t's Spec's
// blockLayout), block by block, weighing errors by opt.Importance.
func quantizeBlockRow(t *Tensor, r int, row []float32, opt *Options, _ []int32) {
	s := t.Format.spec()
	l := s.blocks
	dst := t.rowData(r)
	var f blockFields
	var a []float32
	if opt.Importance != nil {
		a = make([]float32, s.Block)
	}
	out := make([]float32, s.Block)
	for b := 0; b < len(row)/s.Block; b++ {
		w := row[b*s.Block : (b+1)*s.Block]
		if a != nil {
			copy(a, opt.Importance[b*s.Block:])
			// A sub-block whose columns all weigh nothing would leave its
			// scale undetermined: it is fitted as if all weighed alike.
			for j := 0; j < s.Block; j += l.sub {
				var sum float32
				for _, v := range a[j : j+l.sub] {
					sum += v
				}
				if !(sum > 0) {
					for i := j; i < j+l.sub; i++ {
						a[i] = 1
					}
				}
			}
		}
		quantizeBlock(l, w, a, opt.Search, &f)
		blk := dst[b*s.BlockBytes : (b+1)*s.BlockBytes]
		l.pack(blk, &f)
		s.dequantize(blk, 0, 0, out)
		for i, v := range w {
			t.addErr(v, out[i]) // as DequantizeRow computes it
		}
	}
}

// f16At reads the fp16 at b[0:2] as float32.
func f16At(b []byte) float32 { return half.Float16(binary.LittleEndian.Uint16(b)).Float32() }

// putF16 writes h at b[0:2].
func putF16(b []byte, h half.Float16) { binary.LittleEndian.PutUint16(b, uint16(h)) }
