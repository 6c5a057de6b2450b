package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"lowbit/half"
	"lowbit/internal/fixture"
	"lowbit/model"
	"lowbit/quantize"
)

// TestNormKernels checks rmsnorm and add_rmsnorm against float64 for rows
// that take the float4 path (2048), its tail loop past the registers
// (20000), and the scalar path (a length that is not a multiple of 4).
func TestNormKernels(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(21, 22))
	for _, tc := range []struct{ rows, n int }{{1, 2048}, {3, 2048}, {2, 20000}, {3, 50}, {1, 4}} {
		for _, add := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%d/add=%v", tc.rows, tc.n, add), func(t *testing.T) {
				rows, n := tc.rows, tc.n
				x, res, w := gaussian(r, rows*n), gaussian(r, rows*n), gaussian(r, n)
				xb, rb, wb := up(t, d, x, 0), up(t, d, res, 0), up(t, d, w, 0)
				y := up(t, d, make([]float32, rows*n), 0)
				run(t, d, func() error {
					if add {
						return d.addRMSNorm(xb, rb, wb, y, rows, n, 1e-5, 0)
					}
					return d.rmsnorm(xb, wb, y, rows, n, 1e-5, 0)
				})
				sum := make([]float64, rows*n)
				ref := make([]float64, rows*n)
				for i := range sum {
					sum[i] = float64(x[i])
					if add {
						sum[i] += float64(res[i])
					}
				}
				for i := 0; i < rows; i++ {
					var ss float64
					for _, v := range sum[i*n : (i+1)*n] {
						ss += v * v
					}
					s := 1 / math.Sqrt(ss/float64(n)+1e-5)
					for j := 0; j < n; j++ {
						ref[i*n+j] = sum[i*n+j] * s * float64(w[j])
					}
				}
				check(t, "norm", ref, down[float32](t, d, y, rows*n), 1e-6)
				if add {
					check(t, "x += r", sum, down[float32](t, d, xb, rows*n), 1e-7)
				}
			})
		}
	}
}

// TestArgmaxOffsets checks argmax on logits that start inside a buffer at
// every 4-byte offset (a token's row of a batch), ties going to the first.
func TestArgmaxOffsets(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, n := range []int{3, 7, 32001, 128257} {
		for off := 0; off < 4; off++ {
			x := gaussian(r, n+off)
			want := off + r.IntN(n)
			x[want] = 10
			x[off+n-1] = 10 // a tie with a later index
			if want == off+n-1 {
				x[off] = 10
				want = off
			}
			xb := up(t, d, x, 0)
			ob := up(t, d, []int32{-1}, 0)
			view := xb.Slice(int64(4*off), int64(4*n))
			run(t, d, func() error { return d.argmax(view, n, ob) })
			if got := int(down[int32](t, d, ob, 1)[0]); got != want-off {
				t.Errorf("n %d offset %d: argmax %d, want %d", n, off, got, want-off)
			}
		}
	}
}

