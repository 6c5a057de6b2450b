package gpu

import (
	"fmt"

	"lowbit/model"
	"lowbit/quantize"
)

// Linear implements model.Backend. A decode product (one token) runs on
// the shared-memory matvec kernels with the norm of x applied as x is
// staged and the residual add as the output is written; a group uploaded
// together whose outputs lie side by side (q/k/v of one token) runs as
// one product over the joined matrix, and the MLP's gated output as the
// joined gate/up product writing act(gate) * up. Where the kernels do not
// take the weight (plain formats, rows not in whole chunks) or for a
// prompt, it runs the norm into scratch, then each product (cuBLAS from
// 32 tokens on), holding a residual add back so that it joins the next
// norm of the same buffer (add_rmsnorm, settle).
func (b *Backend) Linear(x model.Buf, norm model.Norm, outs ...model.Output) {
	xb := b.buf(x)
	var g *gpuMat
	if norm.W.Valid() {
		g = b.mat(norm.W)
	}
	ws, ups, dsts := make([]*gpuMat, len(outs)), make([]*gpuMat, len(outs)), make([]Buffer, len(outs))
	biases := make([]Buffer, len(outs))
	for i, o := range outs {
		ws[i], dsts[i] = b.mat(o.W), b.buf(o.Dst)
		if o.Up.Valid() {
			ups[i] = b.mat(o.Up)
		}
		if o.Bias.Valid() {
			if g := b.mat(o.Bias); g != nil {
				biases[i] = g.m.data
			}
		}
	}
	if b.err != nil || len(outs) == 0 {
		return
	}
	cols := outs[0].W.Cols()
	n := x.Len() / max(cols, 1)
	if cols <= 0 || x.Len() != n*cols || (g != nil && g.m.Cols != cols) {
		b.fail(fmt.Errorf("gpu: linear: input of %d values is not rows of %d", x.Len(), cols))
		return
	}
	for i, o := range outs {
		if o.W.Cols() != cols || o.Dst.Len() != n*o.W.Rows() || (ups[i] != nil && o.Up.Rows() != o.W.Rows()) {
			b.fail(fmt.Errorf("gpu: linear: [%d, %d] weight for %d rows of %d into %d values", o.W.Rows(), o.W.Cols(), n, cols, o.Dst.Len()))
			return
		}
		if ups[i] != nil && (o.Add || o.Bias.Valid()) {
			b.fail(fmt.Errorf("gpu: linear: a gated output with a bias or added to its destination"))
			return
		}
		if o.Bias.Valid() && o.Bias.Rows()*o.Bias.Cols() != o.W.Rows() {
			b.fail(fmt.Errorf("gpu: linear: a bias of %d values for %d rows", o.Bias.Rows()*o.Bias.Cols(), o.W.Rows()))
			return
		}
	}
	// A pending add joins this norm only when it is of x; else it is done.
	if p := b.pending; p != nil && (g == nil || p.dst != x) {
		b.settle()
	}
	if n == 1 && b.pending == nil && b.linearFused(xb, g, norm.Eps, outs, ws, ups, dsts) {
		b.addBiases(outs, dsts, biases)
		return
	}
	// The norm, joined with a pending add to x where there is one.
	in := xb
	if g != nil {
		in = b.scratchBuf(0, x.Len())
		eps := norm.Eps
		if p := b.pending; p != nil {
			b.pending = nil
			b.op("add_rmsnorm", func() error { return b.d.addRMSNorm(xb, p.src, g.m.data, in, n, cols, eps, 0) })
		} else {
			b.op("rmsnorm", func() error { return b.d.rmsnorm(xb, g.m.data, in, n, cols, eps, 0) })
		}
	}
	if b.err != nil {
		return
	}
	if n == 1 {
		if j := joinedOutput(outs, ws, ups); j != nil {
			// One product over the joined matrix: q/k/v side by side, or
			// gate then up, activated into Dst.
			if ups[0] == nil {
				b.product(j, in, b.span(outs[0].Dst, j.Rows), 1)
				b.addBiases(outs, dsts, biases)
				return
			}
			gu := b.scratchBuf(1, j.Rows)
			b.product(j, in, gu, 1)
			b.glu(dsts[0], gu, gu.Slice(int64(4*outs[0].W.Rows()), int64(4*outs[0].W.Rows())), outs[0].W.Rows(), outs[0].Act)
			return
		}
	}
	for i := 0; i < len(outs); i++ {
		o := outs[i]
		if j, k := joinedRun(outs, ws, ups, i); n == 1 && j != nil {
			// A run of a joined group: one product, then each part's bias.
			b.product(j, in, b.span(o.Dst, j.Rows), 1)
			for p := i; p < i+k; p++ {
				b.addBias(dsts[p], biases[p], outs[p].W.Rows())
			}
			i += k - 1
			continue
		}
		if ups[i] != nil {
			up := b.scratchBuf(1, o.Dst.Len())
			b.product(ws[i].m, in, dsts[i], n)
			b.product(ups[i].m, in, up, n)
			b.glu(dsts[i], dsts[i], up, o.Dst.Len(), o.Act)
			continue
		}
		if o.Add {
			b.settle()
		}
		// The product goes where the steps after it want it: a normed one
		// to scratch first, an added one to the pending scratch.
		y, final := dsts[i], dsts[i]
		if o.Add {
			y, final = b.scratchBuf(2, o.Dst.Len()), b.scratchBuf(2, o.Dst.Len())
		}
		if o.Norm.W.Valid() {
			y = b.scratchBuf(1, o.Dst.Len())
		}
		b.product(ws[i].m, in, y, n)
		b.addBias(y, biases[i], o.W.Rows())
		if o.Norm.W.Valid() {
			g := b.mat(o.Norm.W)
			if b.err != nil {
				return
			}
			// The normed product waits for its add, which joins the next
			// norm of the residual (add_rmsnorm).
			rows, eps, src := o.W.Rows(), o.Norm.Eps, y
			b.op("rmsnorm", func() error { return b.d.rmsnorm(src, g.m.data, final, n, rows, eps, 0) })
		}
		if o.SoftCap > 0 {
			limit, m := o.SoftCap, o.Dst.Len()
			b.op("softcap", func() error { return b.d.softCap(final, m, limit) })
		}
		if o.Add {
			b.pending = &pendingAdd{dst: o.Dst, src: final}
		}
	}
}

