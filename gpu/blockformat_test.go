package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"lowbit/half"
	"lowbit/model"
	"lowbit/quantize"
)

// blockFormats are GGUF's block formats (quantize.Spec.BlockScales), which
// the GPU runs from their blocks as they are.
var blockFormats = []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K}

// blockHalves are the byte offsets of each block format's fp16 fields in its
// block (ARCHITECTURE.md's layouts), which randomBlockTensor keeps finite.
var blockHalves = map[quantize.Format][]int{
	quantize.Q5_0: {0}, quantize.Q5_1: {0, 2}, quantize.Q2K: {80, 82}, quantize.Q3K: {108},
	quantize.Q4K: {0, 2}, quantize.Q5K: {0, 2}, quantize.Q6K: {208},
}

// studentT draws n Student-t values of 3 degrees of freedom: heavy tailed,
// as trained weights are.
func studentT(r *rand.Rand, n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		var chi float64
		for range 3 {
			g := r.NormFloat64()
			chi += g * g
		}
		w[i] = float32(r.NormFloat64() / math.Sqrt(chi/3))
	}
	return w
}

// randomBlockTensor is a [rows, cols] tensor of format f whose blocks are
// random bytes, so every bit of the codes and sub-block scales takes both
// values somewhere, with finite fp16 fields (CheckBlocks holds them so).
func randomBlockTensor(t *testing.T, r *rand.Rand, f quantize.Format, rows, cols int) *quantize.Tensor {
	t.Helper()
	s := f.Spec()
	q := &quantize.Tensor{Format: f, Rows: rows, Cols: cols, GroupSize: s.Block}
	q.Data = make([]byte, rows*q.RowBytes())
	for i := range q.Data {
		q.Data[i] = byte(r.Uint32())
	}
	for b := 0; b < len(q.Data); b += s.BlockBytes {
		for _, off := range blockHalves[f] {
			binary.LittleEndian.PutUint16(q.Data[b+off:], uint16(half.FromFloat32(float32(r.Float64()-0.3)*0.05)))
		}
	}
	if err := q.CheckBlocks(); err != nil {
		t.Fatal(err)
	}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	return q
}

// namedTensor is a test input.
type namedTensor struct {
	name string
	q    *quantize.Tensor
}

