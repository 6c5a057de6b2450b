package quantize

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var ctx = context.Background()

func gaussian(r *rand.Rand, n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	return w
}

// heavy draws Student-t (3 degrees of freedom) values with a few large outliers.
func heavy(r *rand.Rand, n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		z := r.NormFloat64()
		chi := 0.0
		for k := 0; k < 3; k++ {
			g := r.NormFloat64()
			chi += g * g
		}
		w[i] = float32(z / math.Sqrt(chi/3))
		if r.IntN(500) == 0 {
			w[i] *= 20
		}
	}
	return w
}

var allFormats = []Format{Q8, Q4, Q2, Q1, TQ2}

func TestBlockLayoutSizes(t *testing.T) {
	// Byte sizes of 32 weights, asserted like llama.cpp's static_asserts.
	want := map[Format]int{Q8: 32, Q4: 16, Q2: 8, Q1: 4, TQ2: 8}
	for f, n := range want {
		if got := f.Spec().BlockBytes; got != n {
			t.Errorf("%s: %d bytes per 32 weights, want %d", f, got, n)
		}
		tt := Tensor{Format: f, Rows: 1, Cols: 100, GroupSize: f.DefaultGroupSize()}
		if got := tt.RowBytes(); got != 4*n { // 100 weights -> 4 blocks
			t.Errorf("%s: row of 100 takes %d bytes, want %d", f, got, 4*n)
		}
	}
	tt := Tensor{Format: Q4, Rows: 1, Cols: 100, GroupSize: 64}
	if tt.Groups() != 2 || tt.RowBytes() != 64 {
		t.Errorf("q4 g64 of 100: %d groups, %d bytes", tt.Groups(), tt.RowBytes())
	}
}

// blockFormats are GGUF's block layouts (Spec.BlockScales).
var blockFormats = []Format{Q5_0, Q5_1, Q2K, Q3K, Q4K, Q5K, Q6K}

// sblockFormats are lowbit's super-block formats (sblock.go).
var sblockFormats = []Format{Q2S, Q3S, Q4S}

