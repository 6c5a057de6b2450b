package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"lowbit/half"
	"lowbit/quantize"
)

// openOrSkip opens GPU 0 or skips the test where there is none (CI).
func openOrSkip(t testing.TB) *Device {
	t.Helper()
	d, err := Open(0)
	if errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) {
		t.Skipf("no CUDA driver or GPU here: %v", err)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestPTXMatchesSource(t *testing.T) {
	fams, err := kernelFamilies()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) == 0 {
		t.Fatal("no kernel sources embedded")
	}
	exp, err := readExperiments()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		src, err := kernelFS.ReadFile("kernels/" + f + ".cu")
		if err != nil {
			t.Fatal(err)
		}
		want, err := sourceHash(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, arch := range []string{"sm80", "sm90"} {
			ptx, err := readPTX(f, arch, exp.ptxDir)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			got, err := parsePTXHash(ptx)
			if err != nil {
				t.Errorf("%s.%s.ptx: %v", f, arch, err)
				continue
			}
			if got != want {
				t.Errorf("%s.%s.ptx was built from another %s.cu (sha256 %s, the source is %s): run `make kernels` on the GPU machine", f, arch, f, got[:12], want[:12])
			}
		}
	}
}

func TestParsePTXHash(t *testing.T) {
	good := ptxHashPrefix + strings.Repeat("ab", 32) + "\n.version 8.0\n"
	tests := []struct {
		in      string
		wantErr bool
	}{
		{good, false},
		{"", true},
		{".version 8.0\n", true},
		{ptxHashPrefix + "xyz\n", true},
		{ptxHashPrefix + strings.Repeat("ab", 31) + "\n", true},
	}
	for _, tc := range tests {
		h, err := parsePTXHash([]byte(tc.in))
		if (err != nil) != tc.wantErr {
			t.Errorf("parsePTXHash(%q) = %q, %v; want error %v", tc.in, h, err, tc.wantErr)
		}
		if err == nil && h != strings.Repeat("ab", 32) {
			t.Errorf("parsePTXHash(%q) = %q", tc.in, h)
		}
	}
}

func FuzzParsePTXHash(f *testing.F) {
	f.Add([]byte(ptxHashPrefix + strings.Repeat("0f", 32) + "\n.version 8.0"))
	f.Add([]byte(""))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parsePTXHash(b)
		if err == nil && len(h) != 64 {
			t.Fatalf("accepted hash %q", h)
		}
	})
}

