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
// noGated refuses the gated output (Fusion.OutAct), as a backend may.
type fusingCPU struct {
	*CPU
	used    map[string]int
	noGated bool
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
	if fu.OutAct != "" && (f.noGated || fu.Add || wt.Rows%2 != 0) {
		return false
	}
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
	if fu.OutAct != "" {
		f.used["gated"]++
		h := wt.Rows / 2
		f.GLU(dst, out, f.View(out, h, h), h, fu.OutAct)
		return true
	}
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
// norms before q/k/v and gate/up; BitNet also its two sub-norms), the
// activation folded into the gate/up product where the backend takes
// that (gated), else into the down projection (gate).
func TestMatMulFuser(t *testing.T) {
	bitnet := fixture.Llama()
	bitnet.Arch = "BitNetForCausalLM"
	for _, tc := range []struct {
		spec    fixture.Spec
		norms   int // a layer
		noGated bool
	}{
		{fixture.Llama(), 2, false},
		{fixture.Llama(), 2, true},
		{bitnet, 4, false},
		{bitnet, 4, true},
	} {
		t.Run(fmt.Sprintf("%s/noGated=%v", tc.spec.Arch, tc.noGated), func(t *testing.T) {
			ctx := context.Background()
			m, err := Load(ctx, writeFixture(t, tc.spec), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fb := &fusingCPU{CPU: NewCPU(1), used: map[string]int{}, noGated: tc.noGated}
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
			gate := "gated"
			if tc.noGated {
				gate = "gate"
			}
			want := fmt.Sprint(map[string]int{"norm": 3 * (tc.norms*l + 1), "add": 3 * 2 * l, gate: 3 * l})
			if got := fmt.Sprint(fb.used); got != want {
				t.Fatalf("fusions used %s, want %s", got, want)
			}
		})
	}
}
