package model

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLinearBias checks the bias of a Linear's output: each row of the
// product plus the bias, before the residual add.
func TestLinearBias(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols, n = 6, 8, 3
	vals := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	w, bias, x, res := vals(rows*cols), vals(rows), vals(n*cols), vals(n*rows)
	for _, add := range []bool{false, true} {
		c := NewCPU(1)
		mats, err := c.Upload(FloatWeight(rows, cols, w))
		if err != nil {
			t.Fatal(err)
		}
		bm, err := c.Upload(FloatWeight(1, rows, bias))
		if err != nil {
			t.Fatal(err)
		}
		xb, _ := c.Alloc(n * cols)
		yb, _ := c.Alloc(n * rows)
		copy(c.buf(xb), x)
		copy(c.buf(yb), res)
		c.Linear(xb, Norm{}, Output{Dst: yb, W: mats[0], Bias: bm[0], Add: add})
		got := make([]float32, n*rows)
		if err := c.Read(got, yb); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, n*rows)
		for i := range n {
			for o := range rows {
				p := dot(w[o*cols:(o+1)*cols], x[i*cols:(i+1)*cols]) + bias[o]
				if add {
					p += res[i*rows+o]
				}
				want[i*rows+o] = p
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("add %v: got %v, want %v", add, got, want)
		}
	}
}

// TestLinearBadHandles checks that a backend's operations record, not
// panic on, a handle it did not make, and that the step returns it.
func TestLinearBadHandles(t *testing.T) {
	c := NewCPU(1)
	cache, err := c.NewCache(CacheShape{Layers: 1, Slots: 1, Positions: 4, KVDim: 2})
	if err != nil {
		t.Fatal(err)
	}
	st := &Step{Seqs: []Seq{{Tokens: []int{0}}}, Cache: cache}
	_, err = c.Step(context.Background(), st, func() error {
		c.Linear(MakeBuf(7, 4), Norm{}, Output{Dst: MakeBuf(8, 4), W: MakeMat(3, 4, 4)})
		return nil
	})
	if err == nil {
		t.Fatal("a Linear on handles the backend did not make passed")
	}
}