// TestAttnPrefill checks the flash-style prompt attention against float64:
// 100 queries (two query tiles, the second partly empty) at positions
// 20..119 over a cache whose first 20 positions an earlier step filled,
// GQA, both head sizes, with and without a sliding window.
func TestAttnPrefill(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(25, 26))
	for _, c := range []struct {
		hd     int
		window int
		typ    model.KVType
	}{{64, 0, model.KVF32}, {64, 30, model.KVF32}, {128, 0, model.KVF32}, {128, 30, model.KVF32}, {256, 0, model.KVF32}, {256, 30, model.KVF32},
		{64, 0, model.KVF16}, {128, 30, model.KVF16}, {256, 0, model.KVF16}, {64, 30, model.KVQ8}, {128, 0, model.KVQ8}, {256, 0, model.KVQ8}} {
		hd, window := c.hd, c.window
		{
			t.Run(fmt.Sprintf("hd%d/window%d/%s", hd, window, c.typ), func(t *testing.T) {
				heads, kvHeads, maxSeq, first, n := 8, 2, 160, 20, 100
				kvdim := kvHeads * hd
				K, V := gaussian(r, maxSeq*kvdim), gaussian(r, maxSeq*kvdim)
				rows := newKVRows(t, d, c.typ, maxSeq, kvHeads, hd)
				all := make([]int32, maxSeq)
				for i := range all {
					all[i] = int32(i)
				}
				kb, vb, ab := up(t, d, K, 0), up(t, d, V, 0), up(t, d, all, 0)
				run(t, d, func() error { return d.kvStore(kb, vb, rows, maxSeq, kvHeads, hd, ab) })
				K, V = kvRounded(c.typ, K, hd), kvRounded(c.typ, V, hd)
				q := gaussian(r, n*heads*hd)
				pos := make([]int32, n)
				for i := range pos {
					pos[i] = int32(first + i)
				}
				qb, pb := up(t, d, q, 0), up(t, d, pos, 0)
				out := up(t, d, make([]float32, n*heads*hd), 0)
				scale := float32(1 / math.Sqrt(float64(hd)))
				run(t, d, func() error {
					return d.attnPrefill(qb, rows, out, n, heads, kvHeads, hd, maxSeq, pb, scale, 0, window)
				})
				ref := make([]float64, n*heads*hd)
				for y := 0; y < n; y++ {
					p := first + y
					from := 0
					if window > 0 {
						from = max(0, p-window+1)
					}
					for h := 0; h < heads; h++ {
						attendRef(ref[(y*heads+h)*hd:(y*heads+h+1)*hd], q[(y*heads+h)*hd:], K, V, kvdim, (h/(heads/kvHeads))*hd, from, p, scale)
					}
				}
				check(t, "attn_prefill", ref, down[float32](t, d, out, n*heads*hd), 1e-5)
			})
		}
	}
}

// newKVRows allocates a cache of maxSeq positions of kvHeads heads of hd
// stored as typ.
func newKVRows(t *testing.T, d *Device, typ model.KVType, maxSeq, kvHeads, hd int) kvRows {
	t.Helper()
	elem := map[model.KVType]int{model.KVF32: 4, model.KVF16: 2, model.KVQ8: 1}[typ]
	n := (maxSeq*kvHeads*hd*elem + 3) / 4
	r := kvRows{typ: typ, k: up(t, d, make([]float32, n), 0), v: up(t, d, make([]float32, n), 0)}
	if typ == model.KVQ8 {
		r.ks, r.vs = up(t, d, make([]float32, maxSeq*kvHeads), 0), up(t, d, make([]float32, maxSeq*kvHeads), 0)
	}
	return r
}

// kvDown reads position p's key and value rows back from a cache,
// decoded.
func kvDown(t *testing.T, d *Device, c kvRows, p, kvHeads, hd int) (k, v []float32) {
	t.Helper()
	n := kvHeads * hd
	decode := func(b, sc Buffer) []float32 {
		out := make([]float32, n)
		switch c.typ {
		case model.KVF32:
			copy(out, down[float32](t, d, b, (p+1)*n)[p*n:])
		case model.KVF16:
			raw := down[int32](t, d, b, (p+1)*n/2)[p*n/2:]
			for i := range out {
				out[i] = half.Float16(uint16(raw[i/2] >> (16 * (i % 2)))).Float32()
			}
		case model.KVQ8:
			raw := down[int32](t, d, b, (p+1)*n/4)[p*n/4:]
			scales := down[float32](t, d, sc, (p+1)*kvHeads)[p*kvHeads:]
			for i := range out {
				out[i] = float32(int8(raw[i/4]>>(8*(i%4)))) * scales[i/hd]
			}
		}
		return out
	}
	return decode(c.k, c.ks), decode(c.v, c.vs)
}

// kvRounded is a copy of x (rows of heads of hd) as a cache of type typ
// keeps it.
func kvRounded(typ model.KVType, x []float32, hd int) []float32 {
	x = slices.Clone(x)
	typ.Round(x, hd)
	return x
}

// attendRef adds to dst (one head's output) softmax(q·k * scale) v over
// cache positions from..to, the head's keys and values at offset off of
// rows of kvdim, in float64.
func attendRef(dst []float64, q, K, V []float32, kvdim, off, from, to int, scale float32) {
	hd := len(dst)
	s := make([]float64, to-from+1)
	m := math.Inf(-1)
	for i := range s {
		row := (from + i) * kvdim
		for j := 0; j < hd; j++ {
			s[i] += float64(q[j]) * float64(K[row+off+j])
		}
		s[i] *= float64(scale)
		m = math.Max(m, s[i])
	}
	var sum float64
	for i := range s {
		s[i] = math.Exp(s[i] - m)
		sum += s[i]
	}
	for i := range s {
		row := (from + i) * kvdim
		for j := 0; j < hd; j++ {
			dst[j] += s[i] / sum * float64(V[row+off+j])
		}
	}
}