// TestMatvecKernelChoice pins the kernel each decode product of the
// benchmark models takes (matvecTable and kernelFor), so a change to the
// table shows as the shapes it moves. want names the kernels, without
// matvec_<format>_, of f32, f16, q8, q4, q2, q1, tq2 with int8 x (as
// BitNet runs it) and tq2 with float x; gated those of the same product
// with the gated output, "-" where it cannot take it.
func TestMatvecKernelChoice(t *testing.T) {
	formats := []quantize.Format{quantize.F32, quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2, quantize.TQ2}
	d := &Device{maxShared: 227 << 10} // an H100's or H200's shared memory a block
	for _, tc := range []struct {
		name        string
		rows, cols  int
		want, gated string
	}{
		{"tinyllama q/k/v", 2560, 2048, "64 64 s1w16 s2w8 s2w8 s2w8 flat32 s1w16", "- - s1w16g - - - flat32g -"},
		{"tinyllama q, o", 2048, 2048, "64 64 s1w16 s2w8 s2w8 s2w8 flat32 s1w16", "- - s1w16g - - - flat32g -"},
		{"tinyllama k, v", 256, 2048, "64 64 s1w32k2 s1w32k2 s2w8 s2w8 flat32 s1w32k2", "- - - - - - flat32g -"},
		{"tinyllama gate/up", 11264, 2048, "64 64 s1w16 s4w4 s4w4 s4w4 flat32 s4w4", "- - s1w16g s4w4g - - flat32g -"},
		{"tinyllama gate, up", 5632, 2048, "64 64 s1w16 s2w8 s2w8 s2w8 flat32 s1w16", "- - s1w16g - - - flat32g -"},
		{"tinyllama down", 2048, 5632, "128 128 s1w32k2 s1w32k2 s2w8 s2w8 s1w32k2 s1w32k2", "- - - - - - - -"},
		{"tinyllama head", 32000, 2048, "64 64 s1w16 s4w4 s4w4 s4w4 flat32 s4w4", "- - s1w16g s4w4g - - flat32g -"},
		{"llama7b q/k/v", 12288, 4096, "128 128 s1w16 s1w32 s4w4 s4w4 flat64 s4w4", "- - s1w16g s2w16g - - flat64g -"},
		{"llama7b q, k, v, o", 4096, 4096, "128 128 s1w16 s1w32 s2w8 s2w8 flat64 s1w16", "- - s1w16g s2w16g - - flat64g -"},
		{"llama7b gate/up", 22016, 4096, "128 128 s1w16 s1w32 s4w4 s4w4 flat64 s4w4", "- - s1w16g s2w16g - - flat64g -"},
		{"llama7b gate, up", 11008, 4096, "128 128 s1w16 s1w32 s4w4 s4w4 flat64 s4w4", "- - s1w16g s2w16g - - flat64g -"},
		{"llama7b down", 4096, 11008, "128 128 s1w32k2 s1w32 s2w8 s2w8 s1w32k2 s1w32k2", "- - - s2w16g - - - -"},
		{"llama7b head", 32000, 4096, "128 128 s1w16 s1w32 s4w4 s4w4 flat64 s4w4", "- - s1w16g s2w16g - - flat64g -"},
		{"bitnet2b q/k/v", 3840, 2560, "128 128 s1w16 s2w8 s2w8 s2w8 flat40 s1w16", "- - s1w16g - - - flat40g -"},
		{"bitnet2b q, o", 2560, 2560, "128 128 s1w16 s2w8 s2w8 s2w8 flat40 s1w16", "- - s1w16g - - - flat40g -"},
		{"bitnet2b k, v", 640, 2560, "128 128 s1w32k2 s1w32k2 s2w8 s2w8 flat40 s1w32k2", "- - - - - - flat40g -"},
		{"bitnet2b gate/up", 13824, 2560, "128 128 s1w16 s4w4 s4w4 s4w4 flat40 s4w4", "- - s1w16g s4w4g - - flat40g -"},
		{"bitnet2b gate, up", 6912, 2560, "128 128 s1w16 s2w8 s2w8 s2w8 flat40 s1w16", "- - s1w16g - - - flat40g -"},
		{"bitnet2b down", 2560, 6912, "128 128 s1w32k2 s1w32k2 s2w8 s2w8 flat108 s1w32k2", "- - - - - - - -"},
		{"bitnet2b head", 128256, 2560, "128 128 s2w8 s4w4 s4w4 s4w4 flat40 s4w4", "- - - s4w4g - - flat40g -"},
	} {
		want, gated := strings.Fields(tc.want), strings.Fields(tc.gated)
		if len(want) != len(formats) || len(gated) != len(formats) {
			t.Fatalf("%s: %d and %d kernels for %d formats", tc.name, len(want), len(gated), len(formats))
		}
		for i, f := range formats {
			qt := &quantize.Tensor{Format: f, Rows: tc.rows, Cols: tc.cols, GroupSize: f.DefaultGroupSize()}
			m := &Matrix{Format: f, Rows: tc.rows, Cols: tc.cols, GroupSize: qt.GroupSize, rowBytes: qt.RowBytes()}
			int8 := f == quantize.TQ2 && i < len(formats)-1
			o := matvecOpts{act: -1, int8: int8}
			if got := d.kernelFor(m, o).name(m, false); got != "matvec_"+string(f)+"_"+want[i] {
				t.Errorf("%s %s [%d, %d] (int8 x %v): kernel %s, want matvec_%s_%s", tc.name, f, tc.rows, tc.cols, int8, got, f, want[i])
			}
			o.gated = true
			got := "-"
			if d.canFuse(m, o) {
				got = strings.TrimPrefix(d.kernelFor(m, o).name(m, true), "matvec_"+string(f)+"_")
			}
			if got != gated[i] {
				t.Errorf("%s %s [%d, %d] (int8 x %v), gated output: kernel %s, want %s", tc.name, f, tc.rows, tc.cols, int8, got, gated[i])
			}
		}
	}
}

