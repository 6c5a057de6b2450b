package model

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"lowbit/quantize"
)

// CPU is the host backend: float32 activations in Go slices, kernels split
// across Workers goroutines, quantized weights multiplied on their packed
// bytes (cpu_quant.go, cpu_tq2.go, package quantize). It computes each
// operation plainly, one after the other, so it is the reference every
// other backend is held to and runs every path of the forward pass in CI:
// float32 arithmetic, sums of squares in float64. It holds what it hands
// out (weights, buffers, caches) until it is dropped, and is used by one
// goroutine at a time.
type CPU struct {
	// Workers is the number of goroutines a kernel uses (0: GOMAXPROCS).
	Workers int

	mats     []*cpuMat
	byWeight map[*Weight]int
	bufs     [][]float32
	caches   []*cpuCache

	// The step: each token's id, position and cache slot, and the number
	// of tokens of each sequence.
	tokens, pos, slot, seqLen []int
	// tmp are scratch rows for the normed input and unfused products.
	tmp [3][]float32
	err error
}

// NewCPU returns a CPU backend using workers goroutines (0: GOMAXPROCS).
func NewCPU(workers int) *CPU {
	return &CPU{Workers: workers}
}

// cpuCache holds keys and values, per layer and slot [positions, kvDim].
type cpuCache struct {
	shape CacheShape
	k, v  [][]float32 // [layer*slots + slot]
}

func (c *CPU) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Name implements Backend.
func (c *CPU) Name() string { return "cpu" }

// Available implements Backend: the kernel's estimate of the memory
// available (MemAvailable in /proc/meminfo), 0 where there is none.
func (c *CPU) Available() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && kb > 0 {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// Upload implements Backend: the weights' data is used where it is (q4
// and q8 scales are widened to float32 for the kernels of cpu_quant.go).
// The CPU gains nothing from joining a group's weights.
func (c *CPU) Upload(group ...*Weight) ([]Mat, error) {
	out := make([]Mat, len(group))
	for i, w := range group {
		if w == nil {
			return nil, fmt.Errorf("cpu: upload of a nil weight")
		}
		id, ok := c.byWeight[w]
		if !ok {
			if c.byWeight == nil {
				c.byWeight = map[*Weight]int{}
			}
			c.mats = append(c.mats, prepare(w))
			id = len(c.mats)
			c.byWeight[w] = id
		}
		out[i] = MakeMat(id, w.Rows, w.Cols)
	}
	return out, nil
}

// Alloc implements Backend.
func (c *CPU) Alloc(n int) (Buf, error) {
	if n < 0 {
		return Buf{}, fmt.Errorf("cpu: cannot allocate %d values", n)
	}
	c.bufs = append(c.bufs, make([]float32, n))
	return MakeBuf(len(c.bufs)-1, n), nil
}

// NewCache implements Backend.
func (c *CPU) NewCache(s CacheShape) (Cache, error) {
	if s.Layers <= 0 || s.Slots <= 0 || s.Positions <= 0 || s.KVDim <= 0 || s.Type < KVF32 || s.Type > KVQ8 {
		return Cache{}, fmt.Errorf("cpu: bad cache geometry %d layers x %d slots x %d positions x %d", s.Layers, s.Slots, s.Positions, s.KVDim)
	}
	kc := &cpuCache{shape: s}
	for range s.Layers * s.Slots {
		kc.k = append(kc.k, make([]float32, s.Positions*s.KVDim))
		kc.v = append(kc.v, make([]float32, s.Positions*s.KVDim))
	}
	c.caches = append(c.caches, kc)
	return MakeCache(len(c.caches) - 1), nil
}

// fail records the first error of the step.
func (c *CPU) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// buf is b's memory, or nil (and a recorded error) for a handle this
// backend did not make.
func (c *CPU) buf(b Buf) []float32 {
	if b.ID() < 0 || b.ID() >= len(c.bufs) || b.Off()+b.Len() > len(c.bufs[b.ID()]) {
		c.fail(fmt.Errorf("cpu: buffer %d [%d, %d) was not allocated here", b.ID(), b.Off(), b.Off()+b.Len()))
		return nil
	}
	return c.bufs[b.ID()][b.Off() : b.Off()+b.Len()]
}

// mat is the weight m names, or nil (and a recorded error).
func (c *CPU) mat(m Mat) *cpuMat {
	if m.ID() < 1 || m.ID() > len(c.mats) {
		c.fail(fmt.Errorf("cpu: weight %d was not uploaded here", m.ID()))
		return nil
	}
	return c.mats[m.ID()-1]
}

// scratch is scratch row set i, at least n values.
func (c *CPU) scratch(i, n int) []float32 {
	if len(c.tmp[i]) < n {
		c.tmp[i] = make([]float32, n)
	}
	return c.tmp[i][:n]
}

// Step implements Backend: the pass runs as it is called, then the
// logits are read, argmaxed or ranked on the host.
func (c *CPU) Step(ctx context.Context, st *Step, pass func() error) (*StepResult, error) {
	if st.Cache.ID() < 0 || st.Cache.ID() >= len(c.caches) {
		return nil, fmt.Errorf("cpu: step: the cache %d is not one of the backend's", st.Cache.ID())
	}
	if err := st.Check(c.caches[st.Cache.ID()].shape); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	c.tokens, c.pos, c.slot, c.seqLen = c.tokens[:0], c.pos[:0], c.slot[:0], c.seqLen[:0]
	for _, s := range st.Seqs {
		c.seqLen = append(c.seqLen, len(s.Tokens))
		for i, t := range s.Tokens {
			c.tokens, c.pos, c.slot = append(c.tokens, t), append(c.pos, s.Pos+i), append(c.slot, s.Slot)
		}
	}
	c.err = nil
	if err := pass(); err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, c.err
	}
	res := &StepResult{}
	if st.Logits.Len() == 0 || st.Want == (Want{}) {
		return res, nil
	}
	logits := c.buf(st.Logits)
	if c.err != nil {
		return nil, c.err
	}
	for r := 0; r < len(logits)/st.Vocab; r++ {
		row := logits[r*st.Vocab : (r+1)*st.Vocab]
		switch {
		case st.Want.Draw != nil:
			res.Next, res.Drawn = append(res.Next, SampleDraw(row, st.Want.Draw)), true
		case st.Want.Greedy:
			res.Next = append(res.Next, Argmax(row))
		}
		if st.Want.TopK > 0 {
			res.Cands = append(res.Cands, TopCandidates(row, st.Want.TopK, st.Want.Temp))
		}
	}
	if st.Want.Logits {
		res.Logits = slices.Clone(logits)
	}
	return res, nil
}

