package gpu

import (
	"context"
	"fmt"

	"lowbit/model"
	"lowbit/quantize"
)

// Backend runs the model's forward pass (model.Backend) on a Device: every
// weight uploaded once, the KV cache allocated once, activations in device
// buffers, every operation queued on the device's stream. Operations are
// held until a result is needed (the end of a Step, Read) and then handed
// to the device thread together: a decode step is one hand-off to that
// thread, not one an operation. Errors are sticky: the first failure of a
// queued operation is kept and returned from Step and Read, and later
// operations are skipped.
//
// How it runs what the model asks is its own affair (gpu/README.md):
//   - Linear folds the norm of its input and the residual add into the
//     decode products (the shared-memory matvec kernels), runs a group
//     uploaded together (q/k/v, gate/up) as one product over the joined
//     matrix, and writes the MLP's act(gate) * up from that product
//     directly; elsewhere it runs a norm, the products and an add, holding
//     the add back to join it with the next norm (add_rmsnorm).
//   - Attention rotates q and k inside the decode attention kernel.
//   - A decode step (one token, a model.Step with a Key) is recorded once
//     as a CUDA graph and replayed; its token and position live in device
//     memory, so the graph is the same for every token. A greedy step
//     queues the next step on its own argmax before the id comes back
//     (chain.go).
type Backend struct {
	d *Device

	// The handles' objects: mats[id-1], bufs[id], caches[id].
	mats     []*gpuMat
	byWeight map[*model.Weight]int
	bufs     []gpuBuf
	caches   []*gpuCache
	// joined are the matrices of groups uploaded together; their parts
	// are views into them.
	joined []*Matrix
	// scratch are the backend's own buffers (0: the normed input; 1: a
	// product waiting for its activation or norm; 2: a product waiting for
	// its add; 3, 4: normed q and k): grown, never shrunk, and the
	// replaced ones kept until Close, as recorded graphs read them.
	scratch [5]Buffer
	retired []Buffer
	// biases are joined q/k/v biases (jointBias), by their first part.
	biases map[uint64]Buffer

	// tok, pos and slots hold the step's token ids, the positions of its
	// tokens and their sequences' cache slots (int32, maxStep of each),
	// the three thirds of step.
	step, tok, pos, slots Buffer
	// batchDirect says a step of several decode tokens ran attention one
	// sequence at a time (a head layout attn_decode does not take): such
	// steps then run directly, as a graph would keep their slots.
	batchDirect bool
	maxStep     int
	n           int // tokens of the current step
	first       int // position of the step's first token
	slot        int // cache slot of the step's sequence
	// seqs are the step's sequences where it has several (their tokens'
	// rows in order); nil for one.
	seqs []stepSeq
	// i8 holds int8 activations (maxStep rows of whole blocks) per width
	// (tq2 weights); scale their scales, one per token.
	i8    map[int]Buffer
	scale Buffer

	idx   Buffer // argmax's result
	topk  Buffer // top-k's results (kept for the next step)
	draws drawState

	// pending is a product waiting to be added to its destination (held
	// in scratch[2]), so the add joins the next norm of that buffer.
	pending *pendingAdd

	// queue holds the operations not yet handed to the device thread.
	queue []func() error

	steps map[any]*stepGraph
	// skip are LOWBIT_SKIP's kernels (skip.go, profiling only).
	skip map[string]bool
	// chain is the decode step chainGreedy queued ahead (chain.go);
	// noChain turns chaining off (tests compare the two).
	chain   *chainedStep
	running *chainedStep // the chained step chained found queued, until chainGreedy
	noChain bool
	// noGraphs runs every step directly (tests compare the two).
	noGraphs bool
	err      error
}

// gpuMat is a weight on the device; w is kept so that an embedding table
// in a format the embed kernels do not read can be widened once, and a
// rotation's frequencies made into a table.
type gpuMat struct {
	m     *Matrix
	w     *model.Weight
	table *Matrix // f32 copy of an embedding table in another format
	// join is the matrix m lies in (a group uploaded together), which
	// owns the memory; part is m's place among its parts.
	join *Matrix
	part int
}

// gpuBuf is a device activation buffer of n float32 values.
type gpuBuf struct {
	b Buffer
	n int
}

// pendingAdd is a product in scratch[2] still to be added to dst.
type pendingAdd struct {
	dst model.Buf
	src Buffer
}

