package quantize

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestCheckRange(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		f        Format
		w        []float32
		firstRow int
		want     string // "" when storable
	}{
		{Q4, []float32{0, 1, 2, 1e10}, 3, "weight 1e+10 at row 4, column 1 is out of range for q4 (its f16 scales and minimums hold at most 65504)"},
		{Q2, []float32{-65505, 0, 0, 0}, 0, "weight -65505 at row 0, column 0 is out of range for q2"},
		{Q4, []float32{65504, -65504, 0, 1}, 0, ""},
		{Q8, []float32{0, 1e7, 0, 0}, 0, "weight 1e+07 at row 0, column 1 is out of range for q8 (its f16 scales, a group's largest |weight| / 127, hold at most 65504)"},
		{Q8, []float32{0, 8319008, -8319008, 0}, 0, ""},
		{Q1, []float32{0, 0, 0, 70000}, 0, "weight 70000 at row 1, column 1 is out of range for q1 (its f16 scales hold at most 65504)"},
		{TQ2, []float32{3e38, -3e38, 0, 1}, 0, ""},
		{F16, []float32{1, 70000, 0, 0}, 10, "weight 70000 at row 10, column 1 is out of range for f16 (the largest f16 is 65504)"},
		{BF16, []float32{3.3e38, 0, 0, math.MaxFloat32}, 0, "weight 3.4028235e+38 at row 1, column 1 is out of range for bf16 (the largest bf16 is 3.3895314e+38)"},
		{F32, []float32{math.MaxFloat32, -math.MaxFloat32, 0, 0}, 0, ""},
		{F32, []float32{0, 0, 0, nan}, 2, "non-finite weight NaN at row 3, column 1"},
		{Q8, []float32{float32(math.Inf(-1)), 0, 0, 0}, 0, "non-finite weight -Inf at row 0, column 0"},
	}
	for _, tc := range tests {
		err := tc.f.CheckRange(tc.w, 2, tc.firstRow)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %v: err = %v, want %q", tc.f, tc.w, err, tc.want)
		}
	}
}

// TestQuantizeAtTheLimit: weights as large as each format stores quantize to
// finite scales, minimums, weights and errors, and one step beyond is an
// error naming the weight, instead of an infinite scale and NaN weights.
func TestQuantizeAtTheLimit(t *testing.T) {
	for _, f := range []Format{Q8, Q4, Q2, Q1, TQ2} {
		limit := f.spec().maxAbs
		for _, search := range []bool{false, true} {
			// Groups of one sign, of both, and of one value repeated (min = max).
			rows, cols := 4, 64
			w := make([]float32, rows*cols)
			for i := range w {
				switch i / cols {
				case 0:
					w[i] = float32(float64(limit) * float64(i%cols) / float64(cols))
				case 1:
					w[i] = -float32(float64(limit) * float64(i%cols) / float64(cols))
				case 2:
					w[i] = limit * float32(i%3-1)
				case 3:
					w[i] = -limit
				}
			}
			q, err := Quantize(context.Background(), f, w, rows, cols, Options{Search: search})
			if err != nil {
				t.Fatalf("%s at its limit %g: %v", f, limit, err)
			}
			for _, v := range q.Dequantize() {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%s (search %v): dequantized weight %v", f, search, v)
				}
			}
			if math.IsNaN(q.SqErr) || math.IsInf(q.SqErr, 0) || RelL2(w, q.Dequantize()) > 1 {
				t.Errorf("%s (search %v): SqErr %v, relative error %v", f, search, q.SqErr, RelL2(w, q.Dequantize()))
			}
			if f == TQ2 {
				continue
			}
			w[cols+5] = -math.Nextafter32(limit, math.MaxFloat32)
			_, err = Quantize(context.Background(), f, w, rows, cols, Options{Search: search})
			if err == nil || !strings.Contains(err.Error(), "at row 1, column 5 is out of range for "+string(f)) {
				t.Errorf("%s just beyond its limit: err = %v", f, err)
			}
			// A chunk of a tensor names the tensor's row.
			_, err = Quantize(context.Background(), f, w, rows, cols, Options{Search: search, FirstRow: 100})
			if err == nil || !strings.Contains(err.Error(), "at row 101, column 5") {
				t.Errorf("%s in a chunk from row 100: err = %v", f, err)
			}
		}
	}
}

func TestRelL2HugeValues(t *testing.T) {
	ref := []float32{math.MaxFloat32, -math.MaxFloat32, 3e38, 1}
	got := []float32{-math.MaxFloat32, math.MaxFloat32, -3e38, 0}
	if e := RelL2(ref, got); math.IsNaN(e) || math.IsInf(e, 0) || math.Abs(e-2) > 1e-6 {
		t.Errorf("RelL2 of huge opposite values = %v, want 2", e)
	}
	if e := RelL2(ref, ref); e != 0 {
		t.Errorf("RelL2 of equal values = %v", e)
	}
}

// FuzzQuantizeAnyValues feeds raw float32 bit patterns (weights of any size,
// NaN and Inf among them): Quantize either refuses them, naming a weight, or
// stores finite scales that dequantize to finite weights with a finite error.
func FuzzQuantizeAnyValues(f *testing.F) {
	f.Add(uint8(1), uint8(2), []byte("\x00\x00\x80\x3f\xf9\x02\x15\x50\x00\x00\x80\xbf\xff\xff\x7f\x7f"))
	f.Add(uint8(0), uint8(1), []byte("\x00\x00\xc0\x7f"))
	f.Fuzz(func(t *testing.T, fi, search uint8, raw []byte) {
		formats := append(slices.Clone(allFormats), blockFormats...)
		fm := formats[int(fi)%len(formats)]
		w := make([]float32, len(raw)/4)
		for i := range w {
			w[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if len(w) == 0 {
			return
		}
		cols := len(w)
		if cols%2 == 0 {
			cols /= 2
		}
		if b := fm.Spec().Block; fm.Spec().BlockScales { // whole blocks, zeros after the values
			cols = b
			w = append(w, make([]float32, (b-len(w)%b)%b)...)
		}
		q, err := Quantize(context.Background(), fm, w, len(w)/cols, cols, Options{Search: search%2 == 1})
		if err != nil {
			if !strings.Contains(err.Error(), "weight") || fm.CheckRange(w, cols, 0) == nil {
				t.Fatalf("%s refused storable weights: %v", fm, err)
			}
			return
		}
		for i, v := range q.Dequantize() {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s stored %v as %v", fm, w[i], v)
			}
		}
		if math.IsNaN(q.SqErr) || math.IsInf(q.SqErr, 0) {
			t.Fatalf("%s: SqErr %v", fm, q.SqErr)
		}
	})
}
