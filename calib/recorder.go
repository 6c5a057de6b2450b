package calib

import (
	"context"
	"errors"
	"fmt"

	"lowbit/model"
)

// recorder is a model.Backend that passes every operation to the backend
// it wraps and, before each Linear, adds the square of every column of the
// input (normed as the product will see it) to the statistics of the
// weights that read it. Products that read one input (q, k and v; gate and
// up) share one site.
//
// It also follows the residual stream: the products from a Linear that
// reads the stream to the one that adds to it (attention's q, k, v and o;
// the MLP's gate, up and down) form a block. Where the stream is read
// next, through its norm, the block's gain is measured as that reader sees
// it: the power of what the block added over the power of the whole
// stream, each normed and scaled by the reader's gains. A relative error
// in the block's outputs moves what the rest of the model reads by about
// that much.
type recorder struct {
	model.Backend
	// weights are the uploaded weights by Mat id (the norms' gains are read
	// from here).
	weights map[int]*model.Weight
	// sites are the statistics by the Mat id of each weight that reads them.
	sites map[int]*site
	// open are the sites of the block under way; added is what the last
	// closed block added to the stream (buffer dst), waiting for the next
	// reader (block nil: none waits).
	open  []*site
	added struct {
		block *block
		dst   model.Buf
		delta []float32
	}
	x, xn, before []float32
	// hessians, when set, has every site keep the sum of x xᵀ too, within
	// hessianLimit bytes in all (hessianBytes so far); err is set when they
	// would not fit.
	hessians                   bool
	hessianBytes, hessianLimit int64
	xt                         []float32
	err                        error
}

// ErrHessiansTooLarge is returned (wrapped) by Collect with
// Options.Hessians for a model whose Hessians would not fit in memory.
var ErrHessiansTooLarge = errors.New("the model is too large for error compensation")

// maxHessianBytes bounds the Hessians one calibration keeps: a site of n
// columns keeps n² float32s, so this admits models up to a few hundred
// million weights and refuses larger ones rather than exhaust memory.
const maxHessianBytes = 1 << 30

// site accumulates one Linear input's column statistics.
type site struct {
	sumSq []float64
	// blocks is the sum of x xᵀ within each 32-column block (blocks of
	// 32×32, lower triangle filled), for the correlation factors.
	blocks []float64
	rows   int
	block  *block
	// h is the sum of x xᵀ over the rows ([cols, cols]), when kept.
	h []float32
}

// block accumulates one block's powers as the next reader of the stream
// sees them: what the block added, and the whole stream.
type block struct {
	addPow, streamPow float64
}

func newRecorder(b model.Backend) *recorder {
	return &recorder{Backend: b, weights: map[int]*model.Weight{}, sites: map[int]*site{}}
}

// Upload implements model.Backend, remembering which weight each Mat is.
func (r *recorder) Upload(group ...*model.Weight) ([]model.Mat, error) {
	mats, err := r.Backend.Upload(group...)
	if err != nil {
		return nil, err
	}
	for i, m := range mats {
		r.weights[m.ID()] = group[i]
	}
	return mats, nil
}

// Step implements model.Backend: a pass starts with no block open.
func (r *recorder) Step(ctx context.Context, st *model.Step, pass func() error) (*model.StepResult, error) {
	r.open, r.added.block = r.open[:0], nil
	return r.Backend.Step(ctx, st, pass)
}

// Linear implements model.Backend: the statistics, then the products.
func (r *recorder) Linear(x model.Buf, norm model.Norm, outs ...model.Output) {
	if len(outs) == 0 {
		r.Backend.Linear(x, norm, outs...)
		return
	}
	s := r.record(x, norm, outs)
	adds := len(outs) == 1 && outs[0].Add && s != nil && len(r.open) > 0
	if adds {
		// What the product adds is the stream after it less before it.
		r.before = grow(r.before, outs[0].Dst.Len())
		adds = r.Backend.Read(r.before, outs[0].Dst) == nil
	}
	r.Backend.Linear(x, norm, outs...)
	if !adds {
		return
	}
	a := &r.added
	a.delta = grow(a.delta, outs[0].Dst.Len())
	if r.Backend.Read(a.delta, outs[0].Dst) != nil {
		return
	}
	for i, v := range r.before {
		a.delta[i] -= v
	}
	b := r.open[0].block
	if b == nil {
		b = &block{}
	}
	for _, o := range append(r.open, s) {
		o.block = b
	}
	a.block, a.dst = b, outs[0].Dst
	r.open = r.open[:0]
}

// seen adds, for the block waiting for a reader, what the reader of rows
// in (the stream, at buffer x) sees of the block's addition and of the
// whole stream, normed by each row's RMS and scaled by gain.
func (r *recorder) seen(x model.Buf, in, gain []float32, eps float32) {
	a := &r.added
	cols := len(gain)
	if a.block == nil || x.ID() != a.dst.ID() || x.Off() < a.dst.Off() || x.Off()+x.Len() > a.dst.Off()+a.dst.Len() {
		return
	}
	delta := a.delta[x.Off()-a.dst.Off():]
	for row := 0; row < len(in)/cols; row++ {
		v, d := in[row*cols:(row+1)*cols], delta[row*cols:(row+1)*cols]
		var ss float64
		for _, h := range v {
			ss += float64(h) * float64(h)
		}
		inv := 1 / (ss/float64(cols) + float64(eps))
		for j, g := range gain {
			g2 := float64(g) * float64(g) * inv
			a.block.addPow += g2 * float64(d[j]) * float64(d[j])
			a.block.streamPow += g2 * float64(v[j]) * float64(v[j])
		}
	}
	a.block = nil
}