// gpuCache is a KV cache: per layer and slot [positions, kvDim] keys and
// values (and a q8 cache's scales).
type gpuCache struct {
	shape model.CacheShape
	rows  []kvRows // [layer*slots + slot]
	// stride is the bytes from one slot's rows of a layer to the next's.
	stride int64
	all    Buffer
	// dec are the decode attention's plans for this cache by window (made
	// on first use; nil where attn_decode does not take the layout); rope
	// the rotation tables (ropeTable) for the cache's positions, by
	// rotation.
	dec  map[decodeKey]*attnDecode
	rope map[*gpuMat]Buffer
}

// stepGraph is a decode step: run directly once (lazy preparations happen
// outside any capture), captured the second time, replayed afterwards.
type stepGraph struct {
	runs int
	g    *Graph
	// pass queues the step (the latest call's); chain is the step
	// captured again with the argmax of its logits at chainSrc after it
	// (chainGreedy, chain.go), tried once.
	pass       func() error
	chain      *Graph
	chainSrc   Buffer
	chainN     int
	chainTried bool
	// drawChain is the step captured with a draw of its logits at
	// drawSrc after it (chainDraw, draw.go), for drawPlan and drawOpts.
	drawChain *Graph
	drawSrc   Buffer
	drawN     int
	drawPlan  drawPlan
	drawOpts  model.SamplerOptions
}

// NewBackend makes a model backend on d for steps of at most maxStep
// tokens (the session's batch; 0: 512).
func NewBackend(d *Device, maxStep int) (*Backend, error) {
	if maxStep <= 0 {
		maxStep = 512
	}
	b := &Backend{d: d, byWeight: map[*model.Weight]int{}, i8: map[int]Buffer{}, biases: map[uint64]Buffer{}, steps: map[any]*stepGraph{}, maxStep: maxStep, skip: d.exp.skip}
	err := d.do(func() error {
		var err error
		if b.step, err = d.alloc(int64(12*maxStep), MemScratch); err != nil {
			return err
		}
		b.tok, b.pos = b.step.Slice(0, int64(4*maxStep)), b.step.Slice(int64(4*maxStep), int64(4*maxStep))
		b.slots = b.step.Slice(int64(8*maxStep), int64(4*maxStep))
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
			if s.drawChain != nil {
				s.drawChain.Destroy()
			}
		}
		for _, m := range b.joined {
			b.d.freeMatrix(m)
		}
		for _, m := range b.mats {
			if m.join == nil {
				b.d.freeMatrix(m.m)
			}
			if m.table != nil {
				b.d.freeMatrix(m.table)
			}
		}
		for _, c := range b.caches {
			b.d.free(c.all)
			for _, p := range c.dec {
				if p != nil {
					b.d.free(p.part)
					b.d.free(p.count)
				}
			}
			for _, t := range c.rope {
				b.d.free(t)
			}
		}
		var all []Buffer
		for _, x := range b.bufs {
			all = append(all, x.b)
		}
		all = append(append(append(all, b.scratch[:]...), b.retired...), b.step, b.scale, b.idx, b.topk,
			b.draws.cands, b.draws.id, b.draws.plog, b.draws.state)
		for _, x := range b.biases {
			all = append(all, x)
		}
		for _, x := range all {
			if x.Ptr() != 0 {
				b.d.free(x)
			}
		}
		for _, x := range b.i8 {
			b.d.free(x)
		}
		return nil
	})
	b.steps, b.mats, b.byWeight, b.caches, b.bufs, b.i8, b.joined = map[any]*stepGraph{}, nil, map[*model.Weight]int{}, nil, nil, map[int]Buffer{}, nil
	b.scratch, b.retired, b.biases = [5]Buffer{}, nil, map[uint64]Buffer{}
	b.step, b.tok, b.pos, b.scale, b.idx, b.topk = Buffer{}, Buffer{}, Buffer{}, Buffer{}, Buffer{}, Buffer{}
}

// Name implements model.Backend.
func (b *Backend) Name() string { return "cuda" }

// Available implements model.Backend: the device's free memory plus what
// the memory pool holds freed for reuse.
func (b *Backend) Available() int64 {
	b.flush()
	free, _, err := b.d.MemInfo()
	if err != nil {
		return 0
	}
	return free + b.d.MemStats().Cached
}

