package quantize

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSblockByHand decodes a q2s, a q3s and a q4s block written byte by
// byte from the layouts' comments.
func TestSblockByHand(t *testing.T) {
	const ts = 2
	// Sub-block 0: k 15 (scale ts), z 5; sub-block 1: k 9 (ts/2), z 0.
	head := []byte{15 | 5<<4, 9}
	tests := []struct {
		f     Format
		codes []byte
		// want codes of weights 0, 9, 17, 31
		want [4]int32
	}{
		// q2s: byte j holds weights j, j+8, j+16, j+24.
		{Q2S, []byte{0, 0b01 << 2, 0, 0, 0, 0, 0, 0b11<<6 | 0b10<<4}, [4]int32{0, 1, 0, 3}},
		// q3s: low bits as q2s, then bit i of a uint32 is weight i's high bit.
		{Q3S, []byte{0, 0b01 << 2, 0, 0, 0, 0, 0, 0b11 << 6, 0, 2, 2, 0x80}, [4]int32{0, 5, 4, 7}},
		// q4s: byte j holds weight j (low nibble) and j+16 (high).
		{Q4S, []byte{0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x0b, 0, 0, 0, 0, 0, 0xf0}, [4]int32{0, 11, 1, 15}},
	}
	for _, tc := range tests {
		s := tc.f.Spec()
		blk := append(append([]byte{}, head...), tc.codes...)
		if len(blk) != s.BlockBytes {
			t.Fatalf("%s: a block of %d bytes, the spec says %d", tc.f, len(blk), s.BlockBytes)
		}
		q := &Tensor{Format: tc.f, Rows: 1, Cols: 32, Data: blk, Scale: ts}
		if err := q.Validate(); err != nil {
			t.Fatal(err)
		}
		codes := q.RowCodes(0)
		got := [4]int32{codes[0], codes[9], codes[17], codes[31]}
		if got != tc.want {
			t.Errorf("%s: codes %v, want %v", tc.f, got, tc.want)
		}
		L := float32(s.MaxCode)
		ds0, m0 := float32(ts), -float32(ts)*(5*L/15)
		ds1 := float32(ts * math.Pow(2, -1))
		deq := make([]float32, 32)
		q.DequantizeRow(0, deq)
		for i, c := range []int{0, 9, 17, 31} {
			want := ds0*float32(got[i]) + m0
			if c >= 16 {
				want = ds1 * float32(got[i])
			}
			if math.Abs(float64(deq[c]-want)) > 1e-6 {
				t.Errorf("%s weight %d: %v, want %v", tc.f, c, deq[c], want)
			}
		}
	}
}

// TestSblockMatchesReference holds the fast dequantizer and product to the
// reference ones (weights read code by code, float64 sums) on rows of 64,
// 172, 192 and odd lengths, with and without search and importance.
func TestSblockMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, f := range sblockFormats {
		for _, cols := range []int{64, 172, 192, 33, 7} {
			for _, opt := range []Options{{}, {Search: true}, {Search: true, Importance: skewedImportance(r, cols)}} {
				rows := 5
				w := heavy(r, rows*cols)
				q, err := Quantize(ctx, f, w, rows, cols, opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := q.Validate(); err != nil {
					t.Fatal(err)
				}
				if want := rows * ((cols + 31) / 32) * f.Spec().BlockBytes; len(q.Data) != want || q.Scales != nil || q.Mins != nil {
					t.Fatalf("%s [%d, %d]: %d bytes, want %d, no scales apart", f, rows, cols, len(q.Data), want)
				}
				fast, ref := make([]float32, cols), make([]float32, cols)
				x := gaussian(r, cols)
				x64 := make([]float64, cols)
				for i, v := range x {
					x64[i] = float64(v)
				}
				for row := range rows {
					q.DequantizeRow(row, fast)
					q.DequantizeRowRef(row, ref)
					for c := range fast {
						if math.Float32bits(fast[c]) != math.Float32bits(ref[c]) {
							t.Fatalf("%s [%d, %d] row %d col %d: %v, reference %v", f, rows, cols, row, c, fast[c], ref[c])
						}
					}
					got, want := float64(q.Dot(row, x)), q.DotRef(row, x64)
					if math.Abs(got-want) > 1e-5*(1+math.Abs(want))*math.Sqrt(float64(cols)) {
						t.Errorf("%s [%d, %d] row %d: Dot %v, reference %v", f, rows, cols, row, got, want)
					}
				}
			}
		}
	}
}

