package model

import (
	"context"
	"fmt"
	"testing"

	"lowbit/internal/fixture"
)

// fusingCPU is the CPU backend plus the optional fusions (Fuser for float
// weights, MatMulFuser), each written as the plain operations it stands
// for, so a test can check that the forward pass uses them rightly.
type fusingCPU struct {
	*CPU
	used map[string]int
}

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

func (f *fusingCPU) FusedMatMul(dst, x Buf, w Mat, fu Fusion) bool {
	wt := w.(*cpuMat).w
	in, err := f.Alloc(wt.Cols)
	if err != nil {
		panic(err)
	}
	copy(in.(cpuBuf), x.(cpuBuf)[:wt.Cols])
	if fu.Act != "" {
		f.used["gate"]++
		f.GLU(in, in, fu.Up, wt.Cols, fu.Act)
	}
	if fu.Norm != nil {
		f.used["norm"]++
		f.RMSNorm(in, in, fu.Norm, 1, fu.Dim, fu.Eps, fu.PlusOne)
	}
	out, _ := f.Alloc(wt.Rows)
	f.MatMul(out, in, w, 1)
	if fu.Add {
		f.used["add"]++
		f.Add(dst, out, wt.Rows)
	} else {
		copy(dst.(cpuBuf), out.(cpuBuf)[:wt.Rows])
	}
	return true
}

// TestMatMulFuser decodes with a backend that folds norms, gates and
// residual adds into the products: the logits equal the plain CPU's, and
// every fusion was used as often as a layer has places for it (Llama:
// norms before q/k/v and gate/up; BitNet also its two sub-norms).
func TestMatMulFuser(t *testing.T) {
	bitnet := fixture.Llama()
	bitnet.Arch = "BitNetForCausalLM"
	for _, tc := range []struct {
		spec  fixture.Spec
		norms int // a layer
	}{
		{fixture.Llama(), 2},
		{bitnet, 4},
	} {
		t.Run(tc.spec.Arch, func(t *testing.T) {
			ctx := context.Background()
			m, err := Load(ctx, writeFixture(t, tc.spec), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fb := &fusingCPU{CPU: NewCPU(1), used: map[string]int{}}
			plain, err := m.NewSession(SessionOptions{Backend: NewCPU(1)})
			if err != nil {
				t.Fatal(err)
			}
			fused, err := m.NewSession(SessionOptions{Backend: fb})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*Session{plain, fused} {
				if _, err := s.Forward(ctx, []int{1, 7, 8}); err != nil {
					t.Fatal(err)
				}
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
			// Per step and layer: the norms (the head's too), two adds, one gate.
			l := m.Config.NumLayers
			want := fmt.Sprint(map[string]int{"norm": 3 * (tc.norms*l + 1), "add": 3 * 2 * l, "gate": 3 * l})
			if got := fmt.Sprint(fb.used); got != want {
				t.Fatalf("fusions used %s, want %s", got, want)
			}
		})
	}
}