// blockTensors are the inputs of the block-format tests: Student-t weights
// quantized, and random blocks.
func blockTensors(t *testing.T, r *rand.Rand, f quantize.Format, rows, cols int) []namedTensor {
	t.Helper()
	q, err := quantize.Quantize(context.Background(), f, studentT(r, rows*cols), rows, cols, quantize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return []namedTensor{{"student-t", q}, {"random-blocks", randomBlockTensor(t, r, f, rows, cols)}}
}

// TestBlockFormatKernelChoice: a block format's decode product takes the
// plain kernel (matvec_blk) whatever kernel is forced, fuses nothing (so
// Linear runs the norm, the product, the gate and the add apart), and 2 to
// batchMaxTokens tokens take the batch kernel; but q4k's and q6k's take the
// shared-memory kernels with every fusion (q6k's rows at any alignment),
// and q4k's gate/up the gated output.
func TestBlockFormatKernelChoice(t *testing.T) {
	d := &Device{maxShared: 227 << 10}
	for _, f := range blockFormats {
		for _, sh := range []struct{ rows, cols int }{{4096, 4096}, {2048, 5632}, {32000, 2048}, {11264, 2048}} {
			qt := &quantize.Tensor{Format: f, Rows: sh.rows, Cols: sh.cols, GroupSize: f.Spec().Block}
			m := &Matrix{Format: f, Rows: sh.rows, Cols: sh.cols, GroupSize: qt.GroupSize, rowBytes: qt.RowBytes()}
			if sharedBlockFormat(f) {
				for _, o := range []matvecOpts{{act: -1}, {act: -1, accum: true}, {act: 0}} {
					if k := d.kernelFor(m, o); k != tableKernel(f, sh.rows, sh.cols, false) || k.kind != kindShared {
						t.Errorf("%s [%d, %d]: kernel %s, want the table's shared one", f, sh.rows, sh.cols, k)
					}
					if o.fused() && !d.canFuse(m, o) {
						t.Errorf("%s [%d, %d]: does not fuse %+v", f, sh.rows, sh.cols, o)
					}
				}
				if gated := d.canFuse(m, matvecOpts{act: -1, gated: true}); gated != (f == quantize.Q4K && sh.cols <= 2*sh.rows) { // (down projections: split rows, no gated kernel)
					t.Errorf("%s [%d, %d]: gated output %v", f, sh.rows, sh.cols, gated)
				}
				continue
			}
			for _, mode := range append([]matvecKernel{{}, matvecPlain, matvecFlat}, matvecKernels...) {
				d.matvecMode = mode
				for _, o := range []matvecOpts{{act: -1}, {act: -1, accum: true}, {act: -1, gated: true}, {act: 0}} {
					if k := d.kernelFor(m, o); k != matvecPlain {
						t.Errorf("%s [%d, %d], forced %s: kernel %s, want plain", f, sh.rows, sh.cols, mode, k)
					}
					if o.fused() && d.canFuse(m, o) {
						t.Errorf("%s [%d, %d], forced %s: fuses %+v", f, sh.rows, sh.cols, mode, o)
					}
				}
				if got, want := matvecPlain.name(m, false), fmt.Sprintf("matvec_%s_%d", f, threadsFor(sh.cols/32)); got != want {
					t.Errorf("%s [%d, %d]: plain kernel %s, want %s", f, sh.rows, sh.cols, got, want)
				}
			}
			d.matvecMode = matvecKernel{}
			for n, want := range map[int]bool{1: false, 2: true, 9: true, batchMaxTokens: true, batchMaxTokens + 1: false} {
				name, ok := batchKernel(m, n)
				if ok != want || (ok && name != "matvec_batch_"+string(f)) {
					t.Errorf("%s, %d tokens: batch kernel %q %v, want %v", f, n, name, ok, want)
				}
			}
		}
	}
}

// TestBlockKernelsBuilt checks that every kernel the host may launch for a
// block format is in the PTX of both architectures: the plain decode
// kernels, the batch kernel, the tiled matmul and the fp16 panel
// dequantizer for cuBLAS.
func TestBlockKernelsBuilt(t *testing.T) {
	exp, err := readExperiments()
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"sm80", "sm90"} {
		entries := map[string]bool{}
		for _, fam := range []string{"matvec", "matmul"} {
			ptx, err := readPTX(fam, arch, exp.ptxDir)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(`\.entry ([A-Za-z0-9_]+)\(`).FindAllStringSubmatch(string(ptx), -1) {
				entries[m[1]] = true
			}
		}
		for _, f := range append(blockFormats, superBlockFormats...) {
			want := []string{"matvec_batch_" + string(f), "matmul_" + string(f), "dequant_f16_" + string(f)}
			for _, nt := range []int{32, 64, 128} {
				want = append(want, fmt.Sprintf("matvec_%s_%d", f, nt))
			}
			for _, name := range want {
				if !entries[name] {
					t.Errorf("%s: the %s PTX has no kernel %s (run `make kernels` on the GPU machine)", f, arch, name)
				}
			}
		}
	}
}

// blockShapes are [rows, cols] of whole 256-weight blocks: rows of 16, 24,
// 64 and 176 32-weight units (one to two passes of the plain kernel's 32,
// 64 or 128 threads), row counts that are and are not multiples of its 4
// rows a block.
var blockShapes = []struct{ rows, cols int }{{96, 512}, {7, 768}, {300, 2048}, {33, 5632}}