// TestSpecs holds every Spec to its layout, as llama.cpp's static_asserts
// hold a block struct to its size: a block is Block codes of CodeBits (and
// a block format's scales, to Bits a weight), the codes a quantizer writes
// lie in MinCode..MaxCode, and every part a fact promises is there.
func TestSpecs(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	w := heavy(r, 2*512)
	for _, f := range slices.Concat([]Format{F32, F16, BF16, Q8, Q4, Q2, Q1, TQ2}, blockFormats, sblockFormats) {
		s := f.Spec()
		if s.Format != f {
			t.Errorf("%s: Spec describes %q", f, s.Format)
		}
		if !f.Quantized() {
			if s.Bits < 16 || s.CodeBits != 0 || s.Group != 0 || s.quantizeRow != nil || s.dot != nil || s.BlockBytes != 0 {
				t.Errorf("%s: a float format with packing facts: %+v", f, s)
			}
			continue
		}
		cols := 300
		if s.BlockScales {
			cols = 512
			if float64(s.BlockBytes*8) != s.Bits*float64(s.Block) || s.BlockBytes*8 <= s.CodeBits*s.Block {
				t.Errorf("%s: %d bytes a block of %d weights at %v bits, %d-bit codes", f, s.BlockBytes, s.Block, s.Bits, s.CodeBits)
			}
			if s.MaxCode-s.MinCode+1 != 1<<s.CodeBits {
				t.Errorf("%s: codes %d..%d in %d bits", f, s.MinCode, s.MaxCode, s.CodeBits)
			}
			if s.Group != s.Block || s.TableGroup != s.Block || s.Mins || s.TensorScale || s.Block%block != 0 {
				t.Errorf("%s: block %d, groups %d and %d, mins %v, tensor scale %v", f, s.Block, s.Group, s.TableGroup, s.Mins, s.TensorScale)
			}
			if fb := s.Fallback.Spec(); !s.Fallback.Quantized() || fb.BlockScales || fb.TensorScale {
				t.Errorf("%s: falls back to %q, not a format of any row length", f, s.Fallback)
			}
			if s.scale == nil || s.blocks == nil || s.blocks.pack == nil || len(s.halves) == 0 || s.pack != nil {
				t.Errorf("%s: a block format lacks its scales' functions", f)
			}
		} else if s.sblock != nil {
			if s.Block != block || s.BlockBytes != 2+s.CodeBits*block/8 || float64(s.BlockBytes*8) != s.Bits*block ||
				s.sblock.blockBytes != s.BlockBytes || s.sblock.bits != s.CodeBits {
				t.Errorf("%s: %d bytes a block of %d %d-bit codes at %v bits", f, s.BlockBytes, s.Block, s.CodeBits, s.Bits)
			}
			if !s.TensorScale || s.Group != 0 || s.TableGroup != 0 || s.Mins || s.BlockScales || s.Fallback != "" ||
				s.MinCode != 0 || s.MaxCode != 1<<s.CodeBits-1 || s.scale == nil || s.pack != nil || s.blocks != nil {
				t.Errorf("%s: a super-block format's facts: %+v", f, s)
			}
		} else {
			if s.Block != block || s.BlockBytes*8 != s.CodeBits*block || s.Fallback != "" || s.scale != nil || s.blocks != nil {
				t.Errorf("%s: %d bytes a block of %d %d-bit codes", f, s.BlockBytes, s.Block, s.CodeBits)
			}
			if s.Bits > float64(s.CodeBits) || s.Bits <= float64(s.CodeBits-1) || s.MaxCode >= 1<<s.CodeBits {
				t.Errorf("%s: %v bits, max code %d, in %d-bit codes", f, s.Bits, s.MaxCode, s.CodeBits)
			}
			if s.TensorScale != (s.Group == 0) || s.Group%block != 0 || s.TableGroup%block != 0 || s.TensorScale != (s.TableGroup == 0) {
				t.Errorf("%s: groups %d and %d (tables), tensor scale %v", f, s.Group, s.TableGroup, s.TensorScale)
			}
			if s.Mins && s.MinCode != 0 || !s.Mins && s.MinCode != -s.MaxCode || s.Mins && s.pack == nil {
				t.Errorf("%s: codes %d..%d, mins %v", f, s.MinCode, s.MaxCode, s.Mins)
			}
		}
		if s.quantizeRow == nil || s.code == nil || s.dequantize == nil || s.dot == nil ||
			s.Int8Activations && s.dotInt8 == nil || !(s.maxAbs > 0) {
			t.Errorf("%s: Spec lacks a function or a limit", f)
		}
		q, err := Quantize(ctx, f, w[:2*cols], 2, cols, Options{Search: true})
		if err != nil {
			t.Fatal(err)
		}
		for row := 0; row < 2; row++ {
			for c, code := range q.RowCodes(row) {
				if code < s.MinCode || code > s.MaxCode {
					t.Fatalf("%s: weight %d of row %d has code %d, outside %d..%d", f, c, row, code, s.MinCode, s.MaxCode)
				}
			}
		}
	}
	if s := Format("q3").Spec(); Format("q3").Quantized() || s.Bits != 32 || s.Group != 0 {
		t.Errorf("an unknown format has facts: %+v", s)
	}
}

// TestKnownLayout builds packed bytes by hand and checks each weight's code.
func TestKnownLayout(t *testing.T) {
	row := make([]byte, 16)
	row[3] = 0xA5 // q4: weight 3 = 5 (low), weight 19 = 10 (high)
	if Q4.spec().code(row, 3) != 5 || Q4.spec().code(row, 19) != 10 {
		t.Errorf("q4 nibbles: %d %d", Q4.spec().code(row, 3), Q4.spec().code(row, 19))
	}
	row = make([]byte, 8)
	row[2] = 0b11_10_01_00 // q2: weights 2, 10, 18, 26 = 0, 1, 2, 3
	for k, c := range []int{2, 10, 18, 26} {
		if Q2.spec().code(row, c) != int32(k) {
			t.Errorf("q2 weight %d = %d, want %d", c, Q2.spec().code(row, c), k)
		}
		if TQ2.spec().code(row, c) != int32(k-1) {
			t.Errorf("tq2 weight %d = %d, want %d", c, TQ2.spec().code(row, c), k-1)
		}
	}
	row = []byte{0x01, 0, 0, 0x80} // q1: bit 0 and bit 31 set
	if Q1.spec().code(row, 0) != 1 || Q1.spec().code(row, 31) != 1 || Q1.spec().code(row, 1) != -1 {
		t.Error("q1 bits")
	}
}

func TestRoundTripExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range allFormats {
		for _, cols := range []int{32, 100, 257} {
			w := heavy(r, 3*cols)
			q, err := Quantize(ctx, f, w, 3, cols, Options{Search: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Validate(); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			// Repacking the unpacked codes gives the same bytes.
			re := repack(t, q)
			for i := range re {
				if re[i] != q.Data[i] {
					t.Fatalf("%s cols %d: byte %d repacks to %#x, was %#x", f, cols, i, re[i], q.Data[i])
				}
			}
			// Re-quantizing the dequantized weights with the same scales gives the same codes.
			deq := q.Dequantize()
			for r := 0; r < 3; r++ {
				codes := q.RowCodes(r)
				for c := range codes {
					if got := q.weight(r, c, codes[c]); got != deq[r*cols+c] {
						t.Fatalf("%s: dequantized weight differs", f)
					}
				}
			}
		}
	}
}

// repack packs RowCodes again with the layout's definition.
func repack(t *testing.T, q *Tensor) []byte {
	out := make([]byte, len(q.Data))
	rb := q.RowBytes()
	for r := 0; r < q.Rows; r++ {
		codes := q.RowCodes(r)
		dst := out[r*rb : (r+1)*rb]
		nb := rb / q.Format.Spec().BlockBytes
		if q.Format == TQ2 {
			for i := range dst {
				dst[i] = 0x55
			}
		}
		for c := 0; c < nb*block; c++ {
			var v int32
			if c < len(codes) {
				v = codes[c]
			} else if q.Format == TQ2 {
				v = 0
			}
			b, j := c/block, c%block
			switch q.Format {
			case Q8:
				dst[c] = byte(int8(v))
			case Q4:
				if j < 16 {
					dst[b*16+j] |= byte(v)
				} else {
					dst[b*16+j-16] |= byte(v) << 4
				}
			case Q2:
				dst[b*8+j%8] |= byte(v) << (2 * (j / 8))
			case TQ2:
				k, s := b*8+j%8, 2*(j/8)
				dst[k] = dst[k]&^(3<<s) | byte(v+1)<<s
			case Q1:
				if v == 1 {
					dst[c/8] |= 1 << (c % 8)
				}
			}
		}
	}
	return out
}

func TestDotMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, f := range allFormats {
		for _, g := range []int{32, 64, 128} {
			if f == TQ2 && g != 32 {
				continue
			}
			for _, cols := range []int{32, 64, 96, 129, 300, 1000} {
				rows := 5
				w := gaussian(r, rows*cols)
				q, err := Quantize(ctx, f, w, rows, cols, Options{GroupSize: g, Search: true})
				if err != nil {
					t.Fatal(err)
				}
				x := gaussian(r, cols)
				x64 := make([]float64, cols)
				for i, v := range x {
					x64[i] = float64(v)
				}
				for row := 0; row < rows; row++ {
					ref, got := q.DotRef(row, x64), float64(q.Dot(row, x))
					if math.Abs(got-ref) > 1e-5*(1+math.Abs(ref))*math.Sqrt(float64(cols)) {
						t.Errorf("%s g%d cols %d row %d: Dot %v, DotRef %v", f, g, cols, row, got, ref)
					}
				}
				// Int8 activations.
				var a Int8Vec
				QuantizeInt8(x, &a)
				for row := 0; row < rows; row++ {
					ref, got := q.DotInt8Ref(row, &a), float64(q.DotInt8(row, &a))
					if math.Abs(got-ref) > 1e-5*(1+math.Abs(ref))*math.Sqrt(float64(cols)) {
						t.Errorf("%s g%d cols %d row %d: DotInt8 %v, ref %v", f, g, cols, row, got, ref)
					}
				}
				if f == Q1 {
					var b BinaryVec
					Binarize(x, q.GroupSize, &b)
					for row := 0; row < rows; row++ {
						ref, got := q.DotBinaryRef(row, &b), float64(q.DotBinary(row, &b))
						if math.Abs(got-ref) > 1e-4*(1+math.Abs(ref)) {
							t.Errorf("q1 g%d cols %d row %d: DotBinary %v, ref %v", g, cols, row, got, ref)
						}
					}
				}
				// MatVec and MatMul equal per-row Dot.
				y := make([]float32, rows)
				MatVec(ctx, q, x, y, 3)
				xx := append(append([]float32{}, x...), x...)
				yy := make([]float32, 2*rows)
				MatMul(ctx, q, xx, 2, yy, 3)
				for row := 0; row < rows; row++ {
					want := q.Dot(row, x)
					if f == TQ2 {
						want = q.DotInt8(row, &a)
					}
					if y[row] != want || yy[row] != want || yy[rows+row] != want {
						t.Errorf("%s: MatVec/MatMul row %d = %v/%v/%v, want %v", f, row, y[row], yy[row], yy[rows+row], want)
					}
				}
			}
		}
	}
}

