package quantize

import (
	"math"
)

// Lowbit's super-block formats (q2s, q3s, q4s) spend their bits on the
// weights: a block of 32 weights holds 32 codes and, for each of its two
// 16-weight sub-blocks, one byte of two 4-bit codes, a scale code k and a
// zero-point code z. One float32 per tensor (Tensor.Scale, the largest
// sub-block scale of the tensor) is the super scale the scale codes are
// read against, so no per-row or per-block fp16 costs bits a weight on the
// narrow rows of small models. A weight of sub-block j decodes as
//
//	ds = S * sblockScales[k],  w = ds*q - ds*(z*L/15)
//
// with q in [0, L], L = 2^bits - 1: the scale codes are logarithmic (each a
// fixed ratio below the last, so every sub-block's scale has the same
// relative precision whatever its magnitude against the tensor's), and the
// zero point runs over the codes' range in 15 steps. A decoder sees per 16
// weights a scale ds and a minimum m = -ds*(z*L/15), and 32 integer codes.
//
// A row whose length is not a multiple of 32 ends in a short block: its
// missing weights have code 0 and a sub-block with none has the byte 0.

// sblockLayout is what the super-block formats' shared code needs of one.
type sblockLayout struct {
	// bits is the code width; codes are 0..2^bits-1.
	bits int
	// blockBytes is a block's size: 2 scale bytes and the codes.
	blockBytes int
	// pack writes a block's 32 codes after its two scale bytes (dst is
	// the block's code bytes).
	pack func(dst []byte, q *[32]int32)
	// code reads weight i (0..31) of a block's code bytes.
	code func(src []byte, i int) int32
	// sums returns Σ q*x and Σ x over each sub-block of one whole block
	// (the fast path of the product; x has 32 values).
	sums func(src []byte, x []float32) (qx0, sx0, qx1, sx1 float32)
}

// levels is the largest code, L.
func (l *sblockLayout) levels() int32 { return 1<<l.bits - 1 }

// sblockScales are the scale codes' multiples of the tensor scale S, the
// largest sub-block scale of the tensor: code k is 2^((k-15)/6), so the
// sixteen codes span 2^(15/6), about 5.7 times, down from S in steps of
// 12%; sub-blocks of still smaller weights take code 0 (BENCHMARKS.md has
// the grids tried). The values are float32s every decoder takes as they
// are.
var sblockScales = func() (t [16]float32) {
	for k := range t {
		t[k] = float32(math.Pow(2, float64(k-15)/6))
	}
	return t
}()

// params decodes a sub-block byte (k | z<<4) at tensor scale ts into the
// sub-block's scale and minimum, as every decoder computes them.
func (l *sblockLayout) params(b byte, ts float32) (ds, m float32) {
	ds = float32(ts * sblockScales[b&15])
	zp := float32(int32(b>>4)*l.levels()) / 15
	return ds, -float32(ds * zp)
}

// sblockSub is one sub-block's choice: its byte and error.
type sblockSub struct {
	b   byte
	err float64
}

// sblockRound is the code of v for scale ds and minimum m (0 where ds is 0).
func sblockRound(v, ds, m float32, top int32) int32 {
	if ds == 0 {
		return 0
	}
	x := (v - m) / ds
	if !(x > 0) {
		return 0
	}
	if x >= float32(top) {
		return top
	}
	return int32(x + 0.5)
}

// subErr is the weighted squared error of w (importance a, nil: uniform)
// decoded with byte b at tensor scale ts.
func (l *sblockLayout) subErr(w, a []float32, b byte, ts float32) float64 {
	ds, m := l.params(b, ts)
	top := l.levels()
	var e float64
	for i, v := range w {
		q := sblockRound(v, ds, m, top)
		d := float64(float32(ds*float32(q))+m) - float64(v)
		e += weightOf(a, i) * d * d
	}
	return e
}

