package quantize

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"lowbit/half"
)

// TestBlockBytes holds each block format to GGUF's block size and bits a
// weight, as ggml's static_asserts hold its block structs.
func TestBlockBytes(t *testing.T) {
	for _, tc := range []struct {
		f            Format
		block, bytes int
		bits         float64
	}{
		{Q5_0, 32, 2 + 4 + 16, 5.5},
		{Q5_1, 32, 2 + 2 + 4 + 16, 6},
		{Q2K, 256, 16 + 64 + 2 + 2, 2.625},
		{Q3K, 256, 32 + 64 + 12 + 2, 3.4375},
		{Q4K, 256, 2 + 2 + 12 + 128, 4.5},
		{Q5K, 256, 2 + 2 + 12 + 32 + 128, 5.5},
		{Q6K, 256, 128 + 64 + 16 + 2, 6.5625},
	} {
		s := tc.f.Spec()
		if s.Block != tc.block || s.BlockBytes != tc.bytes || s.Bits != tc.bits || !s.BlockScales {
			t.Errorf("%s: %d bytes a block of %d, %v bits; want %d, %d, %v", tc.f, s.BlockBytes, s.Block, s.Bits, tc.bytes, tc.block, tc.bits)
		}
		q := Tensor{Format: tc.f, Rows: 3, Cols: 2 * tc.block, GroupSize: tc.block}
		if q.RowBytes() != 2*tc.bytes || q.Groups() != 2 {
			t.Errorf("%s: a row of two blocks takes %d bytes in %d groups", tc.f, q.RowBytes(), q.Groups())
		}
	}
}

// f16 is the little-endian bytes of an fp16 value.
func f16(v float32) []byte {
	return binary.LittleEndian.AppendUint16(nil, uint16(half.FromFloat32(v)))
}