// TestMatMulBlas checks prefill products through cuBLAS (fp16 weights and
// activations, fp32 sums) against float64 over the dequantized weights:
// within 2e-3 (fp16 rounds each input by at most 2^-11 relative). The
// largest shape is dequantized in two 64 MiB panels.
func TestMatMulBlas(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(27, 28))
	for _, sh := range []struct{ rows, cols, n int }{{130, 2048, 70}, {64, 512, 128}, {17000, 2048, 33}} {
		w := gaussian(r, sh.rows*sh.cols)
		x := gaussian(r, sh.n*sh.cols)
		for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1} {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", f, sh.rows, sh.cols, sh.n), func(t *testing.T) {
				qt, m := uploadQuantized(t, d, f, w, sh.rows, sh.cols)
				y, err := d.MatMulMatrix(m, x, sh.n)
				if err != nil {
					t.Fatal(err)
				}
				if s := d.BlasStatus(); !strings.HasPrefix(s, "cuBLAS: ") || strings.HasPrefix(s, "cuBLAS: not") {
					t.Fatalf("cuBLAS not used: %s", s)
				}
				deq := qt.Dequantize()
				ref := make([]float64, sh.n*sh.rows)
				for tok := 0; tok < sh.n; tok++ {
					xr := x[tok*sh.cols : (tok+1)*sh.cols]
					for i := 0; i < sh.rows; i++ {
						var s float64
						for c, wv := range deq[i*sh.cols : (i+1)*sh.cols] {
							s += float64(wv) * float64(xr[c])
						}
						ref[tok*sh.rows+i] = s
					}
				}
				if e := relL2(ref, y); e > 2e-3 {
					t.Errorf("relative L2 %.3g", e)
				}
			})
		}
	}
}

// TestMatMulI8Blas checks ternary prefill through cuBLAS's int8 GEMM
// against the int8 matrix-vector kernel on the same int8 activations: the
// sums are exact integers either way and the scaling the same, so the
// outputs are equal bit for bit. For a whole matrix (its tensor scale)
// and a joined one (a scale a row), in one panel and in two.
func TestMatMulI8Blas(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(31, 32))
	for _, sh := range []struct{ rows, cols, n int }{{64, 512, 32}, {132, 2560, 70}, {26300, 2560, 33}} {
		w := gaussian(r, sh.rows*sh.cols)
		x := gaussian(r, sh.n*sh.cols)
		_, m := uploadQuantized(t, d, quantize.TQ2, w, sh.rows, sh.cols)
		rowScale := make([]float32, sh.rows)
		for i := range rowScale {
			rowScale[i] = 0.01 + r.Float32()
		}
		for _, joined := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%dx%d/joined=%v", sh.rows, sh.cols, sh.n, joined), func(t *testing.T) {
				mm := *m
				if joined {
					err := d.do(func() (err error) { mm.rowScale, err = d.uploadNew(bytesOf(rowScale), 0, MemScratch); return err })
					if err != nil {
						t.Fatal(err)
					}
					defer d.do(func() error { d.free(mm.rowScale); return nil })
				}
				run := func(kernel bool) []float32 {
					y := make([]float32, sh.n*sh.rows)
					err := d.do(func() error {
						d.blasOff = kernel
						defer func() { d.blasOff = false }()
						stride := mm.blocks() * 32
						xb, err := d.uploadNew(bytesOf(x), 0, MemScratch)
						if err != nil {
							return err
						}
						defer d.free(xb)
						var q, sc, yb Buffer
						for _, b := range []struct {
							dst *Buffer
							n   int
						}{{&q, sh.n * stride}, {&sc, 4 * sh.n}, {&yb, 4 * len(y)}} {
							if *b.dst, err = d.alloc(int64(b.n), MemScratch); err != nil {
								return err
							}
							defer d.free(*b.dst)
						}
						if err := d.memset(yb, 0xff); err != nil {
							return err
						}
						if err := d.quantizeI8N(xb, sh.cols, sh.n, q, stride, sc); err != nil {
							return err
						}
						if err := d.matmulI8(&mm, sh.n, q, stride, sc, yb); err != nil {
							return err
						}
						if !kernel && (d.blas == nil || d.blasI8Err != nil) {
							return fmt.Errorf("cuBLAS's int8 GEMM not used: blas %v, %v", d.blas != nil, d.blasI8Err)
						}
						return d.dtoh(bytesOf(y), yb, 0)
					})
					if err != nil {
						t.Fatal(err)
					}
					return y
				}
				want, got := run(true), run(false)
				bad := 0
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						if bad < 5 {
							t.Errorf("y[%d] = %g through cuBLAS, %g through the kernel", i, got[i], want[i])
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d outputs differ", bad, len(want))
				}
			})
		}
	}
}