// TestMatvecKernelsBuilt checks that every kernel the host may launch for
// a decode product is in the PTX of both architectures: matvecTable's and
// the sweeps' (matvecKernels) for every format, the gated ones of
// matvecGated, the flat ones of flatKernels.
func TestMatvecKernelsBuilt(t *testing.T) {
	exp, err := readExperiments()
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"sm80", "sm90"} {
		ptx, err := readPTX("matvec", arch, exp.ptxDir)
		if err != nil {
			t.Fatal(err)
		}
		entries := map[string]bool{}
		for _, m := range regexp.MustCompile(`\.entry ([A-Za-z0-9_]+)\(`).FindAllStringSubmatch(string(ptx), -1) {
			entries[m[1]] = true
		}
		want := map[string]bool{}
		for _, f := range []quantize.Format{quantize.F32, quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2, quantize.Q4K, quantize.Q6K} {
			m := &Matrix{Format: f, Cols: 4096}
			for _, e := range matvecTable {
				if e.format == f || e.format == "" {
					want[e.kernel.name(m, false)] = true
				}
				if e.format == f && e.gated != (matvecKernel{}) {
					want[e.gated.name(m, true)] = true
				}
			}
			for _, k := range matvecKernels {
				want[k.name(m, false)] = true
			}
			for _, k := range matvecGated[f] {
				want[k.name(m, true)] = true
			}
			if f == quantize.Q4 || f == quantize.Q8 {
				want["matvec_batchs_"+string(f)] = true
			}
			for _, cols := range []int{32, 64, 128} {
				m.Cols = cols * 32
				want[matvecPlain.name(m, false)] = true
			}
		}
		for _, k := range flatKernels {
			m := &Matrix{Format: quantize.TQ2, Cols: 64 * k.chunks}
			fk, gated, ok := flatKernelOf(m)
			if !ok || gated != k.gated {
				t.Errorf("flatKernelOf(tq2 [, %d]) = %v, %v, %v", m.Cols, fk, gated, ok)
				continue
			}
			want[fk.name(m, false)] = true
			if gated {
				want[fk.name(m, true)] = true
			}
		}
		for name := range want {
			if !entries[name] {
				t.Errorf("%s: matvec.%s.ptx has no kernel %s", name, arch, name)
			}
		}
	}
}

// TestGatedKernel checks which kernels say they have a gated output: the
// flat tq2 kernels but the down projections' (6912 weights a row), and the
// MATVECG list of matvec.cu.
func TestGatedKernel(t *testing.T) {
	for _, tc := range []struct {
		f    quantize.Format
		cols int
		k    matvecKernel
		want bool
	}{
		{quantize.TQ2, 2560, matvecFlat, true},
		{quantize.TQ2, 6912, matvecFlat, false},
		{quantize.TQ2, 2560, matvecS1W16, true},
		{quantize.TQ2, 2560, matvecS2W8, false},
		{quantize.Q4, 4096, matvecS2W16, true},
		{quantize.Q8, 4096, matvecS2W16, false},
		{quantize.Q8, 2048, matvecS4W4, true},
		{quantize.F16, 2048, matvecS4W4, false},
	} {
		m := &Matrix{Format: tc.f, Rows: 64, Cols: tc.cols}
		if got := gatedKernel(m, tc.k); got != tc.want {
			t.Errorf("gatedKernel(%s [64, %d], %s) = %v, want %v", tc.f, tc.cols, tc.k, got, tc.want)
		}
	}
}

// TestFlatKernels checks flatKernels against the MATVEC_FLAT lines of
// matvec.cu: the same NCH, rows a warp and gated twins (with the rows of
// their plain kernel), so the host launches what the PTX holds. (The rows
// a warp are in no PTX name: TestMatvecKernelsBuilt cannot see them.)
func TestFlatKernels(t *testing.T) {
	src, err := kernelFS.ReadFile("kernels/matvec.cu")
	if err != nil {
		t.Fatal(err)
	}
	type flat struct {
		rows  int
		gated bool
	}
	line := regexp.MustCompile(`(?m)^MATVEC_FLAT.*$`)
	call := regexp.MustCompile(`MATVEC_FLAT\((\d+), (\d+), (true|false), \w*, \d+, \d+\)`)
	built := map[int]flat{}
	gatedRows := map[int]int{}
	for _, l := range line.FindAllString(string(src), -1) {
		for _, c := range call.FindAllStringSubmatch(l, -1) {
			rows, _ := strconv.Atoi(c[1])
			nch, _ := strconv.Atoi(c[2])
			if c[3] == "true" {
				gatedRows[nch] = rows
				continue
			}
			built[nch] = flat{rows: rows}
		}
	}
	for nch, rows := range gatedRows {
		k, ok := built[nch]
		if !ok || k.rows != rows {
			t.Errorf("matvec_tq2_flat%dg takes %d rows a warp, its plain kernel %+v", nch, rows, k)
		}
		k.gated = true
		built[nch] = k
	}
	listed := map[int]flat{}
	for _, k := range flatKernels {
		listed[k.chunks] = flat{k.rows, k.gated}
	}
	if fmt.Sprint(built) != fmt.Sprint(listed) {
		t.Errorf("matvec.cu builds flat kernels %v, flatKernels says %v", built, listed)
	}
}

