package validate

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"lowbit/half"
	"lowbit/quantize"
)

// TestReferenceUnpacksLikeQuantize holds the independent unpacking to
// package quantize's Dequantize: two implementations of the documented layouts.
func TestReferenceUnpacksLikeQuantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2} {
		for _, shape := range [][3]int{{3, 64, 32}, {5, 100, 32}, {2, 256, 128}} {
			if f == quantize.TQ2 && shape[2] != 32 {
				continue
			}
			rows, cols := shape[0], shape[1]
			w := make([]float32, rows*cols)
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			opt := quantize.Options{GroupSize: shape[2]}
			if f == quantize.TQ2 {
				opt.GroupSize = 0
			}
			q, err := quantize.Quantize(context.Background(), f, w, rows, cols, opt)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := refWeights(q)
			if err != nil {
				t.Fatal(err)
			}
			deq := q.Dequantize()
			for r := 0; r < rows; r++ {
				for c := 0; c < cols; c++ {
					if got, want := ref[r][c], float64(deq[r*cols+c]); math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
						t.Fatalf("%s %v [%d,%d]: reference %g, Dequantize %g", f, shape, r, c, got, want)
					}
				}
			}
		}
	}
}

// TestReferenceUnpacksBlocks holds the independent unpacking of GGUF's
// block formats to package quantize's Dequantize.
func TestReferenceUnpacksBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, f := range []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K} {
		rows, cols := 3, 512
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		q, err := quantize.Quantize(context.Background(), f, w, rows, cols, quantize.Options{Search: true})
		if err != nil {
			t.Fatal(err)
		}
		ref, err := refWeights(q)
		if err != nil {
			t.Fatal(err)
		}
		deq := q.Dequantize()
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				if got, want := ref[r][c], float64(deq[r*cols+c]); math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s [%d,%d]: reference %g, Dequantize %g", f, r, c, got, want)
				}
			}
		}
	}
}

func TestFP16(t *testing.T) {
	for _, v := range []float32{0, 1, -2.5, 65504, 6.1035156e-05, 5.9604645e-08, 0.333251953125} {
		if got := fp16(uint16(half.FromFloat32(v))); got != float64(v) {
			t.Errorf("fp16(%g) = %g", v, got)
		}
	}
	if !math.IsNaN(fp16(0x7e00)) || !math.IsInf(fp16(0xfc00), -1) {
		t.Error("fp16 NaN or -Inf")
	}
}