// TestBackendLongPrompt runs an 80-token prompt, then 8 decode steps,
// through models whose heads take attn_prefill and attn_decode (64 and 128
// wide) and whose products take cuBLAS, on the GPU and the CPU: Mistral's
// sliding window (64 positions, exceeded), Gemma's scaled embedding and
// GeGLU, BitNet's ternary products (int8 GEMM). Logits within 1e-3 (f32:
// lowbit's kernels), 5e-3 (quantized prompt: fp16 GEMM inputs) or 1e-2
// (tq2, as in TestBackendMatchesCPU).
func TestBackendLongPrompt(t *testing.T) {
	d := openOrSkip(t)
	hd64 := fixture.Spec{Arch: "LlamaForCausalLM", Hidden: 256, Intermediate: 384, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 96, Seed: 5}
	hd128 := fixture.Spec{Arch: "LlamaForCausalLM", Hidden: 256, Intermediate: 320, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 128, Vocab: 96, Seed: 6}
	mistral, gemma, bitnet := hd64, hd64, hd128
	mistral.Arch, mistral.Seed = "MistralForCausalLM", 7
	gemma.Arch, gemma.Seed = "GemmaForCausalLM", 8
	bitnet.Arch, bitnet.Seed = "BitNetForCausalLM", 9
	r := rand.New(rand.NewPCG(29, 30))
	prompt := make([]int, 80)
	for i := range prompt {
		prompt[i] = r.IntN(96)
	}
	for _, tc := range []struct {
		name  string
		spec  fixture.Spec
		f     quantize.Format
		limit float64
	}{
		{"hd64-f32", hd64, quantize.F32, 1e-3},
		{"hd64-q4", hd64, quantize.Q4, 5e-3},
		{"hd128-q8", hd128, quantize.Q8, 5e-3},
		{"mistral-window-f32", mistral, quantize.F32, 1e-3},
		{"mistral-window-q4", mistral, quantize.Q4, 5e-3},
		{"gemma-f32", gemma, quantize.F32, 1e-3},
		{"gemma-q8", gemma, quantize.Q8, 5e-3},
		{"bitnet-tq2", bitnet, quantize.TQ2, 1e-2}, // prompt through cuBLAS's int8 GEMM
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fixtureModel(t, tc.spec, tc.f)
			cpu, err := m.NewSession(model.SessionOptions{Context: 128, Batch: 128})
			if err != nil {
				t.Fatal(err)
			}
			gs, _ := newGPUSession(t, d, m, 128, 128)
			matchCPU(t, m, cpu, gs, prompt, 8, tc.limit)
		})
	}
}

