package calib

import (
	"math"

	"lowbit/model"
)

// recorder is a model.Backend that passes every operation to the backend
// it wraps and, before each Linear, adds the square of every column of the
// input (normed as the product will see it) to the statistics of the
// weights that read it. Products that read one input (q, k and v; gate and
// up) share one site.
type recorder struct {
	model.Backend
	// weights are the uploaded weights by Mat id (the norms' gains are read
	// from here).
	weights map[int]*model.Weight
	// sites are the statistics by the Mat id of each weight that reads them.
	sites map[int]*site
	x, xn []float32
}

// site accumulates one Linear input's column statistics.
type site struct {
	sumSq []float64
	rows  int
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

// Linear implements model.Backend: the statistics, then the products.
func (r *recorder) Linear(x model.Buf, norm model.Norm, outs ...model.Output) {
	if len(outs) > 0 {
		r.record(x, norm, outs)
	}
	r.Backend.Linear(x, norm, outs...)
}

// record adds x's column squares to the site of outs.
func (r *recorder) record(x model.Buf, norm model.Norm, outs []model.Output) {
	cols := outs[0].W.Cols()
	if cols <= 0 || x.Len()%cols != 0 {
		return // the wrapped backend reports the mismatch
	}
	if cap(r.x) < x.Len() {
		r.x, r.xn = make([]float32, x.Len()), make([]float32, cols)
	}
	in := r.x[:x.Len()]
	if err := r.Backend.Read(in, x); err != nil {
		return // a failed step fails in Step too
	}
	var gain []float32
	var eps float32
	if norm.W.Valid() {
		g := r.weights[norm.W.ID()]
		if g == nil || len(g.F32) != cols {
			return
		}
		gain, eps = g.F32, norm.Eps
	}
	s := r.siteFor(outs, cols)
	xn := r.xn[:cols]
	for row := 0; row < len(in)/cols; row++ {
		v := in[row*cols : (row+1)*cols]
		if gain != nil {
			// As the CPU backend norms it: the mean square in float64, the
			// scale in float32.
			var ss float64
			for _, a := range v {
				ss += float64(a) * float64(a)
			}
			inv := float32(1 / math.Sqrt(float64(float32(ss/float64(cols))+eps)))
			for j, a := range v {
				xn[j] = gain[j] * (a * inv)
			}
			v = xn
		}
		for j, a := range v {
			s.sumSq[j] += float64(a) * float64(a)
		}
		s.rows++
	}
}

// siteFor is the site of the weights of outs, made at their first product.
func (r *recorder) siteFor(outs []model.Output, cols int) *site {
	for _, o := range outs {
		if s := r.sites[o.W.ID()]; s != nil {
			return s
		}
	}
	s := &site{sumSq: make([]float64, cols)}
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