// Embed implements Backend.
func (c *CPU) Embed(dst Buf, table Mat, scale float32) {
	m, out := c.mat(table), c.buf(dst)
	if c.err != nil {
		return
	}
	w := m.w
	if len(out) < len(c.tokens)*w.Cols {
		c.fail(fmt.Errorf("cpu: embed: %d tokens of %d values into %d", len(c.tokens), w.Cols, len(out)))
		return
	}
	for i, tok := range c.tokens {
		row := out[i*w.Cols : (i+1)*w.Cols]
		w.Row(tok, row)
		if scale != 1 {
			for j := range row {
				row[j] *= scale
			}
		}
	}
}

// Linear implements Backend: the norm into a scratch copy of x, then each
// product, the gated one through its two halves, the residual add
// through a scratch result.
func (c *CPU) Linear(x Buf, norm Norm, outs ...Output) {
	in := c.buf(x)
	if c.err != nil || len(outs) == 0 {
		return
	}
	cols := outs[0].W.Cols()
	if cols <= 0 || len(in)%cols != 0 {
		c.fail(fmt.Errorf("cpu: linear: input of %d values is not rows of %d", len(in), cols))
		return
	}
	n := len(in) / cols
	if norm.W.Valid() {
		g := c.mat(norm.W)
		if c.err != nil {
			return
		}
		xn := c.scratch(0, len(in))
		c.rmsNorm(xn, in, g.w.F32, n, cols, norm.Eps)
		in = xn
	}
	for _, o := range outs {
		w, dst := c.mat(o.W), c.buf(o.Dst)
		if c.err != nil {
			return
		}
		if o.W.Cols() != cols || len(dst) != n*o.W.Rows() || (o.Bias.Valid() && (o.Up.Valid() || o.Bias.Rows()*o.Bias.Cols() != o.W.Rows())) {
			c.fail(fmt.Errorf("cpu: linear: [%d, %d] weight for %d rows of %d into %d values", o.W.Rows(), o.W.Cols(), n, cols, len(dst)))
			return
		}
		// Every step after the product works on its rows in place; only
		// a residual add needs them apart from dst.
		y := dst
		if o.Add {
			y = c.scratch(1, len(dst))
		}
		c.matMul(y, in, w, n)
		if o.Bias.Valid() {
			b := c.mat(o.Bias)
			if c.err != nil {
				return
			}
			for r := range n {
				for i, v := range b.w.F32 {
					y[r*len(b.w.F32)+i] += v
				}
			}
		}
		if o.Up.Valid() {
			up := c.mat(o.Up)
			if c.err != nil {
				return
			}
			u := c.scratch(2, len(dst))
			c.matMul(u, in, up, n)
			c.glu(y, y, u, o.Act)
		}
		if o.Norm.W.Valid() {
			g := c.mat(o.Norm.W)
			if c.err != nil {
				return
			}
			c.rmsNorm(y, y, g.w.F32, n, o.W.Rows(), o.Norm.Eps)
		}
		if o.SoftCap > 0 {
			softCap(y, o.SoftCap)
		}
		if o.Add {
			for i, v := range y {
				dst[i] += v
			}
		}
	}
}

