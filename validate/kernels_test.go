package validate

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"lowbit/half"
	"lowbit/quantize"
)

func TestCPUKernelsPass(t *testing.T) {
	rep, err := RunKernels(context.Background(), KernelOptions{Seed: 42, Backends: []Backend{CPU{Workers: 2}, Quantize{Workers: 2}}, Missing: map[string]string{"cuda": "no GPU found"}})
	if err != nil {
		t.Fatal(err)
	}
	worst := map[string]float64{}
	for _, r := range rep.Results {
		k := fmt.Sprintf("%s/%s/%s/n%d", r.Backend, r.Format, r.Act, r.N)
		worst[k] = math.Max(worst[k], r.RelErr)
		if r.Status != Pass {
			t.Errorf("%+v", r)
		}
	}
	t.Log(worst)
	total := 0 // each case on each shape its rows are whole blocks of, two inputs each
	for _, c := range Cases() {
		for _, s := range Shapes() {
			if s.Cols%c.Format.Spec().Block == 0 || !c.Format.Spec().BlockScales {
				total += 2
			}
		}
	}
	if len(rep.Backends) != 3 || rep.Backends[2].Status != Skipped || rep.Backends[0].Total != total || rep.Backends[1].Total != rep.Backends[0].Total {
		t.Errorf("backends %+v", rep.Backends)
	}
	if !rep.Passed() {
		t.Error("report did not pass")
	}
}

// TestBlockFormatKernels checks the CPU products of GGUF's block formats,
// asked for by name (GGUF's spelling too): only the shapes whose rows are
// whole blocks run.
func TestBlockFormatKernels(t *testing.T) {
	for _, f := range []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K} {
		cases := FormatCases(string(f))
		if len(cases) != 2 || cases[0].Format != f {
			t.Fatalf("%s: cases %+v", f, cases)
		}
		if upper := FormatCases(strings.ToUpper(string(f))); fmt.Sprint(upper) != fmt.Sprint(cases) {
			t.Errorf("%s: cases %+v, in upper case %+v", f, cases, upper)
		}
		rep, err := RunKernels(context.Background(), KernelOptions{Seed: 7, Backends: []Backend{CPU{Workers: 2}, Quantize{Workers: 2}, corrupted{CPU{Workers: 2}}}, Cases: cases})
		if err != nil {
			t.Fatal(err)
		}
		whole := 0
		for _, s := range Shapes() {
			if s.Cols%f.Spec().Block == 0 {
				whole++
			}
		}
		for i, b := range rep.Backends {
			if b.Total != 2*2*whole || (b.Status == Pass) != (i < 2) {
				t.Errorf("%s: backend %+v", f, b)
			}
		}
	}
}

// broken is a backend whose products are off by a little: the checks must
// catch it for every format.
type broken struct {
	CPU
	scale float32
	nan   bool
}

func (b broken) Name() string { return "broken" }
func (b broken) MatVec(t *quantize.Tensor, x []float32, act Act) ([]float32, error) {
	y, err := b.CPU.MatVec(t, x, act)
	return b.spoil(y), err
}
func (b broken) MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	y, err := b.CPU.MatMul(t, x, n)
	return b.spoil(y), err
}
func (b broken) spoil(y []float32) []float32 {
	if b.nan {
		y[len(y)/2] = float32(math.NaN())
		return y
	}
	for i := range y {
		y[i] *= b.scale // as a wrong scale conversion would
	}
	return y
}

// corrupted runs the real CPU kernels on a weight with one scale read wrong
// (a factor of 4 on one group, as a misplaced fp16 conversion would give;
// tq2, which has one scale per tensor, gets one row of codes flipped).
type corrupted struct{ CPU }

func (b corrupted) Name() string { return "corrupted" }
func (b corrupted) MatVec(t *quantize.Tensor, x []float32, act Act) ([]float32, error) {
	return b.CPU.MatVec(corrupt(t), x, act)
}
func (b corrupted) MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	return b.CPU.MatMul(corrupt(t), x, n)
}
func corrupt(t *quantize.Tensor) *quantize.Tensor {
	c := *t
	if len(t.Scales) == 0 {
		c.Data = append([]byte(nil), t.Data...)
		row := c.Data[:t.RowBytes()]
		for i := range row {
			row[i] ^= 0xff
		}
		return &c
	}
	c.Scales = append([]half.Float16(nil), t.Scales...)
	g := len(c.Scales) / 2
	c.Scales[g] = half.FromFloat32(4 * c.Scales[g].Float32())
	return &c
}

func TestChecksCanFail(t *testing.T) {
	for _, b := range []Backend{broken{scale: 1.08}, broken{nan: true}, corrupted{}} {
		rep, err := RunKernels(context.Background(), KernelOptions{Seed: 7, Backends: []Backend{b}, Shapes: []Shape{{16, 96}}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Passed() {
			t.Errorf("a broken backend (%+v) passed", b)
		}
		for _, r := range rep.Results {
			if r.Status != Fail {
				t.Errorf("broken %+v: %s %s n=%d passed with error %g", b, r.Format, r.Act, r.N, r.RelErr)
			}
		}
	}
}
