package gpu

import (
	"fmt"

	"lowbit/model"
	"lowbit/quantize"
)

// Backend runs the model's forward pass (model.Backend) on a Device: every
// weight uploaded once, the KV cache allocated once, activations in device
// buffers, every operation queued on the device's stream. Only Read copies
// back. Operations are held until a result is needed (Read, Argmax, TopK,
// Err) and then handed to the device thread together: a decode step is one
// hand-off to that thread, not one an operation. Errors are sticky: the
// first failure of a queued operation is kept and returned from Read and
// Err, and later operations are skipped.
//
// A decode step (one token) can be recorded as a CUDA graph and replayed
// (ReplayStep, model.StepReplayer): the step's token id and position live
// in device memory, written by SetStep, so the graph is the same for every
// token.
type Backend struct {
	d *Device

	mats   map[*model.Weight]*gpuMat
	bufs   []Buffer
	caches []*gpuCache
	// tok and pos hold the step's token ids and the positions of its
	// tokens (int32, maxStep of each), the two halves of step.
	step, tok, pos Buffer
	maxStep        int
	n              int // tokens of the current step
	first          int // position of the step's first token
	// i8 holds int8 activations (maxStep rows of whole blocks) per width
	// (tq2 weights); scale their scales, one per token.
	i8    map[int]Buffer
	scale Buffer

	idx  Buffer // argmax's result
	topk Buffer // TopK's results (kept for the next step)

	fused []*Matrix // joined weights (Fuse); parts are views into them

	// queue holds the operations not yet handed to the device thread.
	queue []func() error

	steps map[any]*stepGraph
	// skip, normed and gatedLast: LOWBIT_SKIP's kernels, the count of
	// normed products in the step so far and whether the last product
	// had a gated output (skip.go, profiling only).
	skip      map[string]bool
	normed    int
	gatedLast bool
	// chain is the decode step ChainGreedy queued ahead (chain.go);
	// noChain turns chaining off (tests compare the two).
	chain   *chainedStep
	running *chainedStep // the chained step Chained found queued, until ChainGreedy
	noChain bool
	// noGraphs runs every step directly (tests compare the two).
	noGraphs bool
	err      error
}

// gpuMat is a weight on the device; w is kept so that an embedding table
// in a format the embed kernels do not read can be widened once.
type gpuMat struct {
	m     *Matrix
	w     *model.Weight
	table *Matrix // f32 copy of an embedding table in another format
	// view: m lies inside a fused matrix (Fuse), which owns the memory.
	view bool
}

// gpuBuf is a device activation buffer of n float32 values.
type gpuBuf struct {
	b Buffer
	n int
}

func (b gpuBuf) Len() int { return b.n }

// gpuCache is a KV cache: per layer [positions, kvDim] keys and values.
type gpuCache struct {
	k, v      []Buffer
	all       Buffer
	positions int
	kvDim     int
	// dec is the decode attention's plan for this cache (made on first
	// use; nil with decErr when attn_decode does not take the layout);
	// rope its rotation table (ropeTable) for the cache's positions.
	dec    *attnDecode
	decErr error
	tried  bool
	rope   Buffer
}

// stepGraph is a decode step: run directly once (lazy preparations happen
// outside any capture), captured the second time, replayed afterwards.
type stepGraph struct {
	runs int
	g    *Graph
	// enqueue queues the step (ReplayStep's, the latest call's); chain is
	// the step captured again with the argmax of its logits at chainSrc
	// after it (ChainGreedy, chain.go), tried once.
	enqueue    func() error
	chain      *Graph
	chainSrc   Buffer
	chainN     int
	chainTried bool
}