// WeightBytes is what one pass over every uploaded weight reads (packed
// codes plus scales), the numerator of decode's achieved bandwidth.
func (b *Backend) WeightBytes() int64 {
	var n int64
	for _, m := range b.mats {
		n += m.m.Bytes()
	}
	return n
}

// fail records the first error.
func (b *Backend) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

// mat is the weight m names, or nil (and a recorded error) for a handle
// this backend did not make.
func (b *Backend) mat(m model.Mat) *gpuMat {
	if m.ID() < 1 || m.ID() > len(b.mats) {
		b.fail(fmt.Errorf("gpu: weight %d was not uploaded here", m.ID()))
		return nil
	}
	return b.mats[m.ID()-1]
}

// buf is the device memory of x, or an empty Buffer (and a recorded
// error) for a handle this backend did not make.
func (b *Backend) buf(x model.Buf) Buffer {
	if x.ID() < 0 || x.ID() >= len(b.bufs) || x.Off()+x.Len() > b.bufs[x.ID()].n {
		b.fail(fmt.Errorf("gpu: buffer %d [%d, %d) was not allocated here", x.ID(), x.Off(), x.Off()+x.Len()))
		return Buffer{}
	}
	return b.bufs[x.ID()].b.Slice(int64(4*x.Off()), int64(4*x.Len()))
}

// cache is the cache c names, or nil (and a recorded error).
func (b *Backend) cache(c model.Cache) *gpuCache {
	if c.ID() < 0 || c.ID() >= len(b.caches) {
		b.fail(fmt.Errorf("gpu: cache %d was not made here", c.ID()))
		return nil
	}
	return b.caches[c.ID()]
}

// Upload implements model.Backend: float weights as f32, or f16 where
// marked Half (rows padded to whole 32-weight blocks), quantized ones
// packed as they are. A weight uploaded twice (a tied output head) is
// stored once. A group is joined into one matrix where its parts allow
// (join), so one product reads them all.
func (b *Backend) Upload(group ...*model.Weight) ([]model.Mat, error) {
	out := make([]model.Mat, len(group))
	fresh := true
	for i, w := range group {
		if w == nil {
			return nil, fmt.Errorf("gpu: upload of a nil weight")
		}
		id, ok := b.byWeight[w]
		if !ok {
			var err error
			if id, err = b.upload(w); err != nil {
				return nil, err
			}
		} else {
			fresh = false
		}
		out[i] = model.MakeMat(id, w.Rows, w.Cols)
	}
	if len(group) > 1 && fresh {
		b.join(out)
	}
	return out, nil
}

// upload puts one weight on the device and returns its id.
func (b *Backend) upload(w *model.Weight) (int, error) {
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
		return 0, memError(err)
	}
	b.mats = append(b.mats, &gpuMat{m: m, w: w})
	id := len(b.mats)
	b.byWeight[w] = id
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
				return 0, memError(err)
			}
		}
	}
	return id, nil
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
		return model.Buf{}, fmt.Errorf("gpu: cannot allocate %d values", n)
	}
	buf, err := b.alloc(n)
	if err != nil {
		return model.Buf{}, err
	}
	b.bufs = append(b.bufs, gpuBuf{b: buf.Slice(0, int64(4*n)), n: n})
	return model.MakeBuf(len(b.bufs)-1, n), nil
}

// alloc is a zeroed device buffer of n float32 values and 32 of padding.
func (b *Backend) alloc(n int) (Buffer, error) {
	b.flush()
	var buf Buffer
	err := b.d.do(func() (err error) {
		if buf, err = b.d.alloc(int64(4*(n+32)), MemScratch); err != nil {
			return err
		}
		return b.d.memset(buf, 0)
	})
	return buf, memError(err)
}

// scratchBuf is scratch buffer i, at least n values (grown on the host
// side of the queue; a step that was recorded grew it when it ran first).
func (b *Backend) scratchBuf(i, n int) Buffer {
	if b.scratch[i].Size() >= int64(4*n) {
		return b.scratch[i].Slice(0, int64(4*n))
	}
	buf, err := b.alloc(max(n, 1024))
	if err != nil {
		b.fail(fmt.Errorf("gpu: scratch of %d values: %w", n, err))
		return Buffer{}
	}
	if b.scratch[i].Ptr() != 0 {
		b.retired = append(b.retired, b.scratch[i])
	}
	b.scratch[i] = buf.Slice(0, int64(4*max(n, 1024)))
	return b.scratch[i].Slice(0, int64(4*n))
}