// Documented error bounds: relative L2 error of dequantized weights, group 32,
// search on, measured on 64x1024 matrices (seeded; 2026-11-22: gaussian q8 0.0052,
// q4 0.071, q2 0.30, q1 0.59, tq2 0.51; heavy-tailed q8 0.0107, q4 0.080, q2 0.27, q1 0.87,
// tq2 0.86), with about 10-15% margin. Outliers dominate the heavy-tailed 1-bit figures.
var errorBounds = map[string]map[Format]float64{
	"gaussian": {Q8: 0.0060, Q4: 0.082, Q2: 0.35, Q1: 0.65, TQ2: 0.59},
	"heavy":    {Q8: 0.0125, Q4: 0.092, Q2: 0.31, Q1: 0.95, TQ2: 0.95},
}

func TestErrorBounds(t *testing.T) {
	for dist, bounds := range errorBounds {
		r := rand.New(rand.NewPCG(5, 6))
		var w []float32
		if dist == "gaussian" {
			w = gaussian(r, 64*1024)
		} else {
			w = heavy(r, 64*1024)
		}
		for _, f := range allFormats {
			q, err := Quantize(ctx, f, w, 64, 1024, Options{Search: true})
			if err != nil {
				t.Fatal(err)
			}
			e := RelL2(w, q.Dequantize())
			t.Logf("%-8s %-3s rel L2 %.4f (bound %.4f)", dist, f, e, bounds[f])
			if !(e <= bounds[f]) {
				t.Errorf("%s %s: rel error %.4f above bound %.4f", dist, f, e, bounds[f])
			}
		}
	}
}

func TestSearchNeverWorse(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, f := range []Format{Q8, Q4, Q2} {
		w := heavy(r, 200*64)
		plain, _ := Quantize(ctx, f, w, 200, 64, Options{})
		srch, _ := Quantize(ctx, f, w, 200, 64, Options{Search: true})
		pd, sd := plain.Dequantize(), srch.Dequantize()
		for g := 0; g < len(w)/32; g++ {
			var ep, es float64
			for i := g * 32; i < (g+1)*32; i++ {
				ep += sq(pd[i] - w[i])
				es += sq(sd[i] - w[i])
			}
			if es > ep*(1+1e-9)+1e-12 {
				t.Fatalf("%s group %d: search error %g > min/max error %g", f, g, es, ep)
			}
		}
	}
}

func sq(v float32) float64 { return float64(v) * float64(v) }