// TestBlockByHand decodes blocks whose bytes are set by hand from GGUF's
// layout definitions, one field at a time, and checks chosen weights
// against the block formulas worked out by hand.
func TestBlockByHand(t *testing.T) {
	type probe struct {
		c    int
		code int32
		w    float32
	}
	for _, tc := range []struct {
		f      Format
		blk    func() []byte
		probes []probe
	}{
		{Q5_0, func() []byte {
			b := make([]byte, 22)
			copy(b, f16(0.5))
			b[2+0] = 0b0000_0100 // qh bit 2: weight 2's fifth bit
			b[2+2] = 0b0000_0001 // qh bit 16: weight 16's fifth bit
			b[6+2] = 0x3A        // weight 2 low nibble 10, weight 18 nibble 3
			b[6+0] = 0x50        // weight 0 nibble 0, weight 16 nibble 5
			return b
		}, []probe{{2, 26 - 16, 5}, {18, 3 - 16, -6.5}, {16, 21 - 16, 2.5}, {0, -16, -8}}},
		{Q5_1, func() []byte {
			b := make([]byte, 24)
			copy(b, f16(0.25))
			copy(b[2:], f16(-1))
			b[4+3] = 0x80 // qh bit 31: weight 31
			b[8+15] = 0xF1
			return b
		}, []probe{{15, 1, -0.75}, {31, 31, 6.75}, {0, 0, -1}}},
		{Q4K, func() []byte {
			b := make([]byte, 144)
			copy(b, f16(1))
			copy(b[2:], f16(0.5))
			s := b[4:16]
			s[1] = 3 | 2<<6     // sub-block 1 scale 3; top bits of sub-block 5's scale (39>>4 = 2)
			s[5] = 7 | 1<<6     // sub-block 1 minimum 7; top bits of sub-block 5's minimum (18>>4 = 1)
			s[9] = 7 | 2<<4     // sub-block 5: scale 39&15 = 7, minimum 18&15 = 2
			b[16+32*0+5] = 0xC0 // weight 37 (sub-block 1): high nibble of qs[5], 12
			b[16+32*2+3] = 0xA0 // weight 163 (sub-block 5): high nibble of qs[67], 10
			return b
		}, []probe{{37, 12, 3*12 - 0.5*7}, {163, 10, 39*10 - 0.5*18}, {5, 0, 0}}},
		{Q5K, func() []byte {
			b := make([]byte, 176)
			copy(b, f16(2))
			copy(b[2:], f16(1))
			s := b[4:16]
			s[2] = 5              // sub-block 2 scale 5
			s[3] = 3              // sub-block 3 scale 3
			s[6] = 4              // sub-block 2 minimum 4
			s[11] = 1 | 0<<4      // sub-block 7 scale 1, minimum 0
			b[16+9] = 1<<2 | 1<<7 // fifth bits of weight 64+9 (sub-block 2) and 224+9 (sub-block 7)
			b[48+32*1+9] = 0x36   // weight 73: low nibble 6; weight 105 (sub-block 3): high nibble 3
			b[48+32*3+9] = 0xF0   // weight 233: high nibble 15
			return b
		}, []probe{{73, 22, 2*5*22 - 4}, {105, 3, 2 * 3 * 3}, {233, 31, 2 * 31}}},
		{Q6K, func() []byte {
			b := make([]byte, 210)
			copy(b[208:], f16(0.125))
			b[192+9] = 0xFD // sub-block 9 (weights 144-159): int8 -3
			b[192+2] = 8    // sub-block 2: weights 32-47
			// weight 150 = 128*1 + 32*0 + 22: low nibble of ql[64+22], bits 0-1 of qh[32+22]
			b[64+22] = 0x0F
			b[128+32+22] = 0b10
			// weight 32+7 = 39 = 128*0 + 32*1 + 7: low nibble of ql[7+32], bits 2-3 of qh[7]
			b[39] = 0x02
			b[128+7] = 0b01 << 2
			return b
		}, []probe{{150, 47 - 32, 0.125 * -3 * 15}, {39, 18 - 32, 0.125 * 8 * -14}, {0, -32, 0}}},
		{Q2K, func() []byte {
			b := make([]byte, 84)
			copy(b[80:], f16(0.5))
			copy(b[82:], f16(0.25))
			b[13] = 6 | 9<<4 // sub-block 13: weights 208-223
			// weight 210 = 128 + 32*2 + 18: bits 4-5 of qs[32+18]
			b[16+32+18] = 0b11 << 4
			return b
		}, []probe{{210, 3, 0.5*6*3 - 0.25*9}, {208, 0, -0.25 * 9}}},
		{Q3K, func() []byte {
			b := make([]byte, 110)
			copy(b[108:], f16(0.5))
			// sub-block 14 (weights 224-239), 6-bit scale 45 = 0b10_1101:
			// low nibble in the high nibble of sc[6], high bits in bits 6-7 of sc[10].
			b[96+6] = 0xD0
			b[96+10] = 0b10 << 6
			// weight 230 = 128 + 32*3 + 6: bits 6-7 of qs[32+6], high bit 4+3 of hmask[6]
			b[32+32+6] = 0b01 << 6
			b[6] = 1 << 7
			// weight 1 (sub-block 0, scale 0 -> -32): code 0 with high bit 0 -> -4
			return b
		}, []probe{{230, 5 - 4, 0.5 * 13 * 1}, {1, -4, 0.5 * -32 * -4}}},
	} {
		blk := tc.blk()
		s := tc.f.Spec()
		if len(blk) != s.BlockBytes {
			t.Fatalf("%s: hand-made block of %d bytes", tc.f, len(blk))
		}
		q := &Tensor{Format: tc.f, Rows: 1, Cols: s.Block, GroupSize: s.Block, Data: blk}
		if err := q.Validate(); err != nil {
			t.Fatal(err)
		}
		deq := q.Dequantize()
		codes := q.RowCodes(0)
		for _, p := range tc.probes {
			if codes[p.c] != p.code || deq[p.c] != p.w || q.weight(0, p.c, codes[p.c]) != p.w {
				t.Errorf("%s weight %d: code %d, value %v (reference %v); want %d, %v", tc.f, p.c, codes[p.c], deq[p.c], q.weight(0, p.c, codes[p.c]), p.code, p.w)
			}
		}
	}
}