// NewCache implements model.Backend: one allocation (kind MemKV) for every
// layer's and slot's keys and values.
func (b *Backend) NewCache(s model.CacheShape) (model.Cache, error) {
	if s.Layers <= 0 || s.Slots <= 0 || s.Positions <= 0 || s.KVDim <= 0 {
		return model.Cache{}, fmt.Errorf("gpu: bad cache geometry %d layers x %d slots x %d positions x %d", s.Layers, s.Slots, s.Positions, s.KVDim)
	}
	b.flush()
	hd := s.HeadDim
	if hd <= 0 || s.KVDim%hd != 0 {
		hd = s.KVDim
	}
	// Each part's keys, values, then (q8) their scales, every part 256-byte aligned.
	elem := map[model.KVType]int64{model.KVF32: 4, model.KVF16: 2, model.KVQ8: 1}[s.Type]
	if elem == 0 {
		return model.Cache{}, fmt.Errorf("gpu: KV cache type %v is not supported", s.Type)
	}
	align := func(n int64) int64 { return (n + 255) &^ 255 }
	vals := align(int64(s.Positions) * int64(s.KVDim) * elem)
	var scales int64
	if s.Type == model.KVQ8 {
		scales = align(int64(s.Positions) * int64(s.KVDim/hd) * 4)
	}
	per := 2 * (vals + scales)
	parts := int64(s.Layers) * int64(s.Slots)
	c := &gpuCache{shape: s, stride: per, dec: map[decodeKey]*attnDecode{}, rope: map[*gpuMat]Buffer{}}
	err := b.d.do(func() (err error) {
		if c.all, err = b.d.alloc(parts*per, MemKV); err != nil {
			return err
		}
		return b.d.memset(c.all, 0)
	})
	if err != nil {
		return model.Cache{}, fmt.Errorf("gpu: KV cache (%s) of %d MiB: %w", s.Type, parts*per>>20, memError(err))
	}
	for i := range parts {
		at := i * per
		r := kvRows{k: c.all.Slice(at, vals), v: c.all.Slice(at+vals, vals), typ: s.Type}
		if scales > 0 {
			r.ks, r.vs = c.all.Slice(at+2*vals, scales), c.all.Slice(at+2*vals+scales, scales)
		}
		c.rows = append(c.rows, r)
	}
	b.caches = append(b.caches, c)
	return model.MakeCache(len(b.caches) - 1), nil
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
// of the calls; a failure stays sticky.
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

// Step implements model.Backend. One sequence a step: its token ids and
// positions go to device memory, then the pass runs, directly or as a
// replayed graph (a decode step with a key), or not at all when the
// greedy step before queued it already; then what st.Want asks is found
// where the logits are.
func (b *Backend) Step(ctx context.Context, st *model.Step, pass func() error) (*model.StepResult, error) {
	if b.err != nil {
		return nil, b.err
	}
	c := b.cache(st.Cache)
	if c == nil {
		return nil, b.err
	}
	if err := st.Check(c.shape); err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	if st.Tokens() > b.maxStep {
		return nil, fmt.Errorf("gpu: a step of %d tokens (at most %d)", st.Tokens(), b.maxStep)
	}
	seq := st.Seqs[0]
	var logits Buffer
	if st.Logits.Len() > 0 {
		if logits = b.buf(st.Logits); b.err != nil {
			return nil, b.err
		}
	}
	full := func() error {
		if err := pass(); err != nil {
			return err
		}
		b.settle()
		return nil
	}
	// A step of decode tokens (one each) is a graph: a batch's attention
	// reads each sequence's slot from device memory, as it reads its
	// position; a batch whose attention could not (batchDirect) runs
	// directly, as a graph would keep its slots. Only one sequence's
	// steps chain.
	graph := st.Key != nil && !b.noGraphs && oneEach(st.Seqs) && (len(st.Seqs) == 1 || !b.batchDirect)
	decode := graph && len(st.Seqs) == 1
	// A decode step's graph is one of two: decode attention split for
	// short or for long contexts (attnLongFrom).
	key := st.Key
	if decode && longAt(seq.Pos) {
		key = longStep{st.Key}
	}
	if !decode || !b.chained(key, seq.Tokens, seq.Pos, st.Want) {
		b.setSteps(st.Seqs)
		var err error
		if graph {
			if len(st.Seqs) > 1 {
				// one graph for each number of sequences
				key = batchGraph{st.Key, len(st.Seqs)}
			}
			err = b.replay(key, full)
		} else {
			err = full()
		}
		if err != nil {
			return nil, err
		}
	}
	res := &model.StepResult{}
	w, vocab := st.Want, st.Vocab
	if st.Logits.Len() == 0 || w == (model.Want{}) {
		return res, b.run(nil)
	}
	rows := st.Logits.Len() / vocab
	for r := range rows {
		row := logits.Slice(int64(4*r*vocab), int64(4*vocab))
		if w.TopK > 0 {
			cands, err := b.topKOf(row, vocab, w.TopK, w.Temp)
			if err != nil {
				return nil, err
			}
			res.Cands = append(res.Cands, cands)
		}
		if d := w.Draw; d != nil && !w.Logits && rows == 1 {
			if p, ok := planDraw(d, vocab); ok {
				var id int
				var err error
				if decode && seq.Pos+2 <= c.shape.Positions {
					// The next step, on this id, is queued before it comes back.
					id, err = b.chainDraw(key, seq, row, vocab, d, p)
				} else {
					id, err = b.drawOnce(row, vocab, d, p)
				}
				if err != nil {
					return nil, err
				}
				if id >= 0 {
					res.Next, res.Drawn = append(res.Next, id), true
				}
			}
			continue
		}
		if w.Greedy && !w.Logits && rows == 1 {
			var id int
			var err error
			if decode && w.TopK == 0 && seq.Pos+2 <= c.shape.Positions {
				// The next step, on this id, is queued before it comes back.
				id, err = b.chainGreedy(key, row, vocab)
			} else {
				id, err = b.argmax(row, vocab)
			}
			if err != nil {
				return nil, err
			}
			res.Next = append(res.Next, id)
		}
	}
	if w.Greedy && !w.Logits && rows > 1 {
		ids, err := b.argmaxRows(logits, rows, vocab)
		if err != nil {
			return nil, err
		}
		res.Next = ids
	}
	if w.Logits {
		res.Logits = make([]float32, rows*vocab)
		if err := b.run(func() error { return b.d.dtoh(bytesOf(res.Logits), logits, 0) }); err != nil {
			return nil, err
		}
		if w.Greedy {
			for r := range rows {
				res.Next = append(res.Next, model.Argmax(res.Logits[r*vocab:(r+1)*vocab]))
			}
		}
	}
	return res, b.run(nil)
}

// longStep names the graph of a decode step at a long position.
type longStep struct{ key any }

// batchGraph names the graph of a batch step of n decode tokens.
type batchGraph struct {
	key any
	n   int
}

// oneEach says every sequence of a step has one token.
func oneEach(seqs []model.Seq) bool {
	for _, s := range seqs {
		if len(s.Tokens) != 1 {
			return false
		}
	}
	return true
}

// stepSeq is one sequence of a step of several: its tokens' first row
// and count, first position and cache slot.
type stepSeq struct{ row, n, pos, slot int }

// setStep queues the copy of the step's token ids and positions to
// device memory (a graph replayed afterwards reads them there).
func (b *Backend) setStep(s model.Seq) { b.setSteps([]model.Seq{s}) }

// setSteps is setStep for the sequences of a step, their tokens' rows one
// after the other.
func (b *Backend) setSteps(seqs []model.Seq) {
	// One copy: ids, positions, slots.
	buf := make([]int32, 3*b.maxStep)
	b.n, b.seqs = 0, nil
	for _, s := range seqs {
		for i, t := range s.Tokens {
			buf[b.n+i] = int32(t)
			buf[b.maxStep+b.n+i] = int32(s.Pos + i)
			buf[2*b.maxStep+b.n+i] = int32(s.Slot)
		}
		if len(seqs) > 1 {
			b.seqs = append(b.seqs, stepSeq{row: b.n, n: len(s.Tokens), pos: s.Pos, slot: s.Slot})
		}
		b.n += len(s.Tokens)
	}
	b.first, b.slot = seqs[0].Pos, seqs[0].Slot
	b.chain, b.running = nil, nil
	b.op("step", func() error { return b.d.htod(b.step, 0, bytesOf(buf)) })
}

// Embed implements model.Backend. Tables in formats other than f32 and q8
// are widened to f32 on the device once, on first use; scale (Gemma's)
// multiplies the rows as they are copied.
func (b *Backend) Embed(dst model.Buf, table model.Mat, scale float32) {
	t, out := b.mat(table), b.buf(dst)
	if b.err != nil {
		return
	}
	if out.Size() < int64(4*b.n*t.w.Cols) {
		b.fail(fmt.Errorf("gpu: embed: %d tokens of %d values into %d", b.n, t.w.Cols, dst.Len()))
		return
	}
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
	n := b.n
	b.op("embed", func() error { return b.d.embed(m, n, b.tok, out, scale) })
}

// Attention implements model.Backend: q/k norms (into scratch), then one
// token through attn_decode (split over the sequence, the rotation
// inside), a prompt through rope and attn_prefill (flash style) where its
// head size is built, else the general kernel.
func (b *Backend) Attention(out, q, k, v model.Buf, kc model.Cache, layer int, a model.Attn) {
	c := b.cache(kc)
	ob, qb, kb, vb := b.buf(out), b.buf(q), b.buf(k), b.buf(v)
	var rope, qn, kn *gpuMat
	if a.Rope.Valid() {
		rope = b.mat(a.Rope)
	}
	if a.QNorm.W.Valid() {
		qn, kn = b.mat(a.QNorm.W), b.mat(a.KNorm.W)
	}
	if b.err != nil {
		return
	}
	b.settle()
	n := b.n
	kvd := a.KVHeads * a.HeadDim
	if layer < 0 || layer >= c.shape.Layers || kvd != c.shape.KVDim || q.Len() != n*a.Heads*a.HeadDim || k.Len() != n*kvd || v.Len() != n*kvd || out.Len() != q.Len() {
		b.fail(fmt.Errorf("gpu: attention: layer %d, %d tokens of %d/%d heads of %d do not fit the buffers or cache", layer, n, a.Heads, a.KVHeads, a.HeadDim))
		return
	}
	if rope != nil && (rope.w.Rows != 1 || rope.w.Cols != a.HeadDim) {
		b.fail(fmt.Errorf("gpu: attention: a rotation of [%d, %d] for heads of %d", rope.w.Rows, rope.w.Cols, a.HeadDim))
		return
	}
	if qn != nil {
		// Each head of q and k normed into scratch, which the attention
		// then reads (and stores k from).
		qs, ks := b.scratchBuf(3, q.Len()), b.scratchBuf(4, k.Len())
		qe, ke := a.QNorm.Eps, a.KNorm.Eps
		hd, qin, kin := a.HeadDim, qb, kb
		b.op("q/k norm", func() error {
			if err := b.d.rmsnorm(qin, qn.m.data, qs, n*a.Heads, hd, qe, 0); err != nil {
				return err
			}
			return b.d.rmsnorm(kin, kn.m.data, ks, n*a.KVHeads, hd, ke, 0)
		})
		qb, kb = qs, ks // (the closure above keeps the buffers it reads)
	}
	if n == 1 && b.skip["attn"] {
		return
	}
	slots, seqs, positions := c.shape.Slots, b.seqs, c.shape.Positions
	long, slot := seqs == nil && longAt(b.first), b.slot
	b.op("attention", func() error {
		if seqs == nil {
			return b.attend(c, a, rope, n, qb, kb, vb, ob, c.rows[layer*slots+slot], b.pos, long)
		}
		// Several sequences: rotated together, then each over its own
		// cache slot.
		if rope != nil {
			if err := b.d.rope(qb, n, a.Heads, a.HeadDim, b.pos, rope.m.data); err != nil {
				return err
			}
			if err := b.d.rope(kb, n, a.KVHeads, a.HeadDim, b.pos, rope.m.data); err != nil {
				return err
			}
		}
		qr, kr := int64(4*a.Heads*a.HeadDim), int64(4*kvd)
		dec := c.decode(b.d, a, positions, false)
		for i := 0; i < len(seqs); {
			sq := seqs[i]
			r, m := int64(sq.row), int64(sq.n)
			// A run of decode tokens: one launch, each over its own slot.
			z := 0
			for dec != nil && i+z < len(seqs) && seqs[i+z].n == 1 {
				z++
			}
			if z > 0 {
				if err := dec.launchBatch(b.d, qb.Slice(r*qr, int64(z)*qr), kb.Slice(r*kr, int64(z)*kr), vb.Slice(r*kr, int64(z)*kr), c.rows[layer*slots],
					ob.Slice(r*qr, int64(z)*qr), a.Heads, a.KVHeads, b.pos.Slice(4*r, 4*int64(z)), a.Scale, a.SoftCap, Buffer{}, a.Window,
					z, b.slots.Slice(4*r, 4*int64(z)), c.stride); err != nil {
					return err
				}
				i += z
				continue
			}
			if sq.n == 1 {
				b.batchDirect = true
			}
			if err := b.attend(c, a, nil, sq.n, qb.Slice(r*qr, m*qr), kb.Slice(r*kr, m*kr), vb.Slice(r*kr, m*kr), ob.Slice(r*qr, m*qr),
				c.rows[layer*slots+sq.slot], b.pos.Slice(4*r, 4*m), false); err != nil {
				return err
			}
			i++
		}
		return nil
	})
}

// attend queues attention for n tokens of one sequence (q, k, v and out
// its rows, pos their positions) over its cache rows: one token through
// attn_decode (split over the sequence, the rotation inside), a prompt
// through rope and attn_prefill (flash style) where its head size is
// built, else the general kernel. rope nil: q and k are rotated already
// (device thread).
func (b *Backend) attend(c *gpuCache, a model.Attn, rope *gpuMat, n int, qb, kb, vb, ob Buffer, rows kvRows, pos Buffer, long bool) error {
	positions := c.shape.Positions
	if n == 1 {
		dec := c.decode(b.d, a, positions, long)
		var cs Buffer
		var err error
		if dec != nil && rope != nil {
			if cs, err = c.ropeTable(b.d, rope, positions); err != nil {
				return err
			}
		}
		if dec != nil {
			return dec.launch(b.d, qb, kb, vb, rows, ob, a.Heads, a.KVHeads, pos, a.Scale, a.SoftCap, cs, a.Window)
		}
	}
	if rope != nil {
		if err := b.d.rope(qb, n, a.Heads, a.HeadDim, pos, rope.m.data); err != nil {
			return err
		}
		if err := b.d.rope(kb, n, a.KVHeads, a.HeadDim, pos, rope.m.data); err != nil {
			return err
		}
	}
	if n > 1 && hasAttnPrefill(a.HeadDim) {
		if err := b.d.kvStore(kb, vb, rows, n, a.KVHeads, a.HeadDim, pos); err != nil {
			return err
		}
		return b.d.attnPrefill(qb, rows, ob, n, a.Heads, a.KVHeads, a.HeadDim, positions, pos, a.Scale, a.SoftCap, a.Window)
	}
	if n == 1 { // the kernel stores k and v itself
		return b.d.attention(qb, rows, ob, 1, a.Heads, a.KVHeads, a.HeadDim, positions, pos, a.Scale, a.SoftCap, a.Window, kb, vb)
	}
	if err := b.d.kvStore(kb, vb, rows, n, a.KVHeads, a.HeadDim, pos); err != nil {
		return err
	}
	return b.d.attention(qb, rows, ob, n, a.Heads, a.KVHeads, a.HeadDim, positions, pos, a.Scale, a.SoftCap, a.Window, Buffer{}, Buffer{})
}

// decodeKey names a cache's attn_decode plans: by window, and for short
// or long contexts (attnLongFrom).
type decodeKey struct {
	window int
	long   bool
}

// decode is the cache's attn_decode plan for a's layout and window, for
// a token at a long position or not (made on first use), or nil where the
// kernel does not take it (device thread).
func (c *gpuCache) decode(d *Device, a model.Attn, positions int, long bool) *attnDecode {
	k := decodeKey{a.Window, long}
	p, ok := c.dec[k]
	if !ok {
		var err error
		if p, err = d.newAttnDecode(a.Heads, a.KVHeads, a.HeadDim, positions, a.Window, c.shape.Slots, c.shape.Type, long); err != nil {
			p = nil // the general kernel takes it
		}
		c.dec[k] = p
	}
	return p
}

// ropeTable is the cache's table of rope's rotation at every position
// (made on first use; device thread).
func (c *gpuCache) ropeTable(d *Device, rope *gpuMat, positions int) (Buffer, error) {
	if t, ok := c.rope[rope]; ok {
		return t, nil
	}
	t, err := d.uploadNew(bytesOf(ropeTable(rope.w.F32, positions)), 0, MemKV)
	if err != nil {
		return Buffer{}, err
	}
	c.rope[rope] = t
	return t, nil
}

// gluOf maps the model's activation to the kernels' code.
func gluOf(act model.Act) (GLU, error) {
	switch act {
	case model.SiLU:
		return SwiGLU, nil
	case model.GELUTanh:
		return GeGLU, nil
	case model.ReLU2:
		return ReLU2GLU, nil
	}
	return 0, fmt.Errorf("gpu: activation %d is not supported", act)
}

// settle queues the pending residual add, if any.
func (b *Backend) settle() {
	p := b.pending
	if p == nil {
		return
	}
	b.pending = nil
	dst := b.buf(p.dst)
	n := p.dst.Len()
	b.op("add", func() error { return b.d.add(dst, p.src, n) })
}

// Read implements model.Backend.
func (b *Backend) Read(dst []float32, src model.Buf) error {
	s := b.buf(src)
	if b.err != nil {
		return b.err
	}
	if len(dst) > src.Len() {
		return fmt.Errorf("gpu: read of %d values from a buffer of %d", len(dst), src.Len())
	}
	b.settle()
	return b.run(func() error { return b.d.dtoh(bytesOf(dst), s, 0) })
}

// argmax returns the index of the largest of the first n values of src,
// computed on the device: only the index comes back.
func (b *Backend) argmax(src Buffer, n int) (int, error) {
	var idx [1]int32
	err := b.run(func() error {
		if err := b.d.argmax(src, n, b.idx); err != nil {
			return err
		}
		return b.d.dtoh(bytesOf(idx[:]), b.idx, 0)
	})
	if err != nil {
		return 0, err
	}
	return int(idx[0]), nil
}

// argmaxRows is the argmax of each of rows rows of vocab logits: one
// launch a row, one copy back of all the ids.
func (b *Backend) argmaxRows(logits Buffer, rows, vocab int) ([]int, error) {
	raw := make([]int32, rows)
	err := b.run(func() error {
		if b.idx.Size() < int64(4*rows) {
			b.retired = append(b.retired, b.idx) // a recorded graph may read it
			var err error
			if b.idx, err = b.d.alloc(int64(4*rows), MemScratch); err != nil {
				return err
			}
		}
		for r := range rows {
			if err := b.d.argmax(logits.Slice(int64(4*r*vocab), int64(4*vocab)), vocab, b.idx.Slice(int64(4*r), 4)); err != nil {
				return err
			}
		}
		return b.d.dtoh(bytesOf(raw), b.idx, 0)
	})
	ids := make([]int, rows)
	for i, v := range raw {
		ids[i] = int(v)
	}
	return ids, err
}

// replay runs a decode step's pass: the first time for key directly, the
// second captured as a CUDA graph and launched, later only launched. The
// pass must queue the same operations on the same buffers each time (the
// token and position come from setStep's device memory), as model.Step's
// Key promises.
func (b *Backend) replay(key any, pass func() error) error {
	s := b.steps[key]
	if s == nil {
		s = &stepGraph{}
		b.steps[key] = s
	}
	s.runs++
	s.pass = pass
	if s.g != nil {
		b.op("graph", func() error { return b.d.launchGraph(s.g) })
		return nil
	}
	if s.runs == 1 {
		return pass()
	}
	g, err := b.captureStep(nil, pass, nil)
	if err != nil {
		return err
	}
	s.g = g
	b.op("graph", func() error { return b.d.launchGraph(g) })
	return nil
}

// captureStep records what pass queues, then what tail queues (on the
// device thread; nil: nothing), as a graph. The operations queued before
// (the step's ids) run before the capture begins, then pre (on the device
// thread; nil: nothing); the step's own operations run inside it, as the
// capture ends.
func (b *Backend) captureStep(pre, pass, tail func() error) (*Graph, error) {
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
	ferr := pass()
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
