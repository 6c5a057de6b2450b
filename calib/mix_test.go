package calib

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"lowbit/quantize"
)

// TestCandidates: every quantized format with float activations, at its
// group and larger ones; ternary (int8 activations) is not mixed in.
func TestCandidates(t *testing.T) {
	have := map[string]bool{}
	for _, c := range Candidates() {
		have[c.String()] = true
		if c.Format.Spec().Int8Activations || !c.Format.Quantized() {
			t.Errorf("candidate %s cannot be mixed in", c)
		}
	}
	for _, want := range []string{"q8", "q8/g64", "q8/g128", "q4", "q4/g64", "q4/g128", "q2", "q2/g64", "q1"} {
		if !have[want] {
			t.Errorf("no candidate %s among %v", want, have)
		}
	}
	if have["tq2"] {
		t.Error("ternary is a candidate")
	}
}

// TestMeasure: bits and errors of real quantization; more bits, less error.
func TestMeasure(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 300, 128
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	var sample []float32
	for _, row := range SampleRows(rows) {
		sample = append(sample, w[row*cols:(row+1)*cols]...)
	}
	if n := len(SampleRows(rows)); n != sampleRows {
		t.Fatalf("%d sampled rows of %d, want %d", n, rows, sampleRows)
	}
	cands := []Candidate{{quantize.Q2, 32}, {quantize.Q4, 32}, {quantize.Q4, 128}, {quantize.Q8, 32}}
	c, err := Measure(ctx, nil, "w", sample, rows, cols, cands, MeasureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantBits := []float64{3, 5, 4.25, 8.5}
	for k := range cands {
		if math.Abs(c.Bits[k]-wantBits[k]) > 1e-9 {
			t.Errorf("%s: %v bits per weight, want %v", cands[k], c.Bits[k], wantBits[k])
		}
	}
	if c.Params != rows*cols || !(c.Err[0] > c.Err[2] && c.Err[2] > c.Err[1] && c.Err[1] > c.Err[3] && c.Err[3] > 0) {
		t.Errorf("params %d, errors %v: want q2 > q4/g128 > q4 > q8 > 0", c.Params, c.Err)
	}
	if _, err := Measure(ctx, nil, "w", sample[:10], rows, cols, cands, MeasureOptions{}); err == nil {
		t.Error("a sample that is not whole rows measured")
	}
}

// TestMix: the plan meets the budget, spends it where the error drops
// most per bit, and a target below every format is an error.
func TestMix(t *testing.T) {
	// Two tensors of equal size: a's error drops 100x from 3 to 5 bits,
	// b's 2x. At 4 bits on average only one can have 5 bits: a.
	costs := []Costs{
		{Name: "a", Params: 1000, Bits: []float64{3, 5, 8.5}, Err: []float64{1, 0.01, 0.0001}},
		{Name: "b", Params: 1000, Bits: []float64{3, 5, 8.5}, Err: []float64{0.02, 0.01, 0.0001}},
	}
	for _, tc := range []struct {
		target float64
		want   []int
	}{{3, []int{0, 0}}, {4, []int{1, 0}}, {5, []int{1, 1}}, {5.75, []int{1, 1}}, {7, []int{2, 1}}, {9, []int{2, 2}}} {
		pick, err := Mix(costs, tc.target)
		if err != nil {
			t.Fatal(err)
		}
		var bits float64
		for i, k := range pick {
			bits += costs[i].Bits[k] / 2
		}
		if bits > tc.target+1e-9 {
			t.Errorf("target %v: %v bits", tc.target, bits)
		}
		if pick[0] != tc.want[0] || pick[1] != tc.want[1] {
			t.Errorf("target %v: picked %v, want %v", tc.target, pick, tc.want)
		}
	}
	if _, err := Mix(costs, 2.5); err == nil || !strings.Contains(err.Error(), "below") {
		t.Errorf("a target below every format: %v", err)
	}
	// A candidate that cannot store a tensor is never picked.
	inf := []Costs{{Name: "c", Params: 10, Bits: []float64{math.Inf(1), 5}, Err: []float64{math.Inf(1), 0.1}}}
	if pick, err := Mix(inf, 6); err != nil || pick[0] != 1 {
		t.Errorf("picked %v (%v), want the candidate that stores it", pick, err)
	}
}

// TestParseTarget: a number of bits that is no format's name is a target.
func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits float64
		ok   bool
	}{{"3.5", 3.5, true}, {" 2.7 ", 2.7, true}, {"4", 0, false}, {"q4", 0, false}, {"1.58", 0, false},
		{"0", 0, false}, {"-3", 0, false}, {"NaN", 0, false}, {"Inf", 0, false}, {"x", 0, false}} {
		bits, ok := ParseTarget(tc.in)
		if ok != tc.ok || bits != tc.bits {
			t.Errorf("ParseTarget(%q) = %v, %v; want %v, %v", tc.in, bits, ok, tc.bits, tc.ok)
		}
	}
	if got := TargetName(3.5); got != "mix3.5" {
		t.Errorf("TargetName(3.5) = %q", got)
	}
}

