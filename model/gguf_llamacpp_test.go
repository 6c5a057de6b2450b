package model

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"lowbit/internal/testmodels"
	"lowbit/quantize"
)

// llamaCpp returns the directory of llama.cpp's built tools named by
// LOWBIT_LLAMACPP, or skips t where it is unset.
func llamaCpp(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LOWBIT_LLAMACPP")
	if dir == "" {
		t.Skip("skipping: LOWBIT_LLAMACPP (the bin directory of a llama.cpp build, with llama-quantize) is not set")
	}
	if _, err := os.Stat(filepath.Join(dir, "llama-quantize")); err != nil {
		t.Fatalf("LOWBIT_LLAMACPP=%s: %v", dir, err)
	}
	return dir
}

// llamaQuantize runs llama-quantize --pure (every tensor in one type) on
// src, writing dst.
func llamaQuantize(t *testing.T, bin, src, dst, typ string, extra ...string) {
	t.Helper()
	args := append(append([]string{"--pure"}, extra...), src, dst, typ, "2")
	out, err := exec.Command(filepath.Join(bin, "llama-quantize"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("llama-quantize %v: %v\n%s", args, err, out)
	}
}

// dequantized is m with every quantized weight decoded to float32 by
// lowbit's reference (code and scale of each weight).
func dequantized(t *testing.T, m *Model) *Model {
	t.Helper()
	float := map[string]*Weight{}
	for name, w := range m.Weights {
		if w.Q == nil {
			float[name] = w
			continue
		}
		out := make([]float32, w.Rows*w.Cols)
		for r := range w.Rows {
			w.Q.DequantizeRowRef(r, out[r*w.Cols:])
		}
		float[name] = FloatWeight(w.Rows, w.Cols, out)
	}
	ref, err := New(m.Config, float)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// stepLogits runs tokens through a fresh CPU session one at a time (the
// decode path: quantized dot products) and returns every position's logits.
func stepLogits(t *testing.T, m *Model, tokens []int) []float32 {
	t.Helper()
	s, err := m.NewSession(SessionOptions{Backend: NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, tok := range tokens {
		l, err := s.Forward(context.Background(), []int{tok})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l...)
	}
	return out
}

// TestGGUFLlamaCpp quantizes k256-f16.gguf with llama.cpp's llama-quantize
// to each ggml type lowbit reads, loads the file, and checks that
//   - each matrix is the lowbit format of its type (the block types' bytes
//     kept as they are);
//   - a prompt's logits on the CPU equal, to a relative L2 of 1e-3, those of
//     the same model with every weight decoded to float32 by lowbit's
//     reference decode and run through the float path;
//   - lowbit's decode of every weight equals llama.cpp's own, as
//     llama-quantize --allow-requantize writes it to an F32 file;
//   - lowbit's quantizer, given the F16 weights, errs no more than
//     llama-quantize's (relative RMS error against the F16 weights).
func TestGGUFLlamaCpp(t *testing.T) {
	bin := llamaCpp(t)
	src := testmodels.GGUF(t, "k256-f16.gguf")
	ctx := context.Background()
	orig, err := Load(ctx, src, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{1, 403, 407, 261, 378, 430, 267, 302, 318, 275, 400, 261, 291, 389, 290, 353}
	for _, tc := range []struct {
		typ    string
		format quantize.Format
	}{
		{"Q8_0", quantize.Q8}, {"Q4_0", quantize.Q4}, {"Q4_1", quantize.Q4},
		{"Q5_0", quantize.Q5_0}, {"Q5_1", quantize.Q5_1}, {"Q2_K", quantize.Q2K},
		{"Q3_K", quantize.Q3K}, {"Q4_K", quantize.Q4K}, {"Q5_K", quantize.Q5K}, {"Q6_K", quantize.Q6K},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			dir := t.TempDir()
			qpath := filepath.Join(dir, "k256-"+tc.typ+".gguf")
			llamaQuantize(t, bin, src, qpath, tc.typ)
			m, err := Load(ctx, qpath, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for name, w := range m.Weights {
				if w.Rows > 1 {
					names = append(names, name)
					if w.Q == nil || w.Q.Format != tc.format {
						t.Errorf("%s is %s, want %s", name, w.Format(), tc.format)
					}
				}
			}
			sort.Strings(names)
			ref := dequantized(t, m)
			want := allLogits(t, ref, tokens)
			for _, run := range []struct {
				name   string
				logits func(*testing.T, *Model, []int) []float32
			}{{"prompt", allLogits}, {"token by token", stepLogits}} {
				if e := relL2(run.logits(t, m, tokens), want); !(e <= 1e-3) {
					t.Errorf("%s: logits differ from the dequantized model's by %.3g (relative L2)", run.name, e)
				} else {
					t.Logf("%s: logits against the dequantized model's: relative L2 %.2g", run.name, e)
				}
			}

			// llama.cpp's own decode, written as F32.
			fpath := filepath.Join(dir, "k256-"+tc.typ+"-f32.gguf")
			llamaQuantize(t, bin, qpath, fpath, "F32", "--allow-requantize")
			llm, err := Load(ctx, fpath, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var differ, total int
			for _, name := range names {
				w, lw := ref.Weights[name], llm.Weights[name]
				for i, v := range w.F32 {
					if v != lw.F32[i] {
						if differ < 3 {
							t.Errorf("%s weight %d: lowbit decodes %v, llama.cpp %v", name, i, v, lw.F32[i])
						}
						differ++
					}
				}
				total += len(w.F32)
			}
			if differ > 0 {
				t.Errorf("%d of %d weights decode otherwise than llama.cpp's", differ, total)
			}

			if !tc.format.Spec().BlockScales {
				return
			}
			// Quantizer quality against llama-quantize's on the same weights.
			var lbErr, llErr, refSq float64
			for _, name := range names {
				w := orig.Weights[name]
				q, err := quantize.Quantize(ctx, tc.format, w.F32, w.Rows, w.Cols, quantize.Options{Search: true})
				if err != nil {
					t.Fatal(err)
				}
				lbErr += q.SqErr
				refSq += q.SqRef
				for i, v := range w.F32 {
					d := float64(ref.Weights[name].F32[i]) - float64(v)
					llErr += d * d
				}
			}
			lb, ll := sqrtRatio(lbErr, refSq), sqrtRatio(llErr, refSq)
			t.Logf("relative RMS error on the F16 weights: lowbit %.5f, llama-quantize %.5f", lb, ll)
			if lb > ll*1.02 {
				t.Errorf("lowbit's %s quantizer errs %.5f, llama-quantize's %.5f", tc.format, lb, ll)
			}
		})
	}
}

// sqrtRatio is sqrt(a/b) as a relative error figure.
func sqrtRatio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Sqrt(a / b)
}