// TestBlockMatVec checks the decode product of every block format against
// quantize's float64 reference (DotRef) on quantized Student-t weights and
// on random blocks, with every kernel mode forced (all give the plain
// kernel's result, but q4k's and q6k's, which have the shared-memory
// kernels too: each within the int16 rounding of x).
func TestBlockMatVec(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(41, 42))
	for _, sh := range blockShapes {
		x := gaussian(r, sh.cols)
		xf := f64(x)
		for _, f := range blockFormats {
			for _, in := range blockTensors(t, r, f, sh.rows, sh.cols) {
				qt := in.q
				t.Run(fmt.Sprintf("%s/%dx%d/%s", f, sh.rows, sh.cols, in.name), func(t *testing.T) {
					m, err := d.Upload(qt)
					if err != nil {
						t.Fatal(err)
					}
					defer d.FreeMatrix(m)
					if m.Bytes() != int64(len(qt.Data)) {
						t.Errorf("matrix reads %d bytes, its tensor has %d", m.Bytes(), len(qt.Data))
					}
					ref := make([]float64, sh.rows)
					for i := range ref {
						ref[i] = qt.DotRef(i, xf)
					}
					y, err := d.MatVecAct(m, x, ActFloat)
					if err != nil {
						t.Fatal(err)
					}
					// q4k's and q6k's shared-memory kernels round x to int16
					// per 32-weight block, as q4's (TestMatVec).
					tol := 1e-5
					if sharedBlockFormat(f) {
						tol = 1e-4
					}
					if e := relL2(ref, y); e > tol {
						t.Errorf("relative L2 %.3g", e)
					}
					if sharedBlockFormat(f) {
						// Every kernel, and grids small enough that blocks loop
						// over several row groups (the next group's first units
						// requested while the last are summed).
						type variant struct {
							k    matvecKernel
							grid int
						}
						variants := []variant{{matvecPlain, 0}, {matvecS2W4, 1}, {matvecS4W4, 3}, {matvecS1W16, 2}, {matvecS1W16K2, 2}, {matvecS1W32K2, 3}}
						for _, k := range matvecKernels {
							variants = append(variants, variant{k, 0})
						}
						for _, v := range variants {
							d.do(func() error { d.matvecMode, d.matvecGrid = v.k, v.grid; return nil })
							yk, err := d.MatVecAct(m, x, ActFloat)
							d.do(func() error { d.matvecMode, d.matvecGrid = matvecKernel{}, 0; return nil })
							if err != nil {
								t.Fatalf("forced %s: %v", v.k, err)
							}
							if e := relL2(ref, yk); e > tol {
								t.Errorf("forced %s, grid %d: relative L2 %.3g", v.k, v.grid, e)
							}
						}
						return
					}
					for _, k := range append([]matvecKernel{matvecPlain}, matvecKernels...) {
						d.do(func() error { d.matvecMode = k; return nil })
						yk, err := d.MatVecAct(m, x, ActFloat)
						d.do(func() error { d.matvecMode = matvecKernel{}; return nil })
						if err != nil {
							t.Fatalf("forced %s: %v", k, err)
						}
						for i := range y {
							if yk[i] != y[i] {
								t.Fatalf("forced %s: y[%d] = %v, the chosen kernel's %v", k, i, yk[i], y[i])
							}
						}
					}
				})
			}
		}
	}
}

// productRef is X[n, cols] W^T in float64 over W's dequantized weights.
func productRef(w []float32, x []float32, rows, cols, n int) []float64 {
	ref := make([]float64, n*rows)
	for tok := 0; tok < n; tok++ {
		xr := x[tok*cols : (tok+1)*cols]
		for i := 0; i < rows; i++ {
			var s float64
			for c, wv := range w[i*cols : (i+1)*cols] {
				s += float64(wv) * float64(xr[c])
			}
			ref[tok*rows+i] = s
		}
	}
	return ref
}

// TestBlockMatMul checks several tokens' products of every block format
// against float64 over the dequantized weights: 2 to batchMaxTokens
// tokens on the batch kernel, more on the tiled fp32 kernel (cuBLAS off here;
// TestBlockMatMulBlas has it).
func TestBlockMatMul(t *testing.T) {
	d := openOrSkip(t)
	d.do(func() error { d.blasOff = true; return nil })
	r := rand.New(rand.NewPCG(43, 44))
	for _, sh := range []struct{ rows, cols int }{{96, 512}, {300, 2048}, {7, 768}} {
		for _, f := range blockFormats {
			for _, in := range blockTensors(t, r, f, sh.rows, sh.cols) {
				qt := in.q
				m, err := d.Upload(qt)
				if err != nil {
					t.Fatal(err)
				}
				deq := qt.Dequantize()
				for _, n := range []int{2, 9, 64, 70, 128} {
					t.Run(fmt.Sprintf("%s/%dx%dx%d/%s", f, sh.rows, sh.cols, n, in.name), func(t *testing.T) {
						x := gaussian(r, n*sh.cols)
						y, err := d.MatMulMatrix(m, x, n)
						if err != nil {
							t.Fatal(err)
						}
						if e := relL2(productRef(deq, x, sh.rows, sh.cols, n), y); e > 2e-5 {
							t.Errorf("relative L2 %.3g", e)
						}
					})
				}
				d.FreeMatrix(m)
			}
		}
	}
}