// TestAttnDecode checks the decode attention against float64 for the head
// layouts of real models (TinyLlama's 8 query heads a kv head, plain
// multi-head, BitNet's 4, Gemma's 256-wide heads, a group of 3, Llama-3-70B's
// 64 over 8, two heads a block over 32 kv heads), with the
// rotation folded in or not, with and without a sliding window, at
// positions in a row (the split's counters reset themselves), on both
// kernels where a layout has two (four dimensions a lane: the _un5 one and
// the plain one), and checks that the step's rotated key and value land
// in the caches.
func TestAttnDecode(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(31, 32))
	// Query heads a block (the group split over blocks): 1 for the first
	// five layouts, 2 for the sixth, 3 for the seventh, 2 for the last.
	for _, l := range []struct{ hd, heads, kvHeads int }{{64, 32, 4}, {128, 8, 8}, {128, 20, 5}, {256, 8, 1}, {64, 12, 4}, {128, 64, 8}, {64, 48, 16}, {64, 64, 32}} {
		for _, c := range []struct {
			window int
			rope   bool
			typ    model.KVType
		}{{0, false, model.KVF32}, {0, true, model.KVF32}, {50, false, model.KVF32}, {50, true, model.KVF32},
			{0, true, model.KVF16}, {50, true, model.KVF16}, {0, true, model.KVQ8}, {50, true, model.KVQ8}} {
			window, rope := c.window, c.rope
			{
				t.Run(fmt.Sprintf("hd%d-%dx%d/window%d/rope=%v/%s", l.hd, l.heads, l.kvHeads, window, rope, c.typ), func(t *testing.T) {
					hd, heads, kvHeads, maxSeq := l.hd, l.heads, l.kvHeads, 1100
					kvdim := kvHeads * hd
					K, V := gaussian(r, maxSeq*kvdim), gaussian(r, maxSeq*kvdim)
					rows := newKVRows(t, d, c.typ, maxSeq, kvHeads, hd)
					all := make([]int32, maxSeq)
					for i := range all {
						all[i] = int32(i)
					}
					kb, vb, ab := up(t, d, K, 0), up(t, d, V, 0), up(t, d, all, 0)
					run(t, d, func() error { return d.kvStore(kb, vb, rows, maxSeq, kvHeads, hd, ab) })
					K, V = kvRounded(c.typ, K, hd), kvRounded(c.typ, V, hd)
					inv := make([]float32, hd/2)
					for i := range inv {
						inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(hd)))
					}
					var a *attnDecode
					if err := d.do(func() (err error) {
						a, err = d.newAttnDecode(heads, kvHeads, hd, maxSeq, window, 1, c.typ, false)
						return err
					}); err != nil {
						t.Fatal(err)
					}
					names := []string{a.name}
					base := strings.TrimSuffix(strings.TrimSuffix(a.name, "_f16"), "_q8")
					if plain, ok := strings.CutSuffix(base, "_un5"); ok {
						names = append(names, rows.kernel(plain))
					} else if err := d.do(func() error { _, err := d.function(rows.kernel(base + "_un5")); return err }); err == nil {
						names = append(names, rows.kernel(base+"_un5"))
					}
					table := append(slices.Clone(inv), make([]float32, len(inv))...)
					for i := range inv {
						table[len(inv)+i] = 1
					}
					cs := up(t, d, ropeTable(table, maxSeq), 0)
					scale := float32(1 / math.Sqrt(float64(hd)))
					// Five slices without a window, their length following
					// the position (a block each): the first position, both
					// sides of 256, a later one.
					for i, p := range []int{700, 257, 256, 255, 219, 220, 31, 0, 79, 80, 64} {
						a.name = names[i%len(names)]
						q, kcur, vcur := gaussian(r, heads*hd), gaussian(r, kvdim), gaussian(r, kvdim)
						qb, kb, vb := up(t, d, q, 0), up(t, d, kcur, 0), up(t, d, vcur, 0)
						pb := up(t, d, []int32{int32(p)}, 0)
						out := up(t, d, make([]float32, heads*hd), 0)
						var f Buffer
						if rope {
							f = cs
							rotate(q, hd, p, inv)
							rotate(kcur, hd, p, inv)
						}
						run(t, d, func() error {
							return a.launch(d, qb, kb, vb, rows, out, heads, kvHeads, pb, scale, 0, f, window)
						})
						c.typ.Round(kcur, hd)
						c.typ.Round(vcur, hd)
						copy(K[p*kvdim:], kcur)
						copy(V[p*kvdim:], vcur)
						from := 0
						if window > 0 {
							from = max(0, p-window+1)
						}
						ref := make([]float64, heads*hd)
						for h := 0; h < heads; h++ {
							attendRef(ref[h*hd:(h+1)*hd], q[h*hd:], K, V, kvdim, (h/(heads/kvHeads))*hd, from, p, scale)
						}
						// The rotation's last bits, computed here and in the
						// kernel, may round a rotated key to the neighbouring
						// f16 value or q8 code.
						tol := map[model.KVType]struct{ out, k float64 }{model.KVF32: {1e-5, 1e-6}, model.KVF16: {1e-4, 1e-3}, model.KVQ8: {1e-3, 1e-2}}[c.typ]
						check(t, fmt.Sprintf("position %d", p), ref, down[float32](t, d, out, heads*hd), tol.out)
						kd, vd := kvDown(t, d, rows, p, kvHeads, hd)
						check(t, "cached k", f64(kcur), kd, tol.k)
						check(t, "cached v", f64(vcur), vd, 0)
					}
				})
			}
		}
	}
}