// joinedOutput is the joined matrix that outs read as one product (the
// whole group, in order, writing side by side; or a gated output over the
// two parts of one group), or nil.
func joinedOutput(outs []model.Output, ws, ups []*gpuMat) *Matrix {
	if ups[0] == nil {
		if j, n := joinedRun(outs, ws, ups, 0); n == len(outs) {
			return j
		}
		return nil
	}
	j, o := ws[0].join, outs[0]
	if len(outs) == 1 && j != nil && ws[0].part == 0 && !o.Norm.W.Valid() && o.SoftCap == 0 && !o.Bias.Valid() &&
		ups[0].join == j && ups[0].part == 1 && j.Rows == 2*ws[0].m.Rows {
		return j
	}
	return nil
}

// joinedRun is the joined matrix that outs[i:i+n] read as one product,
// and n: the parts of one joined matrix in order, writing side by side,
// none with a norm, soft-cap, gate or add of its own; or nil. (A group
// whose parts differ in format is joined in runs, join.)
func joinedRun(outs []model.Output, ws, ups []*gpuMat, i int) (*Matrix, int) {
	j := ws[i].join
	if j == nil || ws[i].part != 0 {
		return nil, 0
	}
	k, rows, end := i, 0, outs[i].Dst
	for ; k < len(outs) && rows < j.Rows; k++ {
		o := outs[k]
		if ws[k].join != j || ws[k].part != k-i || ups[k] != nil || o.Add || o.Norm.W.Valid() || o.SoftCap > 0 ||
			o.Dst.ID() != end.ID() || (k > i && o.Dst.Off() != end.Off()+end.Len()) {
			return nil, 0
		}
		rows, end = rows+ws[k].m.Rows, o.Dst
	}
	if rows != j.Rows {
		return nil, 0
	}
	return j, k - i
}