// NewBackend makes a model backend on d for steps of at most maxStep
// tokens (the session's batch; 0: 512).
func NewBackend(d *Device, maxStep int) (*Backend, error) {
	if maxStep <= 0 {
		maxStep = 512
	}
	b := &Backend{d: d, mats: map[*model.Weight]*gpuMat{}, i8: map[int]Buffer{}, steps: map[any]*stepGraph{}, maxStep: maxStep, skip: d.exp.skip}
	err := d.do(func() error {
		var err error
		if b.step, err = d.alloc(int64(8*maxStep), MemScratch); err != nil {
			return err
		}
		b.tok, b.pos = b.step.Slice(0, int64(4*maxStep)), b.step.Slice(int64(4*maxStep), int64(4*maxStep))
		if b.scale, err = d.alloc(int64(4*maxStep), MemScratch); err != nil {
			return err
		}
		b.idx, err = d.alloc(4, MemScratch)
		return err
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("gpu: backend: %w", err)
	}
	return b, nil
}

// Device is the GPU the backend runs on.
func (b *Backend) Device() *Device { return b.d }

// Close frees the backend's weights, buffers, caches and graphs (the
// Device stays open).
func (b *Backend) Close() {
	b.queue = nil
	b.d.do(func() error {
		for _, s := range b.steps {
			if s.g != nil {
				s.g.Destroy()
			}
			if s.chain != nil {
				s.chain.Destroy()
			}
		}
		for _, m := range b.fused {
			b.d.freeMatrix(m)
		}
		for _, m := range b.mats {
			if !m.view {
				b.d.freeMatrix(m.m)
			}
			if m.table != nil {
				b.d.freeMatrix(m.table)
			}
		}
		for _, c := range b.caches {
			b.d.free(c.all)
			if c.dec != nil {
				b.d.free(c.dec.part)
				b.d.free(c.dec.count)
			}
			if c.rope.Ptr() != 0 {
				b.d.free(c.rope)
			}
		}
		for _, x := range append(b.bufs, b.step, b.scale, b.idx, b.topk) {
			if x.Ptr() != 0 {
				b.d.free(x)
			}
		}
		for _, x := range b.i8 {
			b.d.free(x)
		}
		return nil
	})
	b.steps, b.mats, b.caches, b.bufs, b.i8, b.fused = map[any]*stepGraph{}, map[*model.Weight]*gpuMat{}, nil, nil, map[int]Buffer{}, nil
	b.step, b.tok, b.pos, b.scale, b.idx = Buffer{}, Buffer{}, Buffer{}, Buffer{}, Buffer{}
}

// Name implements model.Backend.
func (b *Backend) Name() string { return "cuda" }

// WeightBytes is what one pass over every uploaded weight reads (packed
// codes plus scales), the numerator of decode's achieved bandwidth.
func (b *Backend) WeightBytes() int64 {
	var n int64
	for _, m := range b.mats {
		n += m.m.Bytes()
	}
	return n
}

// Upload implements model.Backend: float weights as f32, or f16 where
// marked Half (rows padded to whole 32-weight blocks), quantized ones
// packed as they are. A weight uploaded twice (a tied output head) is
// stored once.
func (b *Backend) Upload(w *model.Weight) (model.Mat, error) {
	if w == nil {
		return nil, fmt.Errorf("gpu: upload of a nil weight")
	}
	if m, ok := b.mats[w]; ok {
		return m, nil
	}
	b.flush()
	var m *Matrix
	var err error
	switch {
	case w.Q != nil:
		m, err = b.d.Upload(w.Q)
	case w.Half:
		m, err = b.d.UploadFloat(quantize.F16, w.F32, w.Rows, w.Cols)
	default:
		m, err = b.d.UploadFloat(quantize.F32, w.F32, w.Rows, w.Cols)
	}
	if err != nil {
		return nil, memError(err)
	}
	gm := &gpuMat{m: m, w: w}
	b.mats[w] = gm
	if m.Format.Spec().Int8Activations {
		if _, ok := b.i8[m.Cols]; !ok {
			err := b.d.do(func() error {
				q, err := b.d.alloc(int64(b.maxStep*m.blocks()*32), MemScratch)
				if err != nil {
					return err
				}
				b.i8[m.Cols] = q
				return b.d.memset(q, 0)
			})
			if err != nil {
				return nil, memError(err)
			}
		}
	}
	return gm, nil
}

// memError adds what to do to an out-of-memory error.
func memError(err error) error {
	if IsOutOfMemory(err) {
		return fmt.Errorf("%w (out of GPU memory: use fewer bits, a shorter --ctx, or --device cpu)", err)
	}
	return err
}

// Alloc implements model.Backend: a zeroed buffer, with 32 values of zero
// padding after its end.
func (b *Backend) Alloc(n int) (model.Buf, error) {
	if n < 0 {
		return nil, fmt.Errorf("gpu: cannot allocate %d values", n)
	}
	b.flush()
	var buf Buffer
	err := b.d.do(func() (err error) {
		if buf, err = b.d.alloc(int64(4*(n+32)), MemScratch); err != nil {
			return err
		}
		return b.d.memset(buf, 0)
	})
	if err != nil {
		return nil, memError(err)
	}
	b.bufs = append(b.bufs, buf)
	return gpuBuf{b: buf.Slice(0, int64(4*n)), n: n}, nil
}

// View implements model.Backend.
func (b *Backend) View(x model.Buf, off, n int) model.Buf {
	g := x.(gpuBuf)
	if off < 0 || n < 0 || off+n > g.n {
		b.fail(fmt.Errorf("gpu: view [%d, %d) of a buffer of %d", off, off+n, g.n))
		return gpuBuf{b: g.b.Slice(0, 0)}
	}
	return gpuBuf{b: g.b.Slice(int64(4*off), int64(4*n)), n: n}
}

// NewCache implements model.Backend: one allocation (kind MemKV) for every
// layer's keys and values.
func (b *Backend) NewCache(layers, positions, kvDim int) (model.KVCache, error) {
	if layers <= 0 || positions <= 0 || kvDim <= 0 {
		return nil, fmt.Errorf("gpu: bad cache geometry %d layers x %d positions x %d", layers, positions, kvDim)
	}
	b.flush()
	per := int64(positions) * int64(kvDim) * 4
	c := &gpuCache{positions: positions, kvDim: kvDim}
	err := b.d.do(func() (err error) {
		if c.all, err = b.d.alloc(2*int64(layers)*per, MemKV); err != nil {
			return err
		}
		return b.d.memset(c.all, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: KV cache of %d MiB: %w", 2*int64(layers)*per>>20, memError(err))
	}
	for l := 0; l < layers; l++ {
		c.k = append(c.k, c.all.Slice(int64(2*l)*per, per))
		c.v = append(c.v, c.all.Slice(int64(2*l+1)*per, per))
	}
	b.caches = append(b.caches, c)
	return c, nil
}

// SetStep implements model.Backend: the token ids and their positions go
// to device memory (a graph replayed afterwards reads them there).
func (b *Backend) SetStep(tokens []int, pos int) error {
	if len(tokens) == 0 || len(tokens) > b.maxStep {
		return fmt.Errorf("gpu: a step of %d tokens (1 to %d)", len(tokens), b.maxStep)
	}
	if b.err != nil {
		return b.err
	}
	// One copy: ids in the first half, positions in the second.
	buf := make([]int32, 2*b.maxStep)
	for i, t := range tokens {
		buf[i] = int32(t)
		buf[b.maxStep+i] = int32(pos + i)
	}
	b.n, b.first = len(tokens), pos
	b.normed, b.gatedLast = 0, false
	b.chain, b.running = nil, nil
	b.op("step", func() error { return b.d.htod(b.step, 0, bytesOf(buf)) })
	return nil
}

// fail records the first error.
func (b *Backend) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

// op queues fn for the device thread unless an earlier operation failed.
func (b *Backend) op(name string, fn func() error) {
	if b.err != nil {
		return
	}
	b.queue = append(b.queue, func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("gpu: %s: %w", name, err)
		}
		return nil
	})
}

// run hands the queued operations, then fn (when not nil), to the device
// thread in one call. The first failure stops the rest and is kept.
func (b *Backend) run(fn func() error) error {
	q := b.queue
	b.queue = nil
	if b.err != nil {
		return b.err
	}
	err := b.d.do(func() error {
		if err := runAll(q); err != nil {
			return err
		}
		if fn != nil {
			return fn()
		}
		return nil
	})
	b.fail(err)
	return err
}

// flush runs what is queued before a call that goes to the device
// thread by itself (uploads, allocations), so the stream keeps the order
// of the calls; a failure stays sticky (Err).
func (b *Backend) flush() { b.run(nil) }

// runAll runs queued operations in order, up to the first failure.
func runAll(q []func() error) error {
	for _, op := range q {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// Embed implements model.Backend. Tables in formats other than f32 and q8
// are widened to f32 on the device once, on first use; scale (Gemma's)
// multiplies the rows as they are copied.
func (b *Backend) Embed(dst model.Buf, table model.Mat, n int, scale float32) {
	t, out := table.(*gpuMat), dst.(gpuBuf)
	m := t.m
	if m.Format != quantize.F32 && m.Format != quantize.Q8 {
		if t.table == nil {
			rows, cols := t.w.Rows, t.w.Cols
			f := make([]float32, rows*cols)
			for r := 0; r < rows; r++ {
				t.w.Row(r, f[r*cols:(r+1)*cols])
			}
			b.flush()
			wide, err := b.d.UploadFloat(quantize.F32, f, rows, cols)
			if err != nil {
				b.fail(fmt.Errorf("gpu: embedding table as f32: %w", memError(err)))
				return
			}
			t.table = wide
		}
		m = t.table
	}
	b.op("embed", func() error { return b.d.embed(m, n, b.tok, out.b, scale) })
}

// RMSNorm implements model.Backend.
func (b *Backend) RMSNorm(dst, x model.Buf, w model.Mat, n, dim int, eps float32, plusOne bool) {
	add := float32(0)
	if plusOne {
		add = 1
	}
	b.op("rmsnorm", func() error {
		return b.d.rmsnorm(x.(gpuBuf).b, w.(*gpuMat).m.data, dst.(gpuBuf).b, n, dim, eps, add)
	})
}

// AddRMSNorm implements model.AddNormer: the residual add and the next
// RMSNorm in one kernel.
func (b *Backend) AddRMSNorm(dst, x, y model.Buf, w model.Mat, n, dim int, eps float32, plusOne bool) {
	add := float32(0)
	if plusOne {
		add = 1
	}
	b.op("add_rmsnorm", func() error {
		return b.d.addRMSNorm(x.(gpuBuf).b, y.(gpuBuf).b, w.(*gpuMat).m.data, dst.(gpuBuf).b, n, dim, eps, add)
	})
}

// MatMul implements model.Backend: one token through the matrix-vector
// kernels (tq2: activations quantized to int8 per token first, as the
// reference and the CPU do), several through the matrix-matrix kernel.
func (b *Backend) MatMul(dst, x model.Buf, w model.Mat, n int) {
	m, xb, yb := w.(*gpuMat).m, x.(gpuBuf).b, dst.(gpuBuf).b
	b.op("matmul "+string(m.Format), func() error {
		switch {
		case m.Format.Spec().Int8Activations:
			// Every token's activations quantized in one launch, then
			// the product of all tokens (cuBLAS's int8 GEMM from 32 on).
			q := b.i8[m.Cols]
			if err := b.d.quantizeI8N(xb, m.Cols, n, q, m.blocks()*32, b.scale); err != nil {
				return err
			}
			return b.d.matmulI8(m, n, q, m.blocks()*32, b.scale, yb)
		case n == 1 && m.Cols%32 == 0:
			return b.d.matvec(m, xb, yb)
		default:
			return b.d.matmul(m, xb, yb, n)
		}
	})
}

// Rope implements model.Backend.
func (b *Backend) Rope(x model.Buf, n, heads, headDim int, invFreq model.Mat) {
	xb, f := x.(gpuBuf).b, invFreq.(*gpuMat).m.data
	b.op("rope", func() error { return b.d.rope(xb, n, heads, headDim, b.pos, f) })
}

// Attention implements model.Backend: one token through attn_decode
// (split over the sequence), a prompt through attn_prefill (flash style)
// where its head size is built, else the general kernel, which has no
// sliding window.
func (b *Backend) Attention(out, q, k, v model.Buf, kc model.KVCache, layer, n int, a model.AttnShape) {
	b.attend(out, q, k, v, kc, layer, n, a, nil)
}

// RopeAttention implements model.RopeAttender: at decode the rotation of q
// and k happens inside attn_decode.
func (b *Backend) RopeAttention(out, q, k, v model.Buf, kc model.KVCache, layer int, a model.AttnShape, invFreq model.Mat) {
	b.attend(out, q, k, v, kc, layer, 1, a, invFreq.(*gpuMat))
}

// attend queues attention, rotating q and k first when rope is set.
func (b *Backend) attend(out, q, k, v model.Buf, kc model.KVCache, layer, n int, a model.AttnShape, rope *gpuMat) {
	c := kc.(*gpuCache)
	if n == 1 && b.skip["attn"] {
		return
	}
	if b.first+n > c.positions {
		b.fail(fmt.Errorf("gpu: attention: position %d beyond the cache's %d", b.first+n, c.positions))
		return
	}
	kvd := a.KVHeads * a.HeadDim
	ob, qb, kb, vb := out.(gpuBuf).b, q.(gpuBuf).b, k.(gpuBuf).b, v.(gpuBuf).b
	b.op("attention", func() error {
		if n == 1 {
			if !c.tried {
				c.tried = true
				c.dec, c.decErr = b.d.newAttnDecode(a.Heads, a.KVHeads, a.HeadDim, c.positions, a.Window)
			}
			if c.dec != nil && rope != nil && c.rope.Ptr() == 0 && rope.w != nil && len(rope.w.F32) == a.HeadDim/2 {
				var err error
				c.rope, err = b.d.uploadNew(bytesOf(ropeTable(rope.w.F32, c.positions)), 0, MemKV)
				if err != nil {
					return err
				}
			}
			if c.dec != nil && (rope == nil || c.rope.Ptr() != 0) {
				var cs Buffer
				if rope != nil {
					cs = c.rope
				}
				return c.dec.launch(b.d, qb, kb, vb, c.k[layer], c.v[layer], ob, a.Heads, a.KVHeads, b.pos, a.Scale, cs, a.Window)
			}
		}
		if rope != nil {
			if err := b.d.rope(qb, 1, a.Heads, a.HeadDim, b.pos, rope.m.data); err != nil {
				return err
			}
			if err := b.d.rope(kb, 1, a.KVHeads, a.HeadDim, b.pos, rope.m.data); err != nil {
				return err
			}
		}
		if n > 1 && hasAttnPrefill(a.HeadDim) {
			if err := b.d.kvStore(kb, vb, c.k[layer], c.v[layer], n, kvd, b.pos); err != nil {
				return err
			}
			return b.d.attnPrefill(qb, c.k[layer], c.v[layer], ob, n, a.Heads, a.KVHeads, a.HeadDim, c.positions, b.pos, a.Scale, a.Window)
		}
		if a.Window > 0 && b.first+n > a.Window {
			err := fmt.Errorf("gpu: attention: sliding window of %d positions with head size %d is not supported on the GPU (position %d)", a.Window, a.HeadDim, b.first+n)
			if c.decErr != nil {
				err = fmt.Errorf("%w: %w", err, c.decErr)
			}
			return err
		}
		if n == 1 { // the kernel stores k and v itself
			return b.d.attention(qb, c.k[layer], c.v[layer], ob, 1, a.Heads, a.KVHeads, a.HeadDim, c.positions, b.pos, a.Scale, kb, vb)
		}
		if err := b.d.kvStore(kb, vb, c.k[layer], c.v[layer], n, kvd, b.pos); err != nil {
			return err
		}
		return b.d.attention(qb, c.k[layer], c.v[layer], ob, n, a.Heads, a.KVHeads, a.HeadDim, c.positions, b.pos, a.Scale, Buffer{}, Buffer{})
	})
}

// GLU implements model.Backend.
func (b *Backend) GLU(dst, gate, up model.Buf, n int, act string) {
	g, err := gluOf(act)
	if err != nil {
		b.fail(err)
		return
	}
	b.op("glu", func() error { return b.d.glu(gate.(gpuBuf).b, up.(gpuBuf).b, dst.(gpuBuf).b, n, g) })
}

// FusedMatMul implements model.MatMulFuser with the shared-memory matvec
// kernels: they gate and normalize x as they stage it and add their
// output to dst; tq2 takes x as int8 there (its gate and norm first, both
// at once). Weights the kernels do not take (the plain kernel's formats,
// shapes not in whole chunks) report false.
func (b *Backend) FusedMatMul(dst, x model.Buf, w model.Mat, f model.Fusion) bool {
	m := w.(*gpuMat).m
	o := matvecOpts{act: -1, accum: f.Add, int8: m.Format.Spec().Int8Activations}
	if f.Act != "" {
		g, err := gluOf(f.Act)
		if err != nil {
			return false
		}
		o.act, o.x2 = int(g), f.Up.(gpuBuf).b
	}
	if f.OutAct != "" {
		g, err := gluOf(f.OutAct)
		if err != nil {
			return false
		}
		o.gated, o.outAct = true, g
	}
	if f.Norm != nil {
		n := f.Norm.(*gpuMat).m
		if n.Format != quantize.F32 || n.Cols != f.Dim || f.Dim != m.Cols {
			return false
		}
		o.norm, o.eps = n.data, f.Eps
		if f.PlusOne {
			o.wAdd = 1
		}
	}
	if b.err != nil {
		return false
	}
	if len(b.skip) > 0 && b.skip[b.productRole(m, f)] {
		return true
	}
	// The device thread is idle between hand-offs, so its settings can be
	// read here.
	if !b.d.canFuse(m, o) {
		return false
	}
	b.op("matmul "+string(m.Format)+" fused", func() error {
		return b.d.matvecWith(m, x.(gpuBuf).b, dst.(gpuBuf).b, o)
	})
	return true
}

// gluOf maps the model's activation name to the kernels' code.
func gluOf(act string) (GLU, error) {
	switch act {
	case "silu":
		return SwiGLU, nil
	case "gelu_tanh":
		return GeGLU, nil
	case "relu2":
		return ReLU2GLU, nil
	}
	return 0, fmt.Errorf("gpu: activation %q is not supported", act)
}

// Add implements model.Backend.
func (b *Backend) Add(dst, x model.Buf, n int) {
	b.op("add", func() error { return b.d.add(dst.(gpuBuf).b, x.(gpuBuf).b, n) })
}

// Read implements model.Backend.
func (b *Backend) Read(dst []float32, src model.Buf, off int) error {
	if b.err != nil {
		return b.err
	}
	s := src.(gpuBuf)
	if off < 0 || off+len(dst) > s.n {
		return fmt.Errorf("gpu: read of %d values at %d from a buffer of %d", len(dst), off, s.n)
	}
	return b.run(func() error { return b.d.dtoh(bytesOf(dst), s.b, int64(4*off)) })
}

// Argmax returns the index of the largest of the first n values of src,
// computed on the device: only the index comes back.
func (b *Backend) Argmax(src model.Buf, n int) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	var idx [1]int32
	err := b.run(func() error {
		if err := b.d.argmax(src.(gpuBuf).b, n, b.idx); err != nil {
			return err
		}
		return b.d.dtoh(bytesOf(idx[:]), b.idx, 0)
	})
	if err != nil {
		return 0, err
	}
	return int(idx[0]), nil
}

// Err implements model.Backend: the queued operations run first.
func (b *Backend) Err() error {
	return b.run(nil)
}

// ReplayStep implements model.StepReplayer: the first call for key runs
// enqueue directly, the second captures what it queues as a CUDA graph
// and launches it, later calls only launch the graph. enqueue must queue
// the same operations on the same buffers each time (the token and
// position come from SetStep's device memory).
func (b *Backend) ReplayStep(key any, enqueue func() error) error {
	if b.err != nil {
		return b.err
	}
	s := b.steps[key]
	if s == nil {
		s = &stepGraph{}
		b.steps[key] = s
	}
	s.runs++
	s.enqueue = enqueue
	if s.g != nil {
		b.op("graph", func() error { return b.d.launchGraph(s.g) })
		return nil
	}
	if s.runs == 1 || b.noGraphs {
		return enqueue()
	}
	g, err := b.captureStep(nil, enqueue, nil)
	if err != nil {
		return err
	}
	s.g = g
	b.op("graph", func() error { return b.d.launchGraph(g) })
	return nil
}

// captureStep records what enqueue queues, then what tail queues (on the
// device thread; nil: nothing), as a graph. The operations queued before
// (the step's ids) run before the capture begins, then pre (on the device
// thread; nil: nothing); the step's own operations run inside it, as the
// capture ends.
func (b *Backend) captureStep(pre, enqueue, tail func() error) (*Graph, error) {
	if err := b.run(func() error {
		if pre != nil {
			if err := pre(); err != nil {
				return err
			}
		}
		return b.d.beginCapture()
	}); err != nil {
		return nil, err
	}
	ferr := enqueue()
	q := b.queue
	b.queue = nil
	var g *Graph
	err := b.d.do(func() (err error) {
		if ferr == nil {
			ferr = runAll(q)
		}
		if ferr == nil && tail != nil {
			ferr = tail()
		}
		g, err = b.d.endCapture(ferr) // ends the capture whatever happened
		return err
	})
	if err != nil {
		b.fail(err)
		return nil, err
	}
	return g, nil
}

// Fuse implements model.Fuser: matrices of one format, width and group
// size are copied into one matrix of all their rows, and each part
// becomes a view into it, so no weight is held twice. tq2 parts, whose
// scale is per tensor, keep it as a float per row of the joined matrix.
// Parts whose rows or scales would not start on a 16-byte boundary are
// not fused.
func (b *Backend) Fuse(parts ...model.Mat) (model.Mat, bool) {
	if len(parts) < 2 {
		return nil, false
	}
	if b.flush(); b.err != nil {
		return nil, false
	}
	ps := make([]*gpuMat, len(parts))
	for i, p := range parts {
		g, ok := p.(*gpuMat)
		if !ok || g.view || g.table != nil {
			return nil, false
		}
		ps[i] = g
	}
	f := ps[0].m
	rows := 0
	for _, p := range ps {
		m := p.m
		if m.Format != f.Format || m.Cols != f.Cols || m.GroupSize != f.GroupSize || m.rowBytes != f.rowBytes ||
			(m.scales.Ptr() == 0) != (f.scales.Ptr() == 0) || (m.mins.Ptr() == 0) != (f.mins.Ptr() == 0) {
			return nil, false
		}
		if (rows*f.rowBytes)%16 != 0 || (rows*f.groups()*2)%16 != 0 {
			return nil, false
		}
		rows += m.Rows
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
		for _, p := range ps {
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
			p.m, p.view = v, true
			fused.packed += m.packed
			fused.scaleSz += m.scaleSz
			r0 += m.Rows
		}
		return nil
	})
	if err != nil {
		return nil, false // the parts are unchanged and used on their own
	}
	b.fused = append(b.fused, fused)
	return &gpuMat{m: fused, view: true}, true
}
