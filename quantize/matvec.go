package quantize

import (
	"context"
	"sync"
)

// MatVec computes y[r] = row r · x for every row, rows split across
// workers goroutines. A format with int8 activations (tq2, BitNet's W2A8)
// quantizes x to int8 once.
func MatVec(ctx context.Context, t *Tensor, x, y []float32, workers int) {
	var a *Int8Vec
	if t.Format.spec().Int8Activations {
		a = &Int8Vec{}
		QuantizeInt8(x[:t.Cols], a)
	}
	parallelRows(ctx, t.Rows, workers, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			if a != nil {
				y[r] = t.DotInt8(r, a)
			} else {
				y[r] = t.Dot(r, x)
			}
		}
	})
}

// MatMul computes y = x · Tᵀ for n tokens: x is [n, Cols], y is [n, Rows].
// Each worker takes a band of rows and applies each row to all n tokens
// while its packed bytes are in cache, so weights are read once.
func MatMul(ctx context.Context, t *Tensor, x []float32, n int, y []float32, workers int) {
	var acts []Int8Vec
	if t.Format.spec().Int8Activations {
		acts = make([]Int8Vec, n)
		for i := range acts {
			QuantizeInt8(x[i*t.Cols:(i+1)*t.Cols], &acts[i])
		}
	}
	parallelRows(ctx, t.Rows, workers, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			for i := 0; i < n; i++ {
				if acts != nil {
					y[i*t.Rows+r] = t.DotInt8(r, &acts[i])
				} else {
					y[i*t.Rows+r] = t.Dot(r, x[i*t.Cols:(i+1)*t.Cols])
				}
			}
		}
	})
}

// parallelRows runs fn over [0, rows) in contiguous bands, one per worker,
// stopping early (between bands) when ctx is done.
func parallelRows(ctx context.Context, rows, workers int, fn func(lo, hi int)) {
	if workers <= 1 || rows < 64 {
		fn(0, rows)
		return
	}
	// More bands than workers balances uneven cores; bands stay large enough
	// to amortize scheduling.
	bands := min(workers*4, (rows+15)/16)
	size := (rows + bands - 1) / bands
	var wg sync.WaitGroup
	next := make(chan int, bands)
	for b := 0; b < bands; b++ {
		next <- b
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				if ctx.Err() != nil {
					return
				}
				lo := b * size
				fn(lo, min(lo+size, rows))
			}
		}()
	}
	wg.Wait()
}