// grow is buf with room for n values.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// record adds x's column squares to the site of outs, and returns the site.
func (r *recorder) record(x model.Buf, norm model.Norm, outs []model.Output) *site {
	cols := outs[0].W.Cols()
	if cols <= 0 || x.Len()%cols != 0 {
		return nil // the wrapped backend reports the mismatch
	}
	r.x, r.xn = grow(r.x, x.Len()), grow(r.xn, cols)
	in, xn := r.x, r.xn
	if err := r.Backend.Read(in, x); err != nil {
		return nil // a failed step fails in Step too
	}
	var gain []float32
	var eps float32
	if norm.W.Valid() {
		g := r.weights[norm.W.ID()]
		if g == nil || len(g.F32) != cols {
			return nil
		}
		gain, eps = g.F32, norm.Eps
	}
	if gain != nil {
		r.seen(x, in, gain, eps)
	}
	s := r.siteFor(outs, cols)
	for row := 0; row < len(in)/cols; row++ {
		v := in[row*cols : (row+1)*cols]
		if gain != nil {
			model.RMSNormRow(xn[:cols], v, gain, eps)
			v = xn[:cols]
		}
		for j, a := range v {
			s.sumSq[j] += float64(a) * float64(a)
		}
		addBlocks(s.blocks, v)
		if s.h != nil {
			// Columns of the normed rows, for addHessian.
			r.xt = grow(r.xt, len(in))
			for j, a := range v {
				r.xt[j*(len(in)/cols)+row] = a
			}
		}
		s.rows++
	}
	if s.h != nil {
		addHessian(s.h, r.xt, cols, len(in)/cols)
	}
	if !outs[0].Add {
		r.open = append(r.open, s)
	}
	return s
}

// siteFor is the site of the weights of outs, made at their first product.
func (r *recorder) siteFor(outs []model.Output, cols int) *site {
	for _, o := range outs {
		if s := r.sites[o.W.ID()]; s != nil {
			return s
		}
	}
	s := &site{sumSq: make([]float64, cols), blocks: make([]float64, factorBlocks(cols)*factorBlock*factorBlock)}
	if r.hessians && r.err == nil {
		r.hessianBytes += 4 * int64(cols) * int64(cols)
		if r.hessianBytes > r.hessianLimit {
			r.err = fmt.Errorf("%w: the inputs' Hessians take over %d MiB", ErrHessiansTooLarge, r.hessianLimit>>20)
		} else {
			s.h = make([]float32, cols*cols)
		}
	}
	for _, o := range outs {
		r.sites[o.W.ID()] = s
		if o.Up.Valid() {
			r.sites[o.Up.ID()] = s
		}
	}
	return s
}

// siteOf is the site of a model weight: the site of the uploaded weight
// that is w or a view of its rows (Phi-3's q, k and v are rows of one
// qkv_proj, a view sharing its memory); nil when none read it.
func (r *recorder) siteOf(w *model.Weight) *site {
	for id, u := range r.weights {
		if u == w || sameMemory(u.F32, w.F32) {
			if s := r.sites[id]; s != nil {
				return s
			}
		}
	}
	return nil
}

// sameMemory says whether a and b are views of one array: slicing keeps a
// slice's capacity to the end of its array, so views of rows of one
// matrix share their last element's address.
func sameMemory(a, b []float32) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	return &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}

// gain is the block gain of a site (1 when its block was never read).
func (s *site) gain() float64 {
	if s.block == nil || !(s.block.streamPow > 0) {
		return 1
	}
	return s.block.addPow / s.block.streamPow
}

// addHessian adds xᵀx to h ([cols, cols]) for the n rows of x held by
// column in xt (column j at xt[j*n:]).
func addHessian(h, xt []float32, cols, n int) {
	for i := 0; i < cols; i++ {
		a := xt[i*n : (i+1)*n]
		for j := 0; j <= i; j++ {
			b := xt[j*n : (j+1)*n]
			var s0, s1, s2, s3 float32
			k := 0
			for ; k+4 <= n; k += 4 {
				s0 += a[k] * b[k]
				s1 += a[k+1] * b[k+1]
				s2 += a[k+2] * b[k+2]
				s3 += a[k+3] * b[k+3]
			}
			for ; k < n; k++ {
				s0 += a[k] * b[k]
			}
			s := (s0 + s1) + (s2 + s3)
			h[i*cols+j] += s
			if i != j {
				h[j*cols+i] += s
			}
		}
	}
}

// addBlocks adds the lower triangle of v vᵀ within each 32-column block
// to blocks.
func addBlocks(blocks []float64, v []float32) {
	for lo := 0; lo < len(v); lo += factorBlock {
		x := v[lo:min(lo+factorBlock, len(v))]
		h := blocks[lo*factorBlock:]
		for i, a := range x {
			if a == 0 {
				continue
			}
			row := h[i*factorBlock : i*factorBlock+i+1]
			fa := float64(a)
			for j, b := range x[:i+1] {
				row[j] += fa * float64(b)
			}
		}
	}
}
