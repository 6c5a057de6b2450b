package calib

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/quantize"
)

// TestSensitivityTokens: the budget shared out by the model's size and
// tensor count, within its bounds.
func TestSensitivityTokens(t *testing.T) {
	for _, tc := range []struct {
		params  int64
		tensors int
		want    int
	}{
		{0, 7, maxSensitivityTokens},
		{260_000, 35, maxSensitivityTokens},
		{100 << 20, 64, 81},
		{256 << 20, 128, minSensitivityTokens},
		{1_100_000_000, 154, 0},
		{7e9, 224, 0},
	} {
		if got := SensitivityTokens(tc.params, tc.tensors); got != tc.want {
			t.Errorf("SensitivityTokens(%d, %d) = %d, want %d", tc.params, tc.tensors, got, tc.want)
		}
	}
}

// TestMeasureSensitivity: every linear weight of a small model gets a
// finite, non-negative divergence, some positive, the same on a second
// run, with and without compensation.
func TestMeasureSensitivity(t *testing.T) {
	m, tok := load(t, fixture.Llama())
	st, err := Collect(ctx, m, tok, Options{Hessians: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range []bool{false, true} {
		opts := SensitivityOptions{MaxTokens: 96, Compensate: comp}
		a, err := MeasureSensitivity(ctx, m, tok, st, opts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := MeasureSensitivity(ctx, m, tok, st, opts)
		if err != nil {
			t.Fatal(err)
		}
		n, positive := 0, 0
		for name := range m.Weights {
			if m.Config.TensorRole(name) != model.RoleLinear {
				continue
			}
			n++
			k, ok := a.KLD[name]
			if !ok || !(k >= 0) || math.IsInf(k, 0) {
				t.Errorf("compensate %v: %s: divergence %v (measured: %v)", comp, name, k, ok)
			}
			if k > 0 {
				positive++
			}
			if b.KLD[name] != k {
				t.Errorf("compensate %v: %s: %v, then %v", comp, name, k, b.KLD[name])
			}
		}
		if len(a.KLD) != n || positive == 0 || a.Probe != SensitivityProbe {
			t.Errorf("compensate %v: %d divergences (%d positive) for %d linear weights, probe %s", comp, len(a.KLD), positive, n, a.Probe)
		}
	}
}

// TestMeasureSensitivityRefused: a blank text and a cancelled context are
// errors.
func TestMeasureSensitivityRefused(t *testing.T) {
	m, tok := load(t, fixture.Llama())
	st, err := Collect(ctx, m, tok, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MeasureSensitivity(ctx, m, tok, st, SensitivityOptions{Text: " \n"}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("blank text: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := MeasureSensitivity(cctx, m, tok, st, SensitivityOptions{}); err == nil {
		t.Error("a cancelled context measured anyway")
	}
}

// TestMeasureScaledBySensitivity: with a tensor's sensitivity, its
// probe's cost is the divergence measured and every other candidate keeps
// its ratio to the probe's.
func TestMeasureScaledBySensitivity(t *testing.T) {
	w, rows, cols := randomRows(5, 64, 64)
	cands := []Candidate{SensitivityProbe, {quantize.Q2S, 0}, {quantize.Q4, 32}}
	plain, err := Measure(ctx, nil, "w", w, rows, cols, cands, MeasureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kld := range []float64{0.05, 2} {
		sens := &Sensitivity{Probe: SensitivityProbe, KLD: map[string]float64{"w": kld}}
		c, err := Measure(ctx, nil, "w", w, rows, cols, cands, MeasureOptions{Sensitivity: sens})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(c.Err[0]-kld) > 1e-12*kld {
			t.Errorf("divergence %v: the probe costs %v", kld, c.Err[0])
		}
		for k := range cands {
			if want := plain.Err[k] / plain.Err[0] * kld; math.Abs(c.Err[k]-want) > 1e-9*want {
				t.Errorf("divergence %v: %s costs %v, want %v", kld, cands[k], c.Err[k], want)
			}
		}
		// A tensor not measured keeps its plain costs.
		other, _ := Measure(ctx, nil, "v", w, rows, cols, cands, MeasureOptions{Sensitivity: sens})
		for k := range cands {
			if other.Err[k] != plain.Err[k] {
				t.Errorf("an unmeasured tensor's %s cost %v, plain %v", cands[k], other.Err[k], plain.Err[k])
			}
		}
	}
}

// TestSensitivityOnStories: on the real stories260K the tensors' costs to
// the output differ many times over, which the noise-to-signal ratio
// alone does not show: that spread is what the mix reads.
func TestSensitivityOnStories(t *testing.T) {
	if testing.Short() {
		t.Skip("runs stories260K once per linear weight")
	}
	dir := filepath.Join(testmodels.Dir(t), "stories260K-hf")
	m, tok := loadDir(t, dir)
	st, err := Collect(ctx, m, tok, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := MeasureSensitivity(ctx, m, tok, st, SensitivityOptions{MaxTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := math.Inf(1), 0.0
	for _, k := range s.KLD {
		lo, hi = min(lo, k), max(hi, k)
	}
	t.Logf("%d tensors: divergence %.4g to %.4g", len(s.KLD), lo, hi)
	if len(s.KLD) != 35 || !(lo > 0) || !(hi > 5*lo) {
		t.Errorf("%d tensors, divergences %v to %v: want stories260K's 35, spread over 5 times", len(s.KLD), lo, hi)
	}
}

// randomRows is a [rows, cols] matrix of Gaussian weights, seeded.
func randomRows(seed uint64, rows, cols int) ([]float32, int, int) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	return w, rows, cols
}