// TestErrorOf: with a diagonal Hessian the output error is the
// importance-weighted error of that diagonal; off-diagonal terms count.
func TestErrorOf(t *testing.T) {
	w := []float32{1, 2, -1, 0.5}
	dq := []float32{0.5, 2, -2, 0.5}
	for _, tc := range []struct {
		name     string
		dq, imp  []float32
		h        []float32
		want     float64
		wantSelf float64
	}{
		{"uniform", dq, nil, nil, 0.25 + 1, 1 + 4 + 1 + 0.25},
		// d rows (0.5, 0) and (1, 0)
		{"importance", dq, []float32{2, 1}, nil, 0.5 + 2, 2 + 4 + 2 + 0.25},
		{"diagonal Hessian", dq, nil, []float32{2, 0, 0, 1}, 0.5 + 2, 2 + 4 + 2 + 0.25},
		// rows (1, 2) and (-1, 0.5) against [[1, 1], [1, 1]]: (d0+d1)²
		{"correlated", dq, nil, []float32{1, 1, 1, 1}, 0.25 + 1, 9 + 0.25},
	} {
		if got := errorOf(w, tc.dq, tc.imp, tc.h, 2); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: error %v, want %v", tc.name, got, tc.want)
		}
		if got := errorOf(w, nil, tc.imp, tc.h, 2); math.Abs(got-tc.wantSelf) > 1e-12 {
			t.Errorf("%s: signal %v, want %v", tc.name, got, tc.wantSelf)
		}
	}
}

// TestMeasureCompensated: with the tensor's Hessian the cost is its
// output's noise-to-signal ratio (the block gain left out), and measuring
// as compensation stores the tensor gives every compensable candidate a
// lower cost than the plain search; a format that does not take
// compensation costs the same either way.
func TestMeasureCompensated(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols, n = 64, 64, 500
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	// Inputs sharing two factors, as activations do.
	h := make([]float32, cols*cols)
	ms := make([]float32, cols)
	x := make([]float64, cols)
	for range n {
		f0, f1 := r.NormFloat64(), r.NormFloat64()
		for c := range x {
			x[c] = 0.2*r.NormFloat64() + f0*math.Sin(float64(c)) + f1*math.Cos(float64(3*c))
		}
		for i := range x {
			ms[i] += float32(x[i] * x[i] / n)
			for j := range x {
				h[i*cols+j] += float32(x[i] * x[j] / n)
			}
		}
	}
	st := &Stats{MeanSq: map[string][]float32{"w": ms}, Hessian: map[string][]float32{"w": h}, Gain: map[string]float64{"w": 7}}
	cands := []Candidate{{quantize.Q3S, 0}, {quantize.Q2S, 0}, {quantize.Q4, 32}, {quantize.Q5_0, 0}}
	plain, err := Measure(ctx, st, "w", w, rows, cols, cands, MeasureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := Measure(ctx, st, "w", w, rows, cols, cands, MeasureOptions{Compensate: true})
	if err != nil {
		t.Fatal(err)
	}
	// The plain costs are the output's noise-to-signal ratio, no gain.
	q, err := quantize.Quantize(ctx, quantize.Q3S, w, rows, cols, quantize.Options{Search: true, Importance: st.Importance("w")})
	if err != nil {
		t.Fatal(err)
	}
	if want := errorOf(w, q.Dequantize(), nil, h, cols) / errorOf(w, nil, nil, h, cols); math.Abs(plain.Err[0]-want) > 1e-9*want {
		t.Errorf("q3s cost %v, want the output's noise-to-signal ratio %v", plain.Err[0], want)
	}
	for k, c := range cands {
		t.Logf("%s: cost %.4g plain, %.4g compensated", c, plain.Err[k], comp.Err[k])
		if c.Format.Compensable() && !(comp.Err[k] < 0.8*plain.Err[k]) {
			t.Errorf("%s: compensated cost %v, not 20%% below %v", c, comp.Err[k], plain.Err[k])
		}
		if !c.Format.Compensable() && comp.Err[k] != plain.Err[k] {
			t.Errorf("%s: cost %v compensated, %v plain: it takes no compensation", c, comp.Err[k], plain.Err[k])
		}
		if comp.Bits[k] != plain.Bits[k] {
			t.Errorf("%s: %v bits compensated, %v plain", c, comp.Bits[k], plain.Bits[k])
		}
	}
}
