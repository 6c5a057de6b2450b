package model

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"lowbit/quantize"
)

// CPU is the host backend: float32 activations in Go slices, kernels split
// across Workers goroutines, quantized weights multiplied on their packed
// bytes by package quantize. Its float32 path does plain float32 arithmetic
// (sums of squares in float64), the reference the other paths are held to.
type CPU struct {
	// Workers is the number of goroutines a kernel uses (0: GOMAXPROCS).
	Workers int

	tokens []int
	pos    int
}

// NewCPU returns a CPU backend using workers goroutines (0: GOMAXPROCS).
func NewCPU(workers int) *CPU {
	return &CPU{Workers: workers}
}

type cpuBuf []float32

func (b cpuBuf) Len() int { return len(b) }

// cpuCache holds keys and values, per layer [positions, kvDim].
type cpuCache struct {
	k, v      [][]float32
	positions int
	kvDim     int
}

func (c *CPU) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Name implements Backend.
func (c *CPU) Name() string { return "cpu" }

// Upload implements Backend: the weight's data is used where it is (q4
// and q8 scales are widened to float32 for the kernels of cpu_quant.go).
func (c *CPU) Upload(w *Weight) (Mat, error) {
	if w == nil {
		return nil, fmt.Errorf("cpu: upload of a nil weight")
	}
	return prepare(w), nil
}

// Alloc implements Backend.
func (c *CPU) Alloc(n int) (Buf, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: cannot allocate %d values", n)
	}
	return cpuBuf(make([]float32, n)), nil
}

// View implements Backend.
func (c *CPU) View(b Buf, off, n int) Buf { return b.(cpuBuf)[off : off+n] }

// NewCache implements Backend.
func (c *CPU) NewCache(layers, positions, kvDim int) (KVCache, error) {
	if layers <= 0 || positions <= 0 || kvDim <= 0 {
		return nil, fmt.Errorf("cpu: bad cache geometry %d layers x %d positions x %d", layers, positions, kvDim)
	}
	kc := &cpuCache{positions: positions, kvDim: kvDim}
	for l := 0; l < layers; l++ {
		kc.k = append(kc.k, make([]float32, positions*kvDim))
		kc.v = append(kc.v, make([]float32, positions*kvDim))
	}
	return kc, nil
}

// SetStep implements Backend.
func (c *CPU) SetStep(tokens []int, pos int) error {
	c.tokens = append(c.tokens[:0], tokens...)
	c.pos = pos
	return nil
}

// Embed implements Backend.
func (c *CPU) Embed(dst Buf, table Mat, n int, scale float32) {
	w, out := table.(*cpuMat).w, dst.(cpuBuf)
	for i, tok := range c.tokens[:n] {
		row := out[i*w.Cols : (i+1)*w.Cols]
		w.Row(tok, row)
		if scale != 1 {
			for j := range row {
				row[j] *= scale
			}
		}
	}
}

// RMSNorm implements Backend.
func (c *CPU) RMSNorm(dst, x Buf, w Mat, n, dim int, eps float32, plusOne bool) {
	g, out, in := w.(*cpuMat).w.F32, dst.(cpuBuf), x.(cpuBuf)
	c.parallel(n, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xs, ys := in[i*dim:(i+1)*dim], out[i*dim:(i+1)*dim]
			var ss float64
			for _, v := range xs {
				ss += float64(v) * float64(v)
			}
			inv := float32(1 / math.Sqrt(float64(float32(ss/float64(dim))+eps)))
			for j, v := range xs {
				if plusOne {
					ys[j] = v * inv * (1 + g[j])
				} else {
					ys[j] = g[j] * (v * inv)
				}
			}
		}
	})
}

