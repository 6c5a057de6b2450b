package convert

import (
	"context"
	"testing"

	"lowbit/internal/testmodels"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// TestSearchWinsOnStories measures how much the clipping search lowers the
// quantization error of the real stories260K linear weights against plain
// min/max scales, per format; the search must never lose.
func TestSearchWinsOnStories(t *testing.T) {
	set, err := safetensors.OpenDir(testmodels.Path(t, "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, f := range []quantize.Format{quantize.Q8, quantize.Q4, quantize.Q2} {
		var plain, search float64
		var n int
		for _, name := range set.Names() {
			info, _ := set.Info(name)
			if len(info.Shape) != 2 || name == "model.embed_tokens.weight" {
				continue
			}
			raw, _ := set.Data(name)
			w := make([]float32, info.NumElements())
			if err := safetensors.ToFloat32(info.DType, raw, w); err != nil {
				t.Fatal(err)
			}
			rows, cols := int(info.Shape[0]), int(info.Shape[1])
			for i, opt := range []quantize.Options{{}, {Search: true}} {
				q, err := quantize.Quantize(context.Background(), f, w, rows, cols, opt)
				if err != nil {
					t.Fatal(err)
				}
				e := quantize.RelL2(w, q.Dequantize())
				if i == 0 {
					plain += e
				} else {
					search += e
				}
			}
			n++
		}
		plain, search = plain/float64(n), search/float64(n)
		t.Logf("%s: mean rel L2 over %d linear weights: min/max %.4f, search %.4f (%.1f%% lower)", f, n, plain, search, 100*(1-search/plain))
		if search > plain {
			t.Errorf("%s: search error %.4f above min/max %.4f", f, search, plain)
		}
	}
}