// rotate applies the rotary embedding (HF rotate half) at position p to
// every head of x in place, as the CPU backend does.
func rotate(x []float32, hd, p int, inv []float32) {
	half := hd / 2
	for h := 0; h+hd <= len(x); h += hd {
		for j := 0; j < half; j++ {
			a := float64(float32(p) * inv[j])
			c, s := float32(math.Cos(a)), float32(math.Sin(a))
			x0, x1 := x[h+j], x[h+j+half]
			x[h+j] = x0*c - x1*s
			x[h+j+half] = x1*c + x0*s
		}
	}
}

// TestMatVecFused checks the shared-memory kernels' fused steps against
// float64: RMSNorm of x while staging (Gemma's +1 too), the gated
// activation, the output added to y, and for tq2 BitNet's int8 x after a
// gate and a norm at once (ReLU^2, sub-norm), on shapes whose columns are
// and are not whole 32-weight blocks.
func TestMatVecFused(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(33, 34))
	for _, sh := range []struct{ rows, cols int }{{96, 48}, {64, 80}, {64, 128}, {2560, 2048}, {100, 2560}, {66, 6912}} {
		for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2} {
			t.Run(fmt.Sprintf("%s/%dx%d", f, sh.rows, sh.cols), func(t *testing.T) {
				w, x, u := gaussian(r, sh.rows*sh.cols), gaussian(r, sh.cols), gaussian(r, sh.cols)
				g, y0 := gaussian(r, sh.cols), gaussian(r, sh.rows)
				qt, m := uploadQuantized(t, d, f, w, sh.rows, sh.cols)
				// x's buffer continues with another row's values, as a
				// token's row of a batch does: the kernel must not read them.
				nb := m.blocks() * 32
				xb, ub, gb := up(t, d, append(x, gaussian(r, nb)...), 0), up(t, d, u, nb), up(t, d, g, nb)
				gated := func(act GLU) []float64 {
					in := make([]float64, sh.cols)
					for i := range in {
						in[i] = gluRef(act, float64(x[i]), float64(u[i]))
					}
					return in
				}
				tq2 := f == quantize.TQ2
				cases := []struct {
					name string
					o    matvecOpts
					in   func() []float64
				}{
					{"norm", matvecOpts{act: -1, norm: gb, eps: 1e-5, int8: tq2}, func() []float64 { return normRef(f64(x), g, 0) }},
					{"norm+1", matvecOpts{act: -1, norm: gb, eps: 1e-5, wAdd: 1, int8: tq2}, func() []float64 { return normRef(f64(x), g, 1) }},
					{"silu", matvecOpts{x2: ub, act: int(SwiGLU), int8: tq2}, func() []float64 { return gated(SwiGLU) }},
					{"accum", matvecOpts{act: -1, accum: true, int8: tq2}, func() []float64 { return f64(x) }},
				}
				if tq2 {
					cases = append(cases, struct {
						name string
						o    matvecOpts
						in   func() []float64
					}{"relu2+norm+accum", matvecOpts{x2: ub, act: int(ReLU2GLU), norm: gb, eps: 1e-5, accum: true, int8: true},
						func() []float64 { return normRef(gated(ReLU2GLU), g, 0) }})
				}
				ran := 0
				// The kernel the shape picks, and the others with blocks
				// looping over several row groups.
				kernels := []struct {
					k    matvecKernel
					grid int
				}{{matvecKernel{}, 0}, {matvecS4W4, 3}, {matvecS2W8, 2}, {matvecS1W16, 1}, {matvecS1W16K2, 1}, {matvecS1W32K2, 2}}
				for _, k := range kernels {
					for _, tc := range cases {
						var ok bool
						d.do(func() error {
							d.matvecMode, d.matvecGrid = k.k, k.grid
							ok = d.canFuse(m, tc.o)
							return nil
						})
						yb := up(t, d, y0, 0)
						if ok {
							run(t, d, func() error { return d.matvecWith(m, xb, yb, tc.o) })
						}
						d.do(func() error { d.matvecMode, d.matvecGrid = matvecKernel{}, 0; return nil })
						if !ok {
							continue // the plain kernel's shapes fuse nothing
						}
						ran++
						in := tc.in()
						ref := make([]float64, sh.rows)
						if tq2 {
							in = int8Ref(in)
						}
						for i := range ref {
							ref[i] = qt.DotRef(i, in)
							if tc.o.accum {
								ref[i] += float64(y0[i])
							}
						}
						check(t, fmt.Sprintf("%s, kernel %s grid %d", tc.name, k.k, k.grid), ref, down[float32](t, d, yb, sh.rows), fusedTol(f))
					}
				}
				if ran == 0 {
					t.Skipf("%s %dx%d takes the plain kernel, which fuses nothing", f, sh.rows, sh.cols)
				}
			})
		}
	}
}