// MatMul implements Backend.
func (c *CPU) MatMul(dst, x Buf, w Mat, n int) {
	m, out, in := w.(*cpuMat), dst.(cpuBuf), x.(cpuBuf)
	wt := m.w
	if wt.Q != nil {
		if wt.Q.Format == quantize.TQ2 {
			c.matMulTQ2(wt.Q, in, out, n) // BitNet W2A8 by table lookup (cpu_tq2.go)
			return
		}
		c.matMulQuant(m, in, out, n)
		return
	}
	rows, cols := wt.Rows, wt.Cols
	c.parallel(rows, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			wr := wt.F32[r*cols : (r+1)*cols]
			for i := 0; i < n; i++ {
				out[i*rows+r] = dot(wr, in[i*cols:(i+1)*cols])
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

// Rope implements Backend.
func (c *CPU) Rope(x Buf, n, heads, headDim int, invFreq Mat) {
	freq, xs := invFreq.(*cpuMat).w.F32, x.(cpuBuf)
	half := headDim / 2
	cos, sin := make([]float32, half), make([]float32, half)
	for i := 0; i < n; i++ {
		p := float32(c.pos + i)
		for j, f := range freq {
			a := float64(p * f)
			cos[j], sin[j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		for h := 0; h < heads; h++ {
			v := xs[(i*heads+h)*headDim : (i*heads+h+1)*headDim]
			for j := 0; j < half; j++ {
				x0, x1 := v[j], v[j+half]
				v[j] = x0*cos[j] - x1*sin[j]
				v[j+half] = x1*cos[j] + x0*sin[j]
			}
		}
	}
}

// Attention implements Backend.
func (c *CPU) Attention(out, q, k, v Buf, kc KVCache, layer, n int, a AttnShape) {
	cache := kc.(*cpuCache)
	kvDim := a.KVHeads * a.HeadDim
	kl, vl := cache.k[layer], cache.v[layer]
	copy(kl[c.pos*kvDim:(c.pos+n)*kvDim], k.(cpuBuf)[:n*kvDim])
	copy(vl[c.pos*kvDim:(c.pos+n)*kvDim], v.(cpuBuf)[:n*kvDim])
	qs, os := q.(cpuBuf), out.(cpuBuf)
	group := a.Heads / a.KVHeads
	hd := a.HeadDim
	c.parallel(n*a.Heads, 1, func(lo, hi int) {
		scores := make([]float32, c.pos+n)
		for job := lo; job < hi; job++ {
			i, h := job/a.Heads, job%a.Heads
			p := c.pos + i
			first := 0
			if a.Window > 0 {
				first = max(0, p-a.Window+1)
			}
			qh := qs[(i*a.Heads+h)*hd : (i*a.Heads+h+1)*hd]
			koff := (h / group) * hd
			sc := scores[first : p+1]
			maxs := float32(math.Inf(-1))
			for t := range sc {
				kt := kl[(first+t)*kvDim+koff : (first+t)*kvDim+koff+hd]
				sc[t] = dot(qh, kt) * a.Scale
				maxs = max(maxs, sc[t])
			}
			var sum float32
			for t := range sc {
				sc[t] = float32(math.Exp(float64(sc[t] - maxs)))
				sum += sc[t]
			}
			oh := os[(i*a.Heads+h)*hd : (i*a.Heads+h+1)*hd]
			clear(oh)
			for t, s := range sc {
				s /= sum
				vt := vl[(first+t)*kvDim+koff : (first+t)*kvDim+koff+hd]
				for j := range oh {
					oh[j] += s * vt[j]
				}
			}
		}
	})
}

// GLU implements Backend.
func (c *CPU) GLU(dst, gate, up Buf, n int, act string) {
	d, g, u := dst.(cpuBuf), gate.(cpuBuf), up.(cpuBuf)
	c.parallel(n, 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = activate(act, g[i]) * u[i]
		}
	})
}

// activate applies a gate activation in float32 as transformers does.
func activate(act string, x float32) float32 {
	switch act {
	case "silu":
		return x / (1 + float32(math.Exp(float64(-x))))
	case "gelu_tanh":
		const c = 0.7978845608028654 // sqrt(2/pi)
		return 0.5 * x * (1 + float32(math.Tanh(c*float64(x+0.044715*x*x*x))))
	case "relu2":
		r := max(x, 0)
		return r * r
	}
	return float32(math.NaN())
}

// Add implements Backend.
func (c *CPU) Add(dst, x Buf, n int) {
	d, s := dst.(cpuBuf), x.(cpuBuf)
	for i := range d[:n] {
		d[i] += s[i]
	}
}

// Read implements Backend.
func (c *CPU) Read(dst []float32, src Buf, off int) error {
	s := src.(cpuBuf)
	if off < 0 || off+len(dst) > len(s) {
		return fmt.Errorf("cpu: read of %d values at %d from a buffer of %d", len(dst), off, len(s))
	}
	copy(dst, s[off:])
	return nil
}

// Err implements Backend: CPU operations do not fail.
func (c *CPU) Err() error { return nil }

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