// linearFused queues a decode Linear on the fused matvec kernels and
// reports whether it could: every product must take the norm (and add)
// on one of them.
func (b *Backend) linearFused(x Buffer, g *gpuMat, eps float32, outs []model.Output, ws, ups []*gpuMat, dsts []Buffer) bool {
	type job struct {
		m *Matrix
		y Buffer
		o matvecOpts
	}
	var jobs []job
	opts := func(m *Matrix, add bool) (matvecOpts, bool) {
		o := matvecOpts{act: -1, accum: add, int8: m.Format.Spec().Int8Activations}
		if g != nil {
			if g.m.Format != quantize.F32 || g.m.Cols != m.Cols {
				return o, false
			}
			o.norm, o.eps = g.m.data, eps
		}
		return o, true
	}
	if j := joinedOutput(outs, ws, ups); j != nil {
		o, ok := opts(j, false)
		if ups[0] != nil {
			act, err := gluOf(outs[0].Act)
			if err != nil {
				return false
			}
			o.gated, o.outAct = true, act
		}
		if !ok || !b.d.canFuse(j, o) {
			return false
		}
		y := dsts[0]
		if ups[0] == nil {
			y = b.span(outs[0].Dst, j.Rows)
		}
		jobs = append(jobs, job{j, y, o})
	} else {
		for i := 0; i < len(outs); i++ {
			if j, n := joinedRun(outs, ws, ups, i); j != nil {
				o, ok := opts(j, false)
				if !ok || !b.d.canFuse(j, o) {
					return false
				}
				jobs = append(jobs, job{j, b.span(outs[i].Dst, j.Rows), o})
				i += n - 1
				continue
			}
			out := outs[i]
			o, ok := opts(ws[i].m, out.Add)
			if !ok || ups[i] != nil || out.Norm.W.Valid() || out.SoftCap > 0 || !b.d.canFuse(ws[i].m, o) {
				return false
			}
			jobs = append(jobs, job{ws[i].m, dsts[i], o})
		}
	}
	if b.err != nil {
		return false
	}
	for _, jb := range jobs {
		if len(b.skip) > 0 && b.skip[b.productRole(jb.m, jb.o, g != nil)] {
			continue
		}
		b.op("matmul "+string(jb.m.Format)+" fused", func() error { return b.d.matvecWith(jb.m, x, jb.y, jb.o) })
	}
	return true
}

// product queues y[n, rows] = x[n, cols] · mᵀ: one token through the
// matrix-vector kernels (tq2: activations quantized to int8 per token
// first, as the reference and the CPU do), several through the
// matrix-matrix kernel or cuBLAS.
func (b *Backend) product(m *Matrix, x, y Buffer, n int) {
	b.op("matmul "+string(m.Format), func() error {
		switch {
		case m.Format.Spec().Int8Activations:
			// Every token's activations quantized in one launch, then
			// the product of all tokens (cuBLAS's int8 GEMM from 32 on).
			q := b.i8[m.Cols]
			if err := b.d.quantizeI8N(x, m.Cols, n, q, m.blocks()*32, b.scale); err != nil {
				return err
			}
			return b.d.matmulI8(m, n, q, m.blocks()*32, b.scale, y)
		case n == 1 && m.Cols%32 == 0:
			return b.d.matvec(m, x, y)
		default:
			return b.d.matmul(m, x, y, n)
		}
	})
}