// TestMatVecGated checks the gated output (gate/up products writing
// act(gate) * up, matvecOpts.gated) against float64 on every kernel that
// has it, with row groups that do and do not divide the pairs evenly and
// blocks looping over several groups: the first half of y gets the
// outputs, the second is left as it was.
func TestMatVecGated(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(35, 36))
	for _, sh := range []struct{ rows, cols int }{{200, 128}, {1024, 256}, {264, 2560}, {4096, 2048}, {8192, 4096}} {
		for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.TQ2} {
			t.Run(fmt.Sprintf("%s/%dx%d", f, sh.rows, sh.cols), func(t *testing.T) {
				w, x, g, y0 := gaussian(r, sh.rows*sh.cols), gaussian(r, sh.cols), gaussian(r, sh.cols), gaussian(r, sh.rows)
				qt, m := uploadQuantized(t, d, f, w, sh.rows, sh.cols)
				xb, gb := up(t, d, x, m.blocks()*32), up(t, d, g, m.blocks()*32)
				tq2 := f == quantize.TQ2
				in := normRef(f64(x), g, 0)
				if tq2 {
					in = int8Ref(in)
				}
				half := sh.rows / 2
				for _, act := range []GLU{SwiGLU, ReLU2GLU} {
					for _, k := range []struct {
						k    matvecKernel
						grid int
					}{{matvecKernel{}, 0}, {matvecS4W4, 3}, {matvecS1W16, 1}, {matvecS1W16, 2}, {matvecS2W16, 2}} {
						if k.k != (matvecKernel{}) && !gatedKernel(m, k.k) {
							continue
						}
						o := matvecOpts{act: -1, norm: gb, eps: 1e-5, int8: tq2, gated: true, outAct: act}
						var ok bool
						d.do(func() error {
							d.matvecMode, d.matvecGrid = k.k, k.grid
							ok = d.canFuse(m, o)
							return nil
						})
						yb := up(t, d, y0, 0)
						if ok {
							run(t, d, func() error { return d.matvecWith(m, xb, yb, o) })
						}
						d.do(func() error { d.matvecMode, d.matvecGrid = matvecKernel{}, 0; return nil })
						if !ok && k.k == (matvecKernel{}) {
							continue // the shape's own kernel has no gated output
						}
						if !ok {
							t.Fatalf("kernel %s: the gated output refused", k.k)
						}
						ref := make([]float64, half)
						for i := range ref {
							ref[i] = gluRef(act, qt.DotRef(i, in), qt.DotRef(half+i, in))
						}
						got := down[float32](t, d, yb, sh.rows)
						name := fmt.Sprintf("act %d, kernel %s grid %d", act, k.k, k.grid)
						check(t, name, ref, got[:half], fusedTol(f))
						for i := half; i < sh.rows; i++ {
							if got[i] != y0[i] {
								t.Fatalf("%s: y[%d] = %v written past the outputs (was %v)", name, i, got[i], y0[i])
							}
						}
					}
				}
			})
		}
	}
}

// fusedTol is the relative L2 the fused products of format f are held to
// against float64.
func fusedTol(f quantize.Format) float64 {
	switch f {
	case quantize.Q4, quantize.Q8:
		return 3e-4 // x rounded to int16 (see TestMatVec)
	case quantize.TQ2:
		return 1e-3 // a float32 sum may round an int8 code the other way
	}
	return 2e-5
}

