package model

import (
	"context"
	"math/rand/v2"
	"testing"

	"lowbit/quantize"
)

// TestMatMulTQ2MatchesDotInt8: the table kernel gives quantize's W2A8
// DotInt8 bit for bit (the integer sums are exact), for rows that are not
// whole blocks, decode and prefill batches, and heavy-tailed activations.
func TestMatMulTQ2MatchesDotInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, tc := range []struct{ rows, cols, n int }{
		{1, 32, 1}, {17, 40, 1}, {64, 256, 3}, {33, 100, 5}, {128, 2560, 9},
	} {
		w := make([]float32, tc.rows*tc.cols)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		q, err := quantize.Quantize(context.Background(), quantize.TQ2, w, tc.rows, tc.cols, quantize.Options{})
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, tc.n*tc.cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if i%37 == 0 {
				x[i] *= 50 // outliers, as relu² activations have
			}
		}
		for _, workers := range []int{1, 2} {
			c := NewCPU(workers)
			y := make([]float32, tc.n*tc.rows)
			c.matMulTQ2(q, x, y, tc.n)
			var a quantize.Int8Vec
			for i := 0; i < tc.n; i++ {
				quantize.QuantizeInt8(x[i*tc.cols:(i+1)*tc.cols], &a)
				for r := 0; r < tc.rows; r++ {
					if got, want := y[i*tc.rows+r], q.DotInt8(r, &a); got != want {
						t.Fatalf("%dx%d n=%d workers %d: token %d row %d: %v, DotInt8 %v", tc.rows, tc.cols, tc.n, workers, i, r, got, want)
					}
				}
			}
		}
	}
}