// TestBlockMatMulBlas checks prompts of every block format through cuBLAS
// (panels dequantized to fp16 from the blocks) against float64 over the
// dequantized weights, within TestMatMulBlas's 2e-3.
func TestBlockMatMulBlas(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(45, 46))
	for _, sh := range []struct{ rows, cols, n int }{{300, 2048, 70}, {96, 512, 128}} {
		for _, f := range blockFormats {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", f, sh.rows, sh.cols, sh.n), func(t *testing.T) {
				qt := blockTensors(t, r, f, sh.rows, sh.cols)[0].q
				m, err := d.Upload(qt)
				if err != nil {
					t.Fatal(err)
				}
				defer d.FreeMatrix(m)
				x := gaussian(r, sh.n*sh.cols)
				y, err := d.MatMulMatrix(m, x, sh.n)
				if err != nil {
					t.Fatal(err)
				}
				if s := d.BlasStatus(); !strings.HasPrefix(s, "cuBLAS: ") || strings.HasPrefix(s, "cuBLAS: not") {
					t.Fatalf("cuBLAS not used: %s", s)
				}
				if e := relL2(productRef(qt.Dequantize(), x, sh.rows, sh.cols, sh.n), y); e > 2e-3 {
					t.Errorf("relative L2 %.3g", e)
				}
			})
		}
	}
}