// gluRef is act(g) * u in float64 for SwiGLU and ReLU^2.
func gluRef(act GLU, g, u float64) float64 {
	if act == SwiGLU {
		return g / (1 + math.Exp(-g)) * u
	}
	return math.Max(g, 0) * math.Max(g, 0) * u
}

// int8Ref rounds x as BitNet's activations are: int8 by the absmax, back
// to floats.
func int8Ref(x []float64) []float64 {
	am := 1e-5
	for _, v := range x {
		am = math.Max(am, math.Abs(v))
	}
	s := float64(float32(127 / am))
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Max(-128, math.Min(127, math.RoundToEven(v*s))) / s
	}
	return out
}

// normRef is RMSNorm(x) * (g + add) in float64.
func normRef(x []float64, g []float32, add float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * s * (float64(g[i]) + add)
	}
	return out
}

// uploadQuantized quantizes w [rows, cols] to f and uploads it; the
// matrix is freed when the test ends.
func uploadQuantized(t *testing.T, d *Device, f quantize.Format, w []float32, rows, cols int) (*quantize.Tensor, *Matrix) {
	t.Helper()
	qt, err := quantize.Quantize(context.Background(), f, w, rows, cols, quantize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.Upload(qt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.FreeMatrix(m) })
	return qt, m
}

// TestTopK checks the device's candidates against a stable sort on the
// host: the k largest by value then index, the softmax denominator, the
// exactness flag; with ties, NaNs and -Inf; and a pattern that puts more
// of the top into one thread's share than it keeps, which must say so.
func TestTopK(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(35, 36))
	for _, tc := range []struct {
		name      string
		n, k      int
		fill      func(x []float32)
		wantExact bool
	}{
		{"random-32000", 32000, 256, func(x []float32) {
			for i := range x {
				x[i] = float32(r.NormFloat64() * 4)
			}
			x[10], x[11], x[12000] = x[9], x[9], float32(math.NaN())
			x[13] = float32(math.Inf(-1))
		}, true},
		{"random-128256", 128256, 256, func(x []float32) {
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
		}, true},
		{"all-equal", 32000, 256, func(x []float32) {
			for i := range x {
				x[i] = 1.5
			}
		}, true},
		{"one-thread-holds-the-top", 32000, 256, func(x []float32) {
			for i := range x {
				x[i] = float32(r.NormFloat64())
				if i%1024 == 0 {
					x[i] = 100 + float32(i)
				}
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := make([]float32, tc.n)
			tc.fill(x)
			xb := up(t, d, x, 0)
			out := up(t, d, make([]float32, 2*tc.k+4), 0)
			const temp = 0.7
			run(t, d, func() error { return d.topK(xb, tc.n, tc.k, temp, out, true) })
			raw := make([]byte, 8*tc.k+16)
			if err := d.do(func() error { return d.dtoh(raw, out, 0) }); err != nil {
				t.Fatal(err)
			}
			exact := binary.LittleEndian.Uint32(raw[8*tc.k:]) == 1
			if exact != tc.wantExact {
				t.Fatalf("exact %v, want %v", exact, tc.wantExact)
			}
			if !exact {
				return
			}
			type pair struct {
				v  float32
				id int
			}
			var all []pair
			for i, v := range x {
				if v == v {
					all = append(all, pair{v, i})
				}
			}
			sort.SliceStable(all, func(i, j int) bool { return all[i].v > all[j].v })
			var sum float64
			for _, p := range all {
				sum += float64(float32(math.Exp(float64((p.v - all[0].v) / temp))))
			}
			for i := 0; i < tc.k; i++ {
				v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
				id := int(int32(binary.LittleEndian.Uint32(raw[4*(tc.k+i):])))
				if v != all[i].v || id != all[i].id {
					t.Fatalf("candidate %d: %v (id %d), want %v (id %d)", i, v, id, all[i].v, all[i].id)
				}
			}
			got := math.Float64frombits(binary.LittleEndian.Uint64(raw[8*tc.k+8:]))
			if math.Abs(got-sum) > 1e-12*sum {
				t.Fatalf("sum of exp %v, want %v", got, sum)
			}
		})
	}
}