// span is the device memory of n values from the start of x, within x's
// whole buffer (the outputs of a joined product, side by side).
func (b *Backend) span(x model.Buf, n int) Buffer {
	if x.ID() < 0 || x.ID() >= len(b.bufs) || x.Off()+n > b.bufs[x.ID()].n {
		b.fail(fmt.Errorf("gpu: %d values from %d of buffer %d are not allocated here", n, x.Off(), x.ID()))
		return Buffer{}
	}
	return b.bufs[x.ID()].b.Slice(int64(4*x.Off()), int64(4*n))
}

// addBiases queues the biases of one token's outputs: where every output
// has one and they lie side by side (a joined q/k/v), one add over them
// with the biases joined once (jointBias), else one add each.
func (b *Backend) addBiases(outs []model.Output, dsts, biases []Buffer) {
	joint := len(outs) > 1
	total := 0
	for i, o := range outs {
		joint = joint && biases[i].Ptr() != 0 && (i == 0 || dsts[i].Ptr() == dsts[i-1].Ptr()+uint64(dsts[i-1].Size()))
		total += o.W.Rows()
	}
	if !joint {
		for i, o := range outs {
			b.addBias(dsts[i], biases[i], o.W.Rows())
		}
		return
	}
	jb := b.jointBias(biases, outs)
	if b.err != nil {
		return
	}
	b.addBias(b.span(outs[0].Dst, total), jb, total)
}

// jointBias is biases one after another in one buffer, made on first use
// (a decode step's first run, outside any capture) and kept.
func (b *Backend) jointBias(biases []Buffer, outs []model.Output) Buffer {
	key := biases[0].Ptr() // a bias is the first of one group only
	if jb, ok := b.biases[key]; ok {
		return jb
	}
	total := 0
	for _, o := range outs {
		total += o.W.Rows()
	}
	jb, err := b.alloc(total)
	if err != nil {
		b.fail(fmt.Errorf("gpu: joined biases: %w", err))
		return Buffer{}
	}
	err = b.d.do(func() error {
		off := int64(0)
		for i, o := range outs {
			n := int64(4 * o.W.Rows())
			if err := b.d.copyDtoD(jb.Slice(off, n), biases[i], n); err != nil {
				return err
			}
			off += n
		}
		return b.d.sync()
	})
	if err != nil {
		b.fail(fmt.Errorf("gpu: joined biases: %w", err))
		return Buffer{}
	}
	jb = jb.Slice(0, int64(4*total))
	b.biases[key] = jb
	return jb
}

// addBias queues y[r, :] += bias for each row of y (nothing without a
// bias). A fused product that added to y already has its bias added after.
func (b *Backend) addBias(y, bias Buffer, rows int) {
	if bias.Ptr() == 0 {
		return
	}
	n := int(y.Size() / 4)
	b.op("bias", func() error { return b.d.addRows(y, bias, n, rows) })
}

// glu queues dst = act(gate) * up over n values.
func (b *Backend) glu(dst, gate, up Buffer, n int, act model.Act) {
	g, err := gluOf(act)
	if err != nil {
		b.fail(err)
		return
	}
	b.op("glu", func() error { return b.d.glu(gate, up, dst, n, g) })
}

// join joins each run of a group's consecutive parts that share a format,
// width and group size (joinRun): llama.cpp's mixes give a layer's v or
// down projection more bits than its q and k, which then still make one
// product.
func (b *Backend) join(parts []model.Mat) {
	if b.flush(); b.err != nil {
		return
	}
	ps := make([]*gpuMat, len(parts))
	for i, p := range parts {
		ps[i] = b.mats[p.ID()-1]
		if ps[i].join != nil || ps[i].table != nil {
			return
		}
	}
	// (A super-block format's parts each have their own table of scales.)
	like := func(m, f *Matrix) bool {
		return !f.Format.SuperBlock() && m.Format == f.Format && m.Cols == f.Cols && m.GroupSize == f.GroupSize && m.rowBytes == f.rowBytes &&
			(m.scales.Ptr() == 0) == (f.scales.Ptr() == 0) && (m.mins.Ptr() == 0) == (f.mins.Ptr() == 0)
	}
	for i := 0; i < len(ps); {
		n := 1
		for i+n < len(ps) && like(ps[i+n].m, ps[i].m) {
			n++
		}
		if n > 1 {
			b.joinRun(ps[i : i+n])
		}
		i += n
	}
}

