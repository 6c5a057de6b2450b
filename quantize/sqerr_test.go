package quantize

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSqErrMatchesDequantize holds Tensor.SqErr and SqRef, summed while
// quantizing, to the same sums taken over DequantizeRow afterwards (same
// terms in the same order, so equal exactly).
func TestSqErrMatchesDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, f := range []Format{Q8, Q4, Q2, Q1, TQ2, Q2S, Q3S, Q4S} {
		for _, shape := range [][2]int{{7, 64}, {5, 200}, {3, 37}} {
			rows, cols := shape[0], shape[1]
			w := make([]float32, rows*cols)
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			q, err := Quantize(context.Background(), f, w, rows, cols, Options{Search: true})
			if err != nil {
				t.Fatal(err)
			}
			var errSq, refSq float64
			row := make([]float32, cols)
			for r := 0; r < rows; r++ {
				q.DequantizeRow(r, row)
				for c, v := range row {
					ref := float64(w[r*cols+c])
					d := float64(v) - ref
					errSq += d * d
					refSq += ref * ref
				}
			}
			if q.SqErr != errSq || q.SqRef != refSq || errSq == 0 {
				t.Errorf("%s %v: SqErr %v SqRef %v, dequantized sums %v %v", f, shape, q.SqErr, q.SqRef, errSq, refSq)
			}
		}
	}
}

func TestFirstNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		w    []float32
		want int
	}{
		{nil, -1},
		{[]float32{0, 1, -2, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}, -1},
		{[]float32{0, nan}, 1},
		{[]float32{-inf}, 0},
		{append(make([]float32, 130), inf, nan), 130},
	} {
		if got := FirstNonFinite(tc.w); got != tc.want {
			t.Errorf("FirstNonFinite(%v) = %d, want %d", tc.w, got, tc.want)
		}
	}
}
