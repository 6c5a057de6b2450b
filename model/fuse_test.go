package model

import (
	"context"
	"testing"

	"lowbit/internal/fixture"
)

// fusingCPU is the CPU backend plus the optional fused operations
// (Fuser for float weights, ResidualFuser), each written as the plain
// operations it stands for, so a test can check that the forward pass
// uses them rightly.
type fusingCPU struct {
	*CPU
	tmp  Buf
	used map[string]int
}

func (f *fusingCPU) scratch(n int) Buf { return f.View(f.tmp, 0, n) }

func (f *fusingCPU) Fuse(parts ...Mat) (Mat, bool) {
	var rows, cols int
	var all []float32
	for _, p := range parts {
		w := p.(*cpuMat).w
		if w.F32 == nil {
			return nil, false
		}
		rows, cols = rows+w.Rows, w.Cols
		all = append(all, w.F32...)
	}
	return prepare(FloatWeight(rows, cols, all)), true
}

func (f *fusingCPU) NormMatMul(dst, x Buf, nw, w Mat, dim int, eps float32, plusOne bool) bool {
	f.used["norm"]++
	t := f.scratch(dim)
	f.RMSNorm(t, x, nw, 1, dim, eps, plusOne)
	f.MatMul(dst, t, w, 1)
	return true
}

func (f *fusingCPU) MatMulAdd(x, a Buf, w Mat) bool {
	f.used["add"]++
	rows := w.(*cpuMat).w.Rows
	t := f.scratch(rows)
	f.MatMul(t, a, w, 1)
	f.Add(x, t, rows)
	return true
}

func (f *fusingCPU) GLUMatMulAdd(x, gate, up Buf, w Mat, act string) bool {
	f.used["glu"]++
	n, rows := w.(*cpuMat).w.Cols, w.(*cpuMat).w.Rows
	g := f.scratch(n)
	f.GLU(g, gate, up, n, act)
	t, _ := f.Alloc(rows)
	f.MatMul(t, g, w, 1)
	f.Add(x, t, rows)
	return true
}

// TestResidualFuser decodes with a backend that fuses norms into the
// products after them and residual adds into the products before them:
// the logits equal the plain CPU's, and every fused operation was used.
func TestResidualFuser(t *testing.T) {
	ctx := context.Background()
	m, err := Load(ctx, writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cpu := NewCPU(1)
	tmp, err := cpu.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	fb := &fusingCPU{CPU: cpu, tmp: tmp, used: map[string]int{}}
	plain, err := m.NewSession(SessionOptions{Backend: NewCPU(1)})
	if err != nil {
		t.Fatal(err)
	}
	fused, err := m.NewSession(SessionOptions{Backend: fb})
	if err != nil {
		t.Fatal(err)
	}
	toks := []int{1, 7, 8, 9}
	if _, err := plain.Forward(ctx, toks[:3]); err != nil {
		t.Fatal(err)
	}
	if _, err := fused.Forward(ctx, toks[:3]); err != nil {
		t.Fatal(err)
	}
	for i, tok := range []int{9, 4, 11} {
		want, err := plain.Forward(ctx, []int{tok})
		if err != nil {
			t.Fatal(err)
		}
		got, err := fused.Forward(ctx, []int{tok})
		if err != nil {
			t.Fatal(err)
		}
		for j := range want {
			if d := got[j] - want[j]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("step %d: logit %d = %v, want %v", i, j, got[j], want[j])
			}
		}
	}
	// Per step: a norm before q/k/v and gate/up in each layer and the
	// head's; an add after o and down in each layer.
	layers := m.Config.NumLayers
	if fb.used["norm"] != 3*(2*layers+1) || fb.used["add"] != 3*layers || fb.used["glu"] != 3*layers {
		t.Fatalf("fused operations used %v, want norm %d, add and glu %d each", fb.used, 3*(2*layers+1), 3*layers)
	}
}