// joinRun copies matrices of one format, width and group size into one
// matrix of all their rows, and each part becomes a view into it, so no
// weight is held twice. tq2 parts, whose scale is per tensor, keep it as a
// float per row of the joined matrix. Parts whose rows or scales would not
// start on a 16-byte boundary stay apart.
func (b *Backend) joinRun(ps []*gpuMat) {
	f := ps[0].m
	rows := 0
	for _, p := range ps {
		if (rows*f.rowBytes)%16 != 0 || (rows*f.groups()*2)%16 != 0 {
			return
		}
		rows += p.m.Rows
	}
	ng := f.groups()
	fused := &Matrix{Format: f.Format, Rows: rows, Cols: f.Cols, GroupSize: f.GroupSize, rowBytes: f.rowBytes, scale: f.scale}
	err := b.d.do(func() error {
		var err error
		if fused.data, err = b.d.alloc(int64(rows*f.rowBytes), MemWeights); err != nil {
			return err
		}
		if f.scales.Ptr() != 0 {
			if fused.scales, err = b.d.alloc(int64(rows*ng*2), MemWeights); err != nil {
				b.d.freeMatrix(fused)
				return err
			}
		}
		if f.mins.Ptr() != 0 {
			if fused.mins, err = b.d.alloc(int64(rows*ng*2), MemWeights); err != nil {
				b.d.freeMatrix(fused)
				return err
			}
		}
		if f.Format.Spec().TensorScale {
			rs := make([]float32, 0, rows)
			for _, p := range ps {
				for range p.m.Rows {
					rs = append(rs, p.m.scale)
				}
			}
			if fused.rowScale, err = b.d.uploadNew(bytesOf(rs), 0, MemWeights); err != nil {
				b.d.freeMatrix(fused)
				return err
			}
			fused.scaleSz += int64(4 * rows)
		}
		r0 := 0
		for _, p := range ps {
			m := p.m
			for _, c := range []struct {
				dst, src Buffer
				per      int
			}{{fused.data, m.data, f.rowBytes}, {fused.scales, m.scales, ng * 2}, {fused.mins, m.mins, ng * 2}} {
				if c.src.Ptr() == 0 {
					continue
				}
				n := int64(m.Rows * c.per)
				if err := b.d.copyDtoD(c.dst.Slice(int64(r0*c.per), n), c.src, n); err != nil {
					b.d.freeMatrix(fused)
					return err
				}
			}
			r0 += m.Rows
		}
		if err := b.d.sync(); err != nil {
			b.d.freeMatrix(fused)
			return err
		}
		// The parts become views; their own memory goes back to the pool.
		r0 = 0
		for i, p := range ps {
			m := p.m
			v := &Matrix{Format: m.Format, Rows: m.Rows, Cols: m.Cols, GroupSize: m.GroupSize, rowBytes: m.rowBytes,
				scale: m.scale, packed: m.packed, scaleSz: m.scaleSz,
				data: fused.data.Slice(int64(r0*f.rowBytes), int64(m.Rows*f.rowBytes))}
			if fused.scales.Ptr() != 0 {
				v.scales = fused.scales.Slice(int64(r0*ng*2), int64(m.Rows*ng*2))
			}
			if fused.mins.Ptr() != 0 {
				v.mins = fused.mins.Slice(int64(r0*ng*2), int64(m.Rows*ng*2))
			}
			b.d.freeMatrix(m)
			p.m, p.join, p.part = v, fused, i
			fused.packed += m.packed
			fused.scaleSz += m.scaleSz
			r0 += m.Rows
		}
		return nil
	})
	if err != nil {
		return // the parts are unchanged and used on their own
	}
	b.joined = append(b.joined, fused)
}