func TestOpenWithoutGPU(t *testing.T) {
	d, err := Open(0)
	if err == nil {
		d.Close()
		t.Skip("a GPU is present")
	}
	if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open without a GPU: %v, want ErrNoDriver or ErrNoDevice", err)
	}
	if !strings.Contains(err.Error(), "CUDA") {
		t.Errorf("error %q does not say CUDA", err)
	}
}

func TestDevice(t *testing.T) {
	d := openOrSkip(t)
	major, minor := d.Capability()
	t.Logf("%s, sm_%d%d, %.1f GiB", d, major, minor, float64(d.TotalMem())/(1<<30))
	if d.Name() == "" || major < 8 || d.TotalMem() <= 0 {
		t.Fatalf("device %q sm_%d%d %d bytes", d.Name(), major, minor, d.TotalMem())
	}
	if _, err := Open(99); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open(99) = %v, want ErrNoDevice", err)
	}
	// Memory: round trip, pool reuse, stats.
	b, err := d.Alloc(1000, MemScratch)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := d.CopyToDevice(b, src); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1000)
	if err := d.CopyFromDevice(got, b); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(src) {
		t.Fatal("device round trip changed the bytes")
	}
	if s := d.MemStats(); s.Scratch != 1024 {
		t.Errorf("scratch in use %d, want 1024", s.Scratch)
	}
	d.Free(b)
	b2, err := d.Alloc(900, MemScratch)
	if err != nil {
		t.Fatal(err)
	}
	if b2.Ptr() != b.Ptr() {
		t.Errorf("pool did not reuse the freed block")
	}
	d.Free(b2)
	if err := d.CopyToDevice(b2, make([]byte, 2000)); err == nil {
		t.Error("copy past a buffer's end was accepted")
	}
	if _, err := d.Alloc(1<<50, MemScratch); !IsOutOfMemory(err) {
		t.Errorf("a 1 PiB allocation gave %v, want out of memory", err)
	}
}