// chooseSub picks a sub-block's byte: the real scale and minimum of least
// weighted error (fitSub, with the clipping search when search is set),
// then, among the scale codes next to it and the zero points next to its
// minimum, the byte of least error as decoded.
func (l *sblockLayout) chooseSub(w, a []float32, ts float32, search bool, codes []int32) sblockSub {
	if len(w) == 0 {
		return sblockSub{}
	}
	top := l.levels()
	d, m := fitSub(w, a, 0, top, affine, search, codes)
	// The scale code nearest d on the logarithmic grid.
	const kt, zt = 15, 15
	k0 := int32(0)
	if d > 0 && ts > 0 {
		k0 = int32(math.Round(6*math.Log2(float64(d)/float64(ts)))) + kt
		k0 = min(max(k0, 0), kt)
	}
	best := sblockSub{err: math.Inf(1)}
	try := func(k, z int32) {
		if k < 0 || k > kt || z < 0 || z > zt {
			return
		}
		b := byte(k) | byte(z)<<4
		if e := l.subErr(w, a, b, ts); e < best.err {
			best = sblockSub{b: b, err: e}
		}
	}
	// zeroFor is the zero-point code nearest minimum m at scale code k.
	zeroFor := func(k int32, m float32) int32 {
		ds := float32(ts * sblockScales[k])
		if ds == 0 {
			return 0
		}
		z := math.Round(float64(-m / ds * float32(zt) / float32(top)))
		return int32(min(max(z, 0), zt)) // NaN-safe: a NaN gives 0
	}
	// The zero point lies in the codes' range, so a sub-block whose range
	// leaves out zero (all its weights of one sign) needs a scale that
	// reaches from zero: kReq, the least code that covers the range with
	// zero, is always tried (it is the plain choice without search).
	var lo, hi float32
	for _, v := range w {
		lo, hi = min(lo, v), max(hi, v)
	}
	kReq := int32(0)
	if need := (hi - lo) / float32(top); need > 0 && ts > 0 {
		kReq = int32(math.Ceil(6*math.Log2(float64(need)/float64(ts))-1e-9)) + kt
		kReq = min(max(kReq, 0), kt)
	}
	ks, dz := []int32{kReq}, []int32{0}
	if search {
		ks, dz = []int32{k0 - 1, k0, k0 + 1, kReq}, []int32{-1, 0, 1}
	}
	for _, k := range ks {
		if k < 0 || k > kt {
			continue
		}
		z0 := zeroFor(k, m)
		for _, o := range dz {
			try(k, z0+o)
		}
	}
	if search {
		// The minimum refitted for the best scale and its codes: the
		// least-squares m for fixed ds, rounded to a zero point.
		k := int32(best.b) & kt
		ds, m0 := l.params(best.b, ts)
		var sa, sr float64
		for i, v := range w {
			q := sblockRound(v, ds, m0, top)
			wa := weightOf(a, i)
			sa += wa
			sr += wa * (float64(v) - float64(ds)*float64(q))
		}
		if sa > 0 {
			z := zeroFor(k, float32(sr/sa))
			for _, o := range dz {
				try(k, z+o)
			}
		}
	}
	return best
}

// sblockImportance is a sub-block's importance: a's span (nil for nil),
// or all ones where every weight there weighs nothing, which would leave
// the fit undetermined.
func sblockImportance(a []float32, lo, hi int, buf []float32) []float32 {
	if a == nil {
		return nil
	}
	s := a[lo:hi]
	var sum float32
	for _, v := range s {
		sum += v
	}
	if sum > 0 {
		return s
	}
	buf = buf[:hi-lo]
	for i := range buf {
		buf[i] = 1
	}
	return buf
}

// quantizeSblockRow packs row r of t in a super-block format, sub-block by
// sub-block.
func quantizeSblockRow(t *Tensor, r int, row []float32, opt *Options, codes []int32) {
	s := t.Format.spec()
	l := s.sblock
	dst := t.rowData(r)
	top := l.levels()
	var ones [16]float32
	var q [32]int32
	for b := 0; b*block < len(row); b++ {
		blk := dst[b*s.BlockBytes : (b+1)*s.BlockBytes]
		q = [32]int32{}
		for j := range 2 {
			lo, hi := min(b*block+16*j, len(row)), min(b*block+16*j+16, len(row))
			w := row[lo:hi]
			sub := l.chooseSub(w, sblockImportance(opt.Importance, lo, hi, ones[:]), t.Scale, opt.Search, codes)
			blk[j] = sub.b
			ds, m := l.params(sub.b, t.Scale)
			for i, v := range w {
				c := sblockRound(v, ds, m, top)
				q[16*j+i] = c
				t.addErr(v, float32(ds*float32(c))+m) // as DequantizeRow computes it
			}
		}
		l.pack(blk[2:], &q)
	}
}