// rmsNorm writes each of the n rows of x (length dim), normalized and
// scaled by g, into dst.
func (c *CPU) rmsNorm(dst, x, g []float32, n, dim int, eps float32) {
	c.parallel(n, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			RMSNormRow(dst[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], g, eps)
		}
	})
}

// RMSNormRow writes x normalized and scaled by g into dst, as the CPU
// backend norms every row (the mean square summed in float64, the scale
// in float32): what a caller that watches the forward pass from outside
// (calibration) needs to see the same normed inputs.
func RMSNormRow(dst, x, g []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(float64(float32(ss/float64(len(x)))+eps)))
	for j, v := range x {
		dst[j] = g[j] * (v * inv)
	}
}

// matMul computes y[n, rows] = x[n, cols] · Wᵀ.
func (c *CPU) matMul(y, x []float32, m *cpuMat, n int) {
	wt := m.w
	if wt.Q != nil {
		if wt.Q.Format == quantize.TQ2 {
			c.matMulTQ2(wt.Q, x, y, n) // BitNet W2A8 by table lookup (cpu_tq2.go)
			return
		}
		c.matMulQuant(m, x, y, n)
		return
	}
	rows, cols := wt.Rows, wt.Cols
	c.parallel(rows, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			wr := wt.F32[r*cols : (r+1)*cols]
			for i := 0; i < n; i++ {
				y[i*rows+r] = dot(wr, x[i*cols:(i+1)*cols])
			}
		}
	})
}

// dot is a float32 dot product with four accumulators.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var head float32
	if n := len(a) &^ 31; haveAVX2 && n > 0 {
		head = dotF32AVX2(&a[0], &b[0], n)
		a, b = a[n:], b[n:]
		if len(a) == 0 {
			return head
		}
	}
	return head + dotGo(a, b)
}

// dotGo is dot in plain Go (the tail of the assembly, and its reference).
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Attention implements Backend: the rotation of q and k, then for each
// token the store of its key and value in its slot, then each query head
// over its sequence's positions up to its own.
func (c *CPU) Attention(out, q, k, v Buf, kc Cache, layer int, a Attn) {
	qs, ks, vs, os := c.buf(q), c.buf(k), c.buf(v), c.buf(out)
	if c.err != nil {
		return
	}
	if kc.ID() < 0 || kc.ID() >= len(c.caches) {
		c.fail(fmt.Errorf("cpu: attention: cache %d was not made here", kc.ID()))
		return
	}
	cache := c.caches[kc.ID()]
	n, hd, kvDim := len(c.tokens), a.HeadDim, a.KVHeads*a.HeadDim
	if layer < 0 || layer >= cache.shape.Layers || kvDim != cache.shape.KVDim ||
		len(qs) != n*a.Heads*hd || len(ks) != n*kvDim || len(vs) != n*kvDim || len(os) != n*a.Heads*hd {
		c.fail(fmt.Errorf("cpu: attention: layer %d, %d tokens of %d/%d heads of %d do not fit the buffers or cache", layer, n, a.Heads, a.KVHeads, hd))
		return
	}
	for _, qn := range []struct {
		x     []float32
		heads int
		norm  Norm
	}{{qs, a.Heads, a.QNorm}, {ks, a.KVHeads, a.KNorm}} {
		if qn.norm.W.Valid() {
			g := c.mat(qn.norm.W)
			if c.err != nil {
				return
			}
			c.rmsNorm(qn.x, qn.x, g.w.F32, n*qn.heads, hd, qn.norm.Eps)
		}
	}
	if a.Rope.Valid() {
		f := c.mat(a.Rope)
		if c.err != nil {
			return
		}
		if f.w.Rows != 1 || f.w.Cols != hd {
			c.fail(fmt.Errorf("cpu: attention: a rotation of [%d, %d] for heads of %d", f.w.Rows, f.w.Cols, hd))
			return
		}
		c.rope(qs, a.Heads, hd, f.w.F32)
		c.rope(ks, a.KVHeads, hd, f.w.F32)
	}
	slots := cache.shape.Slots
	for i := range n {
		at := layer*slots + c.slot[i]
		kr, vr := cache.k[at][c.pos[i]*kvDim:(c.pos[i]+1)*kvDim], cache.v[at][c.pos[i]*kvDim:(c.pos[i]+1)*kvDim]
		copy(kr, ks[i*kvDim:(i+1)*kvDim])
		copy(vr, vs[i*kvDim:(i+1)*kvDim])
		cache.shape.Type.Round(kr, hd)
		cache.shape.Type.Round(vr, hd)
	}
	group := a.Heads / a.KVHeads
	c.parallel(n*a.Heads, 1, func(lo, hi int) {
		var scores []float32
		for job := lo; job < hi; job++ {
			i, h := job/a.Heads, job%a.Heads
			p := c.pos[i]
			kl, vl := cache.k[layer*slots+c.slot[i]], cache.v[layer*slots+c.slot[i]]
			first := 0
			if a.Window > 0 {
				first = max(0, p-a.Window+1)
			}
			qh := qs[(i*a.Heads+h)*hd : (i*a.Heads+h+1)*hd]
			koff := (h / group) * hd
			scores = slices.Grow(scores[:0], p+1-first)[:p+1-first]
			maxs := float32(math.Inf(-1))
			for t := range scores {
				kt := kl[(first+t)*kvDim+koff : (first+t)*kvDim+koff+hd]
				scores[t] = dot(qh, kt) * a.Scale
				if a.SoftCap > 0 {
					scores[t] = float32(math.Tanh(float64(scores[t]/a.SoftCap))) * a.SoftCap
				}
				maxs = max(maxs, scores[t])
			}
			var sum float32
			for t := range scores {
				scores[t] = float32(math.Exp(float64(scores[t] - maxs)))
				sum += scores[t]
			}
			oh := os[(i*a.Heads+h)*hd : (i*a.Heads+h+1)*hd]
			clear(oh)
			for t, s := range scores {
				s /= sum
				vt := vl[(first+t)*kvDim+koff : (first+t)*kvDim+koff+hd]
				for j := range oh {
					oh[j] += s * vt[j]
				}
			}
		}
	})
}