// readFields is a test's own reading of a block's fields, the inverse of
// each layout's pack: codes through Spec.code, scales by the layouts.
func readFields(f Format, blk []byte) blockFields {
	s := f.spec()
	var out blockFields
	for i := 0; i < s.Block; i++ {
		out.q[i] = s.code(blk, i)
	}
	h := func(off int) half.Float16 { return half.Float16(binary.LittleEndian.Uint16(blk[off:])) }
	switch f {
	case Q5_0:
		out.d = h(0)
	case Q5_1:
		out.d, out.dmin = h(0), h(2)
	case Q4K, Q5K:
		out.d, out.dmin = h(0), h(2)
		for j := range 8 {
			sc, m := kScales(blk[4:16], j)
			out.sc[j], out.mn[j] = int32(sc), int32(m)
		}
	case Q6K:
		out.d = h(208)
		for j := range 16 {
			out.sc[j] = int32(int8(blk[192+j]))
		}
	case Q2K:
		out.d, out.dmin = h(80), h(82)
		for j := range 16 {
			out.sc[j], out.mn[j] = int32(blk[j]&15), int32(blk[j]>>4)
		}
	case Q3K:
		out.d = h(108)
		for j := range 16 {
			out.sc[j] = q3kScale(blk[96:108], j) - 32
		}
	}
	return out
}

// randomFields draws every field of a block over its whole range.
func randomFields(r *rand.Rand, f Format) blockFields {
	s := f.spec()
	l := s.blocks
	var out blockFields
	out.d = half.FromFloat32(float32(r.NormFloat64()))
	if l.mins {
		out.dmin = half.FromFloat32(float32(r.NormFloat64()))
	}
	if !l.direct() {
		for j := 0; j < s.Block/l.sub; j++ {
			out.sc[j] = l.scLo + r.Int32N(l.scHi-l.scLo+1)
			if l.mins {
				out.mn[j] = r.Int32N(l.scHi + 1)
			}
		}
	}
	for i := 0; i < s.Block; i++ {
		out.q[i] = l.qlo + r.Int32N(l.qhi-l.qlo+1)
	}
	return out
}

// TestBlockPackRoundTrip packs random fields of every value each field
// holds and reads them back, and holds the fast decode to the reference
// (code and scale) bit for bit.
func TestBlockPackRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, f := range blockFormats {
		s := f.spec()
		for range 200 {
			want := randomFields(r, f)
			blk := make([]byte, s.BlockBytes)
			for i := range blk {
				blk[i] = byte(r.IntN(256)) // pack writes every byte
			}
			s.blocks.pack(blk, &want)
			if got := readFields(f, blk); got != want {
				t.Fatalf("%s: packed %+v, read back %+v", f, want, got)
			}
			q := &Tensor{Format: f, Rows: 1, Cols: s.Block, GroupSize: s.Block, Data: blk}
			deq := q.Dequantize()
			for c, code := range q.RowCodes(0) {
				ds, ms := want.subScale(s.blocks, c/s.blocks.sub)
				ref := q.weight(0, c, code)
				if d, m := s.scale(blk, c, 0); d != ds || m != ms || deq[c] != ref || math.Float32bits(ref) != math.Float32bits(float32(ds*float32(code))+ms) {
					t.Fatalf("%s weight %d: scale (%v, %v), fields' (%v, %v); decoded %v, reference %v", f, c, d, m, ds, ms, deq[c], ref)
				}
			}
		}
	}
}