func TestTQ2MatchesBitNet(t *testing.T) {
	w := []float32{0.5, -0.5, 0.1, -2, 0.24, 0, 3, -0.26}
	q, err := Quantize(ctx, TQ2, w, 1, 8, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// absmean = (0.5+0.5+0.1+2+0.24+0+3+0.26)/8 = 0.825; w/S rounded and clipped:
	want := []int32{1, -1, 0, -1, 0, 0, 1, 0}
	if fmt.Sprint(q.RowCodes(0)) != fmt.Sprint(want) {
		t.Errorf("codes %v, want %v", q.RowCodes(0), want)
	}
	if math.Abs(float64(q.Scale)-0.825) > 1e-6 {
		t.Errorf("scale %v, want 0.825", q.Scale)
	}
	q2, _ := Quantize(ctx, TQ2, w[:4], 1, 4, Options{TensorScale: 0.825})
	if q2.Scale != q.Scale || fmt.Sprint(q2.RowCodes(0)) != fmt.Sprint(want[:4]) {
		t.Errorf("TensorScale chunk: %v %v", q2.Scale, q2.RowCodes(0))
	}
}

func TestQuantizeInt8(t *testing.T) {
	var a Int8Vec
	QuantizeInt8([]float32{1, -2, 0.5, 0}, &a)
	if fmt.Sprint(a.Q) != "[64 -127 32 0]" || math.Abs(float64(a.Scale)-2.0/127) > 1e-9 {
		t.Errorf("Q %v scale %v", a.Q, a.Scale)
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		f    Format
		w    []float32
		rows int
		cols int
		opt  Options
		want string
	}{
		{"nan", Q4, []float32{1, float32(math.NaN())}, 1, 2, Options{}, "row 0, column 1"},
		{"inf", Q8, []float32{float32(math.Inf(-1)), 1}, 2, 1, Options{}, "row 0, column 0"},
		{"shape", Q4, []float32{1, 2, 3}, 2, 2, Options{}, "[2, 2]"},
		{"group", Q4, []float32{1, 2}, 1, 2, Options{GroupSize: 48}, "multiple of 32"},
		{"float", F16, []float32{1}, 1, 1, Options{}, "not a quantized"},
	}
	for _, tc := range tests {
		_, err := Quantize(ctx, tc.f, tc.w, tc.rows, tc.cols, tc.opt)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := ParseFormat("3"); err == nil {
		t.Error("ParseFormat(3) accepted")
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}
func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func FuzzQuantizeDot(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint8(40), int64(1))
	f.Add(uint8(2), uint8(1), uint8(33), int64(9))
	f.Fuzz(func(t *testing.T, fi, rows, cols uint8, seed int64) {
		formats := slices.Concat(allFormats, blockFormats, sblockFormats)
		fm := formats[int(fi)%len(formats)]
		nr, nc := int(rows%8)+1, int(cols%200)+1
		if s := fm.Spec(); s.BlockScales {
			nc = s.Block * (1 + int(cols%3))
		}
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		w := heavy(r, nr*nc)
		q, err := Quantize(ctx, fm, w, nr, nc, Options{Search: seed%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		x := gaussian(r, nc)
		x64 := make([]float64, nc)
		for i, v := range x {
			x64[i] = float64(v)
		}
		for row := 0; row < nr; row++ {
			ref, got := q.DotRef(row, x64), float64(q.Dot(row, x))
			if math.Abs(got-ref) > 1e-4*(1+math.Abs(ref))*math.Sqrt(float64(nc)) {
				t.Fatalf("%s [%d,%d] row %d: Dot %v ref %v", fm, nr, nc, row, got, ref)
			}
		}
	})
}

func BenchmarkQuantize(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	w := heavy(r, 2048*2048)
	for _, f := range slices.Concat(allFormats, blockFormats, sblockFormats) {
		b.Run(string(f), func(b *testing.B) {
			b.SetBytes(int64(len(w)) * 4)
			for i := 0; i < b.N; i++ {
				if _, err := Quantize(ctx, f, w, 2048, 2048, Options{Search: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds(), "weights/s")
		})
	}
}

func BenchmarkDequantizeRow(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	w := heavy(r, 256*2048)
	q, _ := Quantize(ctx, Q4, w, 256, 2048, Options{})
	dst := make([]float32, 2048)
	b.SetBytes(256 * 2048 * 4)
	for i := 0; i < b.N; i++ {
		for row := 0; row < 256; row++ {
			q.DequantizeRow(row, dst)
		}
	}
}
