package quantize_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"lowbit/internal/testmodels"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// TestBlockErrorsRealModels measures each block format's relative RMS
// error on the weight matrices of the real models in shared/models, with
// q4 (group 32) beside it. Their rows (64 to 192 weights) are not whole
// 256-weight super-blocks, so each matrix is quantized as rows of 256 of
// its weights in order (every one of them holds a multiple of 256): the
// figures are of the formats on trained weights, as a model with rows of
// 2048 or 4096 would take them. q4 takes the same rows.
func TestBlockErrorsRealModels(t *testing.T) {
	// Bounds: the measured figures with a margin of about 10%.
	bounds := map[string]map[quantize.Format]float64{
		"stories260K-hf": {
			quantize.Q4: 0.080, quantize.Q2K: 0.29, quantize.Q3K: 0.157, quantize.Q4K: 0.079,
			quantize.Q5_0: 0.044, quantize.Q5K: 0.039, quantize.Q5_1: 0.038, quantize.Q6K: 0.0185,
		},
		"llama2xs-260k-hf": {
			quantize.Q4: 0.079, quantize.Q2K: 0.28, quantize.Q3K: 0.159, quantize.Q4K: 0.078,
			quantize.Q5_0: 0.046, quantize.Q5K: 0.039, quantize.Q5_1: 0.038, quantize.Q6K: 0.019,
		},
	}
	formats := []quantize.Format{quantize.Q4, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5_0, quantize.Q5K, quantize.Q5_1, quantize.Q6K}
	for name, bound := range bounds {
		dir := filepath.Dir(testmodels.Path(t, filepath.Join(name, "model.safetensors")))
		set, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var ws [][]float32
		for _, n := range set.Names() {
			info, _ := set.Info(n)
			if len(info.Shape) != 2 || info.NumElements()%256 != 0 {
				continue
			}
			b, err := set.Data(n)
			if err != nil {
				t.Fatal(err)
			}
			w := make([]float32, info.NumElements())
			if err := safetensors.ToFloat32(info.DType, b, w); err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		set.Close()
		if len(ws) == 0 {
			t.Fatalf("%s: no matrix of whole 256-weight rows", name)
		}
		for _, f := range formats {
			var e, ref float64
			for _, w := range ws {
				q, err := quantize.Quantize(context.Background(), f, w, len(w)/256, 256, quantize.Options{Search: true})
				if err != nil {
					t.Fatal(err)
				}
				e += q.SqErr
				ref += q.SqRef
			}
			rel := math.Sqrt(e / ref)
			t.Logf("%-17s %-4s %6.4f bits: rel RMS error %.4f over %d matrices", name, f, bitsOf(f), rel, len(ws))
			if b, ok := bound[f]; ok && !(rel <= b) {
				t.Errorf("%s %s: rel RMS error %.4f above %.4f", name, f, rel, b)
			}
		}
	}
}

// bitsOf is a format's bits a weight at its default group, scales included.
func bitsOf(f quantize.Format) float64 {
	s := f.Spec()
	if s.BlockScales {
		return s.Bits
	}
	return float64(s.CodeBits) + 32/float64(s.Group) // q4: fp16 scale and minimum
}