// TestBlockQuantize checks the quantizer's output on every format: it
// validates, its stored error is the dequantized one, its codes are the
// nearest for its stored scales, and Dot, MatVec and MatMul agree with
// the reference.
func TestBlockQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, f := range blockFormats {
		s := f.spec()
		for _, search := range []bool{false, true} {
			rows, cols := 5, 3*s.Block
			if s.Block == 32 {
				cols = 320
			}
			w := heavy(r, rows*cols)
			for i := cols; i < 2*cols; i++ {
				w[i] = 0 // an all-zero row
			}
			for i := 2 * cols; i < 3*cols; i++ {
				w[i] = float32(i%7) + 3 // positive only: the minimum clamps at 0
			}
			q, err := Quantize(ctx, f, w, rows, cols, Options{Search: search})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Validate(); err != nil {
				t.Fatal(err)
			}
			if len(q.Scales) != 0 || len(q.Mins) != 0 || q.GroupSize != s.Block {
				t.Fatalf("%s: %d scales, %d mins, group %d", f, len(q.Scales), len(q.Mins), q.GroupSize)
			}
			deq := q.Dequantize()
			var errSq, refSq float64
			for i, v := range deq {
				d := float64(v) - float64(w[i])
				errSq += d * d
				refSq += float64(w[i]) * float64(w[i])
			}
			if errSq != q.SqErr || refSq != q.SqRef {
				t.Errorf("%s: SqErr %v SqRef %v, dequantized %v %v", f, q.SqErr, q.SqRef, errSq, refSq)
			}
			// Each code is the nearest of its block's stored scales.
			for row := 0; row < rows; row++ {
				codes := q.RowCodes(row)
				for c, code := range codes {
					v := w[row*cols+c]
					got := math.Abs(float64(deq[row*cols+c] - v))
					for _, alt := range []int32{code - 1, code + 1} {
						if alt < s.MinCode || alt > s.MaxCode {
							continue
						}
						if e := math.Abs(float64(q.weight(row, c, alt) - v)); e < got*(1-1e-6)-1e-30 {
							t.Fatalf("%s search=%v row %d weight %d (%v): code %d gives %v, code %d is nearer (%v)", f, search, row, c, v, code, deq[row*cols+c], alt, q.weight(row, c, alt))
						}
					}
				}
			}
			for i := cols; i < 2*cols; i++ {
				if deq[i] != 0 {
					t.Fatalf("%s: the zero row decodes to %v at %d", f, deq[i], i-cols)
				}
			}
			x := gaussian(r, cols)
			x64 := make([]float64, cols)
			for i, v := range x {
				x64[i] = float64(v)
			}
			y := make([]float32, rows)
			MatVec(ctx, q, x, y, 3)
			yy := make([]float32, 2*rows)
			MatMul(ctx, q, append(slices.Clone(x), x...), 2, yy, 3)
			var a Int8Vec
			QuantizeInt8(x, &a)
			for row := 0; row < rows; row++ {
				ref, got := q.DotRef(row, x64), float64(q.Dot(row, x))
				var mag float64 // Σ|w·x|: the scale of float32 rounding in the sum
				for c := range cols {
					mag += math.Abs(float64(deq[row*cols+c]) * x64[c])
				}
				if math.Abs(got-ref) > 1e-5*mag+1e-30 {
					t.Errorf("%s row %d: Dot %v, DotRef %v", f, row, got, ref)
				}
				if y[row] != q.Dot(row, x) || yy[row] != y[row] || yy[rows+row] != y[row] {
					t.Errorf("%s row %d: MatVec %v, MatMul %v %v, Dot %v", f, row, y[row], yy[row], yy[rows+row], q.Dot(row, x))
				}
				if ref, got := q.DotInt8Ref(row, &a), float64(q.DotInt8(row, &a)); math.Abs(got-ref) > 1e-5*mag+1e-30 {
					t.Errorf("%s row %d: DotInt8 %v, ref %v", f, row, got, ref)
				}
			}
		}
	}
}