// rope rotates each token's heads of x at the token's position by table:
// each pair's inverse frequency, then its factor.
func (c *CPU) rope(x []float32, heads, headDim int, table []float32) {
	half := headDim / 2
	freq, factor := table[:half], table[half:]
	cos, sin := make([]float32, half), make([]float32, half)
	for i, pos := range c.pos {
		p := float32(pos)
		for j, f := range freq {
			a := float64(p * f)
			cos[j], sin[j] = float32(math.Cos(a))*factor[j], float32(math.Sin(a))*factor[j]
		}
		for h := 0; h < heads; h++ {
			v := x[(i*heads+h)*headDim : (i*heads+h+1)*headDim]
			for j := 0; j < half; j++ {
				x0, x1 := v[j], v[j+half]
				v[j] = x0*cos[j] - x1*sin[j]
				v[j+half] = x1*cos[j] + x0*sin[j]
			}
		}
	}
}

// softCap caps each value: limit * tanh(v / limit), in float32 as
// transformers computes it.
func softCap(y []float32, limit float32) {
	for i, v := range y {
		y[i] = float32(math.Tanh(float64(v/limit))) * limit
	}
}

// glu computes dst = act(gate) * up elementwise.
func (c *CPU) glu(dst, gate, up []float32, act Act) {
	c.parallel(len(dst), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = activate(act, gate[i]) * up[i]
		}
	})
}

// activate applies a gate activation in float32 as transformers does.
func activate(act Act, x float32) float32 {
	switch act {
	case SiLU:
		return x / (1 + float32(math.Exp(float64(-x))))
	case GELUTanh:
		const c = 0.7978845608028654 // sqrt(2/pi)
		return 0.5 * x * (1 + float32(math.Tanh(c*float64(x+0.044715*x*x*x))))
	case ReLU2:
		r := max(x, 0)
		return r * r
	}
	return float32(math.NaN())
}

// Read implements Backend.
func (c *CPU) Read(dst []float32, src Buf) error {
	s := c.buf(src)
	if s == nil && c.err != nil {
		return c.err
	}
	if len(dst) > len(s) {
		return fmt.Errorf("cpu: read of %d values from a buffer of %d", len(dst), len(s))
	}
	copy(dst, s)
	return nil
}

// parallel runs fn over [0, n) in contiguous chunks of at least minChunk,
// one goroutine per worker.
func (c *CPU) parallel(n, minChunk int, fn func(lo, hi int)) {
	w := min(c.workers(), (n+minChunk-1)/max(minChunk, 1))
	if w <= 1 {
		fn(0, n)
		return
	}
	size := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += size {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+size, n))
	}
	wg.Wait()
}