// quantizeSblockRowCompensated is quantizeSblockRow with each column's
// error compensated on the later ones (gptq.go): a sub-block's byte is
// chosen when its first column is reached, from the row as corrected so
// far.
func (cp *compensator) quantizeSblockRow(t *Tensor, r int, row []float32, opt *Options, codes []int32) {
	s := t.Format.spec()
	l := s.sblock
	cols, u := t.Cols, opt.Compensate
	w := cp.work[:cols]
	for c, v := range row {
		w[c] = float64(v)
	}
	dst := t.rowData(r)
	top := l.levels()
	var ones [16]float32
	var seg [16]float32
	var q [32]int32
	for b := 0; b*block < cols; b++ {
		blk := dst[b*s.BlockBytes : (b+1)*s.BlockBytes]
		q = [32]int32{}
		for j := range 2 {
			lo, hi := min(b*block+16*j, cols), min(b*block+16*j+16, cols)
			for i := range hi - lo {
				seg[i] = float32(w[lo+i])
			}
			sub := l.chooseSub(seg[:hi-lo], sblockImportance(opt.Importance, lo, hi, ones[:]), t.Scale, opt.Search, codes)
			blk[j] = sub.b
			ds, m := l.params(sub.b, t.Scale)
			for c := lo; c < hi; c++ {
				qc := sblockRound(float32(w[c]), ds, m, top)
				q[c-b*block] = qc
				v := float32(ds*float32(qc)) + m // as DequantizeRow computes it
				t.addErr(row[c], v)
				e := (w[c] - float64(v)) / float64(u[c*cols+c])
				ur := u[c*cols : (c+1)*cols]
				for k := c + 1; k < cols; k++ {
					w[k] -= e * float64(ur[k])
				}
			}
		}
		l.pack(blk[2:], &q)
	}
}

// rowCode reads weight c's code from a row, straight from the layout.
func (l *sblockLayout) rowCode(row []byte, c int) int32 {
	return l.code(row[c/block*l.blockBytes+2:], c%block)
}

// rowScale reads the scale and minimum of weight c's sub-block.
func (l *sblockLayout) rowScale(row []byte, c int, ts float32) (float32, float32) {
	return l.params(row[c/block*l.blockBytes+c%block/16], ts)
}

// dequantize writes the first len(out) weights of a row's blocks at
// tensor scale ts.
func (l *sblockLayout) dequantize(blocks []byte, ts, _ float32, out []float32) {
	for b := 0; b*block < len(out); b++ {
		blk := blocks[b*l.blockBytes : (b+1)*l.blockBytes]
		o := out[b*block : min(b*block+block, len(out))]
		d0, m0 := l.params(blk[0], ts)
		d1, m1 := l.params(blk[1], ts)
		for i := range o {
			d, m := d0, m0
			if i >= 16 {
				d, m = d1, m1
			}
			o[i] = float32(d*float32(l.code(blk[2:], i))) + m
		}
	}
}

// dotSblock is Σ sub-blocks ds*Σ q*x + m*Σ x on the packed bytes.
func dotSblock(t *Tensor, r int, x []float32) float32 {
	s := t.Format.spec()
	l := s.sblock
	src := t.rowData(r)
	ts := t.Scale
	whole := t.Cols / block
	var sum float32
	for b := range whole {
		blk := src[b*s.BlockBytes : (b+1)*s.BlockBytes]
		qx0, sx0, qx1, sx1 := l.sums(blk[2:], x[b*block:b*block+block])
		d0, m0 := l.params(blk[0], ts)
		d1, m1 := l.params(blk[1], ts)
		sum += d0*qx0 + m0*sx0 + d1*qx1 + m1*sx1
	}
	if whole*block < t.Cols { // the short last block
		blk := src[whole*s.BlockBytes:]
		for c := whole * block; c < t.Cols; c++ {
			d, m := l.params(blk[c%block/16], ts)
			sum += (d*float32(l.code(blk[2:], c%block)) + m) * x[c]
		}
	}
	return sum
}

// sblockMaxAbs bounds the weights a super-block format stores: its tensor
// scale times the largest scale code and code must stay a finite float32.
const (
	sblockMaxAbs    = 1e30
	sblockMaxAbsWhy = "its float32 tensor scale times its largest sub-block scale must stay finite"
)

// tensorScale is the tensor scale of w (rows of cols weights) in layout
// l: the largest of its sub-blocks' plain scales (their range, zero
// included, over the codes' span), so the top scale code clips no
// sub-block.
func (l *sblockLayout) tensorScale(w []float32, cols int) float32 {
	var best float32
	for r := 0; r+cols <= len(w); r += cols {
		row := w[r : r+cols]
		for lo := 0; lo < cols; lo += 16 {
			sub := row[lo:min(lo+16, cols)]
			var a, b float32 // zero included: the zero point lies in the codes' range
			for _, v := range sub {
				a, b = min(a, v), max(b, v)
			}
			best = max(best, (b-a)/float32(l.levels()))
		}
	}
	return best
}

// SuperBlock says whether f is one of lowbit's super-block formats (q2s,
// q3s, q4s): a tensor scale and sub-block scale codes, whose decoders
// take their scales from SuperBlockScales.
func (f Format) SuperBlock() bool { return f.spec().sblock != nil }

// SuperBlockScales is the sub-block scale each scale code k gives at
// tensor scale ts, the float32 product every decoder uses (params), for a
// decoder that reads it from a table.
func SuperBlockScales(ts float32) [16]float32 {
	var t [16]float32
	for k := range t {
		t[k] = float32(ts * sblockScales[k])
	}
	return t
}