// TestSblockErrors: on gaussian weights the super-block formats beat the
// formats of like code bits and per-group fp16 scales at fewer bits (q4s
// at 4.5 against q4 at 5, q2s at 2.5 against q2 at 3), and q3s lies
// between; a tensor quantized in two chunks with the whole's scale
// (TensorScaler) stores what one call stores.
func TestSblockErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const rows, cols = 64, 192
	w := gaussian(r, rows*cols)
	rel := map[Format]float64{}
	for _, f := range []Format{Q4, Q2, Q2S, Q3S, Q4S} {
		q, err := Quantize(ctx, f, w, rows, cols, Options{Search: true})
		if err != nil {
			t.Fatal(err)
		}
		rel[f] = RelL2(w, q.Dequantize())
		t.Logf("%s: rel L2 %.4f", f, rel[f])
	}
	if !(rel[Q4S] < rel[Q4] && rel[Q2S] < rel[Q2] && rel[Q4S] < rel[Q3S] && rel[Q3S] < rel[Q2S]) {
		t.Errorf("relative errors %v out of order", rel)
	}
	for _, f := range sblockFormats {
		whole, _ := Quantize(ctx, f, w, rows, cols, Options{Search: true})
		var ts TensorScaler
		ts.Add(f, w[:20*cols], cols)
		ts.Add(f, w[20*cols:], cols)
		if ts.Scale(f) != whole.Scale || f.TensorScaleOf(w, cols) != whole.Scale {
			t.Fatalf("%s: chunked scale %v, whole %v", f, ts.Scale(f), whole.Scale)
		}
		a, _ := Quantize(ctx, f, w[:20*cols], 20, cols, Options{Search: true, TensorScale: ts.Scale(f)})
		b, _ := Quantize(ctx, f, w[20*cols:], rows-20, cols, Options{Search: true, TensorScale: ts.Scale(f)})
		if string(a.Data)+string(b.Data) != string(whole.Data) {
			t.Errorf("%s: chunks stored other bytes than the whole", f)
		}
	}
}

// TestSblockZeros: an all-zero tensor, and rows of one repeated value,
// decode exactly or nearly, with no NaN.
func TestSblockZeros(t *testing.T) {
	for _, f := range sblockFormats {
		for _, v := range []float32{0, 0.75, -3} {
			w := make([]float32, 3*40)
			for i := range w {
				w[i] = v
			}
			q, err := Quantize(ctx, f, w, 3, 40, Options{Search: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, got := range q.Dequantize() {
				if !(math.Abs(float64(got-v)) <= 0.1*math.Abs(float64(v))) {
					t.Fatalf("%s of %v: weight %d is %v", f, v, i, got)
				}
			}
		}
	}
}

// TestSuperBlockScales: the exported table is the scale params decodes.
func TestSuperBlockScales(t *testing.T) {
	for _, f := range []Format{Q2S, Q3S, Q4S} {
		if !f.SuperBlock() {
			t.Errorf("%s: not a super-block format", f)
		}
		tbl := SuperBlockScales(0.37)
		for k := range 16 {
			ds, _ := f.spec().sblock.params(byte(k|5<<4), 0.37)
			if tbl[k] != ds {
				t.Errorf("%s: code %d: table %v, params %v", f, k, tbl[k], ds)
			}
		}
	}
	for _, f := range []Format{Q4, Q8, Q4K, TQ2} {
		if f.SuperBlock() {
			t.Errorf("%s: a super-block format", f)
		}
	}
}