// TestBackendBlockFormats runs a fixture model whose widths are whole
// 256-weight blocks with its linear weights in each block format on the
// GPU and on the CPU, as TestBackendMatchesCPU does: a prompt in chunks of
// 4 tokens (the batch kernel), then decode steps (the plain kernel, the
// norms, gates and adds apart); and, for q4k, a 70-token prompt in one
// chunk through cuBLAS and through the tiled kernel. "q4k-mix" is
// llama.cpp's Q4_K_M pattern: q4k linears but the first layer's v and down
// projections in q6k (so its q and k join apart from v), a q4k embedding
// table (widened on the device) and a q6k head. Logits agree within 1e-3,
// or 5e-3 after a prompt through cuBLAS (fp16 GEMM inputs, as
// TestBackendLongPrompt).
func TestBackendBlockFormats(t *testing.T) {
	d := openOrSkip(t)
	ctx := context.Background()
	mixed := map[string]quantize.Format{"model.embed_tokens.weight": quantize.Q4K, "lm_head.weight": quantize.Q6K,
		"model.layers.0.self_attn.v_proj.weight": quantize.Q6K, "model.layers.0.mlp.down_proj.weight": quantize.Q6K}
	mix := func(t *testing.T, m *model.Model) {
		for name, f := range mixed {
			w := m.Weights[name]
			q, err := quantize.Quantize(ctx, f, w.F32, w.Rows, w.Cols, quantize.Options{})
			if err != nil {
				t.Fatal(err)
			}
			m.Weights[name] = model.QuantWeight(q)
		}
	}
	prompt := make([]int, 70)
	r := rand.New(rand.NewPCG(47, 48))
	for i := range prompt {
		prompt[i] = r.IntN(wideSpec("LlamaForCausalLM").Vocab)
	}
	for _, tc := range []struct {
		name   string
		f      quantize.Format
		mix    bool
		long   bool
		blasOn bool
	}{
		{"q4k", quantize.Q4K, false, false, true},
		{"q6k", quantize.Q6K, false, false, true},
		{"q5k", quantize.Q5K, false, false, true},
		{"q5_0", quantize.Q5_0, false, false, true},
		{"q5_1", quantize.Q5_1, false, false, true},
		{"q2k", quantize.Q2K, false, false, true},
		{"q3k", quantize.Q3K, false, false, true},
		{"q2s", quantize.Q2S, false, false, true},
		{"q3s", quantize.Q3S, false, false, true},
		{"q4s", quantize.Q4S, false, false, true},
		{"q4s-long-cublas", quantize.Q4S, false, true, true}, // 5e-3 below
		{"q4s-long-tiled", quantize.Q4S, false, true, false},
		{"q4k-mix", quantize.Q4K, true, false, true},
		{"q4k-mix-long-cublas", quantize.Q4K, true, true, true}, // 5e-3 below
		{"q4k-mix-long-tiled", quantize.Q4K, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := wideSpec("LlamaForCausalLM")
			m := fixtureModel(t, spec, quantize.F32)
			if tc.mix {
				mix(t, m)
			}
			if err := m.Quantize(ctx, tc.f, quantize.Options{}, 0); err != nil {
				t.Fatal(err)
			}
			for name, w := range m.Weights {
				if _, ok := mixed[name]; tc.mix && ok {
					continue
				}
				if m.Config.TensorRole(name) == model.RoleLinear && w.Format() != tc.f {
					t.Fatalf("%s is %s, not %s", name, w.Format(), tc.f)
				}
			}
			d.do(func() error { d.blasOff = !tc.blasOn; return nil })
			defer d.do(func() error { d.blasOff = false; return nil })
			batch, p := 4, []int{1, 5, 9, 17, 33, 2, 70}
			if tc.long {
				batch, p = 128, prompt
			}
			cpu, err := m.NewSession(model.SessionOptions{Context: 128, Batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			gs, be := newGPUSession(t, d, m, 128, batch)
			// Every layer's q/k/v and gate/up joined: the mix's first
			// layer's q and k apart from its v. (A super-block format's
			// parts, each with its own table of scales, stay apart.)
			if want := 2 * spec.Layers; len(be.joined) != want && !tc.f.SuperBlock() || tc.f.SuperBlock() && len(be.joined) != 0 {
				t.Errorf("%d joined matrices", len(be.joined))
			}
			limit := 1e-3
			if tc.long && tc.blasOn {
				limit = 5e-3
			}
			worst := matchCPU(t, m, cpu, gs, p, 12, limit)
			t.Logf("%s: worst decode relative L2 %.2g", tc.name, worst)
		})
	}
}

// superBlockFormats are lowbit's super-block formats (quantize/sblock.go),
// which the GPU runs on the block formats' kernels with a table of scales.
var superBlockFormats = []quantize.Format{quantize.Q2S, quantize.Q3S, quantize.Q4S}

// TestSuperBlockProducts checks the products of lowbit's super-block
// formats against float64 over quantize's own decoding (DotRef, and the
// dequantized weights): decode on the plain kernel, 2 to batchMaxTokens
// tokens on the batch kernel, more on the tiled kernel and through
// cuBLAS's fp16 panels; rows of whole blocks and a padded one (172).
func TestSuperBlockProducts(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(51, 52))
	for _, sh := range []struct{ rows, cols int }{{96, 512}, {7, 768}, {33, 5632}, {6, 172}} {
		for _, f := range superBlockFormats {
			w := studentT(r, sh.rows*sh.cols)
			qt, err := quantize.Quantize(context.Background(), f, w, sh.rows, sh.cols, quantize.Options{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := d.Upload(qt)
			if err != nil {
				t.Fatal(err)
			}
			deq := qt.Dequantize()
			t.Run(fmt.Sprintf("%s/%dx%d", f, sh.rows, sh.cols), func(t *testing.T) {
				x := gaussian(r, sh.cols)
				xf := f64(x)
				ref := make([]float64, sh.rows)
				for i := range ref {
					ref[i] = qt.DotRef(i, xf)
				}
				y, err := d.MatVecAct(m, x, ActFloat)
				if err != nil {
					t.Fatal(err)
				}
				if e := relL2(ref, y); e > 1e-5 {
					t.Errorf("decode: relative L2 %.3g", e)
				}
				for _, n := range []int{2, 9, batchMaxTokens, 40, 70} {
					for _, blas := range []bool{false, true} {
						d.do(func() error { d.blasOff = !blas; return nil })
						xn := gaussian(r, n*sh.cols)
						yn, err := d.MatMulMatrix(m, xn, n)
						d.do(func() error { d.blasOff = false; return nil })
						if err != nil {
							t.Fatalf("%d tokens: %v", n, err)
						}
						tol := 2e-5
						if blas && n >= blasMinTokens {
							tol = 2e-3 // fp16 panels and inputs
						}
						if e := relL2(productRef(deq, xn, sh.rows, sh.cols, n), yn); e > tol {
							t.Errorf("%d tokens, cuBLAS %v: relative L2 %.3g", n, blas, e)
						}
					}
				}
			})
			d.FreeMatrix(m)
		}
	}
}