// TestBlockErrors: relative RMS error of each block format on Student-t
// and gaussian weights, held to bounds, ordered as their bits are, and
// compared with q4's at group 32. The bounds are the figures measured on
// these seeds with a margin of about 10%.
func TestBlockErrors(t *testing.T) {
	bounds := map[string]map[Format]float64{
		"gaussian": {Q2K: 0.29, Q3K: 0.16, Q4K: 0.078, Q5_0: 0.045, Q5K: 0.039, Q5_1: 0.039, Q6K: 0.019},
		"heavy":    {Q2K: 0.25, Q3K: 0.16, Q4K: 0.091, Q5_0: 0.073, Q5K: 0.049, Q5_1: 0.048, Q6K: 0.031},
	}
	for _, dist := range []string{"gaussian", "heavy"} {
		r := rand.New(rand.NewPCG(5, 6))
		w := gaussian(r, 64*1024)
		if dist == "heavy" {
			w = heavy(r, 64*1024)
		}
		q4, err := Quantize(ctx, Q4, w, 64, 1024, Options{Search: true})
		if err != nil {
			t.Fatal(err)
		}
		e4 := RelL2(w, q4.Dequantize())
		prev := math.Inf(1)
		for _, f := range []Format{Q2K, Q3K, Q4K, Q5_0, Q5K, Q5_1, Q6K} {
			q, err := Quantize(ctx, f, w, 64, 1024, Options{Search: true})
			if err != nil {
				t.Fatal(err)
			}
			e := RelL2(w, q.Dequantize())
			plain, err := Quantize(ctx, f, w, 64, 1024, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ep := RelL2(w, plain.Dequantize())
			t.Logf("%-8s %-4s %.4f bits: rel RMS error %.4f (no search %.4f; q4 g32 %.4f)", dist, f, f.Bits(), e, ep, e4)
			if !(e <= bounds[dist][f]) || e > ep {
				t.Errorf("%s %s: error %.4f (no search %.4f), bound %.4f", dist, f, e, ep, bounds[dist][f])
			}
			if f != Q5K && e > prev { // q5k and q5_0 have the same bits
				t.Errorf("%s %s: error %.4f above the previous format's %.4f with fewer bits", dist, f, e, prev)
			}
			prev = e
		}
	}
}

// TestBlockImportance: with Importance, the search lowers the error it is
// told to weigh, on the columns that matter.
func TestBlockImportance(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	rows, cols := 32, 512
	w := heavy(r, rows*cols)
	imp := make([]float32, cols)
	for i := range imp {
		imp[i] = float32(math.Exp(2 * r.NormFloat64())) // a few columns weigh far more
	}
	imp[3] = 0
	for j := 16; j < 32; j++ {
		imp[j] = 0 // a whole sub-block that weighs nothing
	}
	weighted := func(q *Tensor) float64 {
		deq := q.Dequantize()
		var e float64
		for i, v := range deq {
			d := float64(v - w[i])
			e += float64(imp[i%cols]) * d * d
		}
		return e
	}
	for _, f := range blockFormats {
		plain, err := Quantize(ctx, f, w, rows, cols, Options{Search: true})
		if err != nil {
			t.Fatal(err)
		}
		withImp, err := Quantize(ctx, f, w, rows, cols, Options{Search: true, Importance: imp})
		if err != nil {
			t.Fatal(err)
		}
		ep, ei := weighted(plain), weighted(withImp)
		t.Logf("%s: importance-weighted error %.4g without, %.4g with Importance", f, ep, ei)
		if !(ei < ep) {
			t.Errorf("%s: weighted error %.4g with Importance, %.4g without", f, ei, ep)
		}
	}
}

// TestBlockBadInput: rows that are not whole blocks, and group sizes other
// than the block, are errors naming the limit; FallbackFor says what such
// a matrix takes instead.
func TestBlockBadInput(t *testing.T) {
	for _, f := range blockFormats {
		s := f.Spec()
		odd := s.Block + s.Block/2
		_, err := Quantize(ctx, f, make([]float32, 2*odd), 2, odd, Options{})
		if err == nil || !strings.Contains(err.Error(), "multiple of "+strconv.Itoa(s.Block)) {
			t.Errorf("%s: rows of %d: err %v", f, odd, err)
		}
		_, err = Quantize(ctx, f, make([]float32, 2*s.Block), 2, s.Block, Options{GroupSize: 2 * s.Block})
		if err == nil || !strings.Contains(err.Error(), "does not apply") {
			t.Errorf("%s: group size: err %v", f, err)
		}
		if got, why := f.FallbackFor(4 * s.Block); got != f || why != "" {
			t.Errorf("%s: FallbackFor(%d) = %s %q", f, 4*s.Block, got, why)
		}
		got, why := f.FallbackFor(odd)
		if got != s.Fallback || !strings.Contains(why, "not whole "+strconv.Itoa(s.Block)+"-weight blocks of "+string(f)) {
			t.Errorf("%s: FallbackFor(%d) = %s %q", f, odd, got, why)
		}
		// A stored tensor of the wrong group or shape fails Validate.
		for _, q := range []*Tensor{
			{Format: f, Rows: 1, Cols: s.Block, GroupSize: 32 * (1 + s.Block/32), Data: make([]byte, s.BlockBytes)},
			{Format: f, Rows: 1, Cols: s.Block, GroupSize: s.Block, Data: make([]byte, s.BlockBytes), Scales: make([]half.Float16, 1)},
			{Format: f, Rows: 1, Cols: s.Block, GroupSize: s.Block, Data: make([]byte, s.BlockBytes+1)},
		} {
			if err := q.Validate(); err == nil {
				t.Errorf("%s: %+v validates", f, q)
			}
		}
	}
	if got, why := Q4.FallbackFor(100); got != Q4 || why != "" {
		t.Errorf("q4: FallbackFor(100) = %s %q", got, why)
	}
}

// TestCheckBlocks finds a block whose fp16 scale is not finite.
func TestCheckBlocks(t *testing.T) {
	for _, f := range blockFormats {
		s := f.spec()
		q := &Tensor{Format: f, Rows: 2, Cols: 2 * s.Block, GroupSize: s.Block, Data: make([]byte, 4*s.BlockBytes)}
		if err := q.CheckBlocks(); err != nil {
			t.Fatal(err)
		}
		for _, off := range s.halves {
			data := slices.Clone(q.Data)
			binary.LittleEndian.PutUint16(data[3*s.BlockBytes+off:], 0x7e00) // NaN in block 3 (row 1)
			bad := *q
			bad.Data = data
			if err := bad.CheckBlocks(); err == nil || !strings.Contains(err.Error(), "block 3 (row 1)") {
				t.Errorf("%s: NaN at byte %d: %v", f, off, err)
			}
		}
	}
}

// TestBlockAtTheLimit: weights as large as a block format stores give
// finite blocks.
func TestBlockAtTheLimit(t *testing.T) {
	for _, f := range blockFormats {
		limit := f.spec().maxAbs
		for _, search := range []bool{false, true} {
			cols := 256
			w := make([]float32, 4*cols)
			for i := range w {
				switch i / cols {
				case 0:
					w[i] = limit * float32(i%cols) / float32(cols)
				case 1:
					w[i] = -limit * float32(i%cols) / float32(cols)
				case 2:
					w[i] = limit * float32(i%3-1)
				case 3:
					w[i] = -limit
				}
			}
			q, err := Quantize(ctx, f, w, 4, cols, Options{Search: search})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.CheckBlocks(); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			if i := FirstNonFinite(q.Dequantize()); i >= 0 || math.IsNaN(q.SqErr) || math.IsInf(q.SqErr, 0) {
				t.Errorf("%s search=%v: weight %d decodes to a non-finite value, error %v", f, search, i, q.SqErr)
			}
			if err := f.CheckRange([]float32{limit * 1.001}, 1, 0); err == nil {
				t.Errorf("%s: a weight past the limit is accepted", f)
			}
		}
	}
}

// BenchmarkDot times one row's dot product of a 4096x4096 matrix in each
// block format and in q4 (group 32), in ns a weight.
func BenchmarkDot(b *testing.B) {
	const n = 4096
	r := rand.New(rand.NewPCG(9, 10))
	w := heavy(r, n*n)
	x := gaussian(r, n)
	for _, f := range append([]Format{Q4, Q8}, blockFormats...) {
		q, err := Quantize(ctx, f, w, n, n, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(f), func(b *testing.B) {
			b.SetBytes(int64(len(q.Data)+2*len(q.Scales)+2*len(q.Mins)) / n)
			var sink float32
			row := 0
			for b.Loop() {
				sink += q.Dot(row, x)
				row = (row + 1) % n
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/weight")
			_ = sink
		})
	}
}