func gaussian(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// relL2 is ||got - ref|| / ||ref|| with a float64 reference; NaN fails.
func relL2(ref []float64, got []float32) float64 {
	var num, den float64
	for i := range ref {
		e := float64(got[i]) - ref[i]
		num += e * e
		den += ref[i] * ref[i]
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

var testShapes = []struct{ rows, cols, group int }{
	{1, 32, 32}, {7, 100, 32}, {64, 256, 64}, {9, 2560, 128}, {130, 2048, 32}, {33, 5632, 128}, {300, 4096, 32}, {20, 16384, 64},
}

func TestMatVec(t *testing.T) {
	d := openOrSkip(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range testShapes {
		w := gaussian(r, sh.rows*sh.cols)
		x := gaussian(r, sh.cols)
		for _, f := range []quantize.Format{quantize.F32, quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2} {
			t.Run(fmt.Sprintf("%s/%dx%d/g%d", f, sh.rows, sh.cols, sh.group), func(t *testing.T) {
				var m *Matrix
				ref := make([]float64, sh.rows)
				var err error
				var qt *quantize.Tensor
				if f.Quantized() {
					gs := sh.group
					if f == quantize.TQ2 {
						gs = 0
					}
					qt, err = quantize.Quantize(ctx, f, w, sh.rows, sh.cols, quantize.Options{GroupSize: gs})
					if err != nil {
						t.Fatal(err)
					}
					m, err = d.Upload(qt)
					xf := f64(x)
					for i := range ref {
						ref[i] = qt.DotRef(i, xf)
					}
				} else {
					m, err = d.UploadFloat(f, w, sh.rows, sh.cols)
					for i := range ref {
						for c := 0; c < sh.cols; c++ {
							wv := w[i*sh.cols+c]
							if f == quantize.F16 {
								wv = half.Round16(wv)
							}
							ref[i] += float64(wv) * float64(x[c])
						}
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				defer d.FreeMatrix(m)
				y, err := d.MatVecAct(m, x, ActFloat)
				if err != nil {
					t.Fatal(err)
				}
				// q4's and q8's shared-memory kernels round x to int16 per
				// 32-weight block (integer dot products): about 2e-5
				// relative, far below either format's own rounding.
				tol := 2e-5
				if f == quantize.Q4 || f == quantize.Q8 {
					tol = 1e-4
				}
				if e := relL2(ref, y); e > tol {
					t.Errorf("float activations: relative L2 %.3g", e)
				}
				// Every kernel variant, and blocks of the fast kernel looping
				// over several row groups.
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
					y, err := d.MatVecAct(m, x, ActFloat)
					d.do(func() error { d.matvecMode, d.matvecGrid = matvecKernel{}, 0; return nil })
					if err != nil {
						t.Fatal(err)
					}
					if e := relL2(ref, y); e > tol {
						t.Errorf("float activations, kernel %s, grid %d: relative L2 %.3g", v.k, v.grid, e)
					}
				}
				// int8 and binary activations where the format has them.
				var refA []float64
				var act Activations
				switch f {
				case quantize.TQ2, quantize.Q8:
					var a quantize.Int8Vec
					quantize.QuantizeInt8(x, &a)
					for i := 0; i < sh.rows; i++ {
						refA = append(refA, qt.DotInt8Ref(i, &a))
					}
					act = ActInt8
				case quantize.Q1:
					var a quantize.BinaryVec
					quantize.Binarize(x, sh.group, &a)
					for i := 0; i < sh.rows; i++ {
						refA = append(refA, qt.DotBinaryRef(i, &a))
					}
					act = ActBinary
				default:
					return
				}
				y, err = d.MatVecAct(m, x, act)
				if err != nil {
					t.Fatal(err)
				}
				if e := relL2(refA, y); e > 2e-5 {
					t.Errorf("activation mode %d: relative L2 %.3g", act, e)
				}
			})
		}
	}
}

func TestMatMul(t *testing.T) {
	d := openOrSkip(t)
	d.blasOff = true // lowbit's own kernel; TestMatMulBlas checks cuBLAS
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	// (2 to batchMaxTokens tokens of whole 32-weight blocks: matvec_batch, or
	// matvec_batchs where the rows suit it)
	for _, sh := range []struct{ rows, cols, n int }{{1, 32, 1}, {70, 100, 3}, {130, 2048, 70}, {64, 512, 128},
		{100, 256, 2}, {67, 2048, 9}, {301, 512, 64}, {64, 96, 17}} {
		w := gaussian(r, sh.rows*sh.cols)
		x := gaussian(r, sh.n*sh.cols)
		for _, f := range []quantize.Format{quantize.F32, quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2} {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", f, sh.rows, sh.cols, sh.n), func(t *testing.T) {
				var m *Matrix
				var err error
				var deq []float32
				if f == quantize.F32 {
					m, err = d.UploadFloat(f, w, sh.rows, sh.cols)
					deq = w
				} else {
					qt, qerr := quantize.Quantize(ctx, f, w, sh.rows, sh.cols, quantize.Options{})
					if qerr != nil {
						t.Fatal(qerr)
					}
					m, err = d.Upload(qt)
					deq = qt.Dequantize()
				}
				if err != nil {
					t.Fatal(err)
				}
				defer d.FreeMatrix(m)
				y, err := d.MatMulMatrix(m, x, sh.n)
				if err != nil {
					t.Fatal(err)
				}
				ref := make([]float64, sh.n*sh.rows)
				for tok := 0; tok < sh.n; tok++ {
					for i := 0; i < sh.rows; i++ {
						var s float64
						for c := 0; c < sh.cols; c++ {
							s += float64(deq[i*sh.cols+c]) * float64(x[tok*sh.cols+c])
						}
						ref[tok*sh.rows+i] = s
					}
				}
				// q4's and q8's batches through matvec_batchs round x to
				// int16 per 32-weight block, as their matvecs (TestMatVec).
				tol := 2e-5
				if _, _, ok := d.batchShared(m, sh.n); ok {
					tol = 1e-4
				}
				if e := relL2(ref, y); e > tol {
					t.Errorf("relative L2 %.3g", e)
				}
			})
		}
	}
}

func TestGraphReplay(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols := 256, 1024
	w := gaussian(r, rows*cols)
	_, m := uploadQuantized(t, d, quantize.Q4, w, rows, cols)
	x := gaussian(r, cols)
	want, err := d.MatVecAct(m, x, ActFloat)
	if err != nil {
		t.Fatal(err)
	}
	err = d.do(func() error {
		xb, err := d.uploadNew(bytesOf(x), 0, MemScratch)
		if err != nil {
			return err
		}
		defer d.free(xb)
		yb, err := d.alloc(int64(4*rows), MemScratch)
		if err != nil {
			return err
		}
		defer d.free(yb)
		g, err := d.capture(func() error { return d.matvec(m, xb, yb) })
		if err != nil {
			return err
		}
		defer g.Destroy()
		for i := 0; i < 3; i++ {
			if err := d.memset(yb, 0xff); err != nil {
				return err
			}
			if err := d.launchGraph(g); err != nil {
				return err
			}
			got := make([]float32, rows)
			if err := d.dtoh(bytesOf(got), yb, 0); err != nil {
				return err
			}
			for j := range got {
				if got[j] != want[j] {
					return fmt.Errorf("replay %d: y[%d] = %v, want %v", i, j, got[j], want[j])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
