package validate

import (
	"context"
	"fmt"

	"lowbit/model"
	"lowbit/quantize"
)

// A BitNet b1.58 model is trained with ternary weights: its bf16 master
// weights are never run as they are (transformers quantizes them on the
// fly), so the float model a converted BitNet model is measured against
// is the master weights ternarized, each linear weight S·t with its
// absmean scale S and t in {-1, 0, 1}, kept in floats ("fake-quantized").
// The check then measures what lowbit's runtime costs beyond the weights
// the model was trained with: int8 activations and the 8-bit embedding
// and head.

// ReferenceTernary names, in a report, a reference whose linear weights
// were ternarized this way.
const ReferenceTernary = "linear weights ternarized (absmean) in floats, as BitNet runs them"

// TernaryThresholds are the pass marks of a BitNet model against its
// ternarized reference: top-1 agreement of 99%, what BitNet b1.58 2B-4T
// is held to (issue 7); the divergence and perplexity bounds are tq2's.
func TernaryThresholds() Thresholds {
	t := DefaultThresholds("tq2")
	t.MinTop1 = 0.99
	return t
}

// isTernaryPair reports whether a converted model and its reference are
// compared through TernarizeLinears: a BitNet model converted to tq2.
func isTernaryPair(quant *model.Model, format string) bool {
	return quant.Config.Arch == "bitnet" && format == string(quantize.TQ2)
}

// TernarizeLinears replaces every float linear weight of m, in its map, by
// its ternarization as tq2 quantizes it (the same per-tensor absmean scale
// and rounding), dequantized to floats; embeddings, norms and already
// quantized weights are kept. Each original matrix is dropped as its
// replacement comes in, so a 2B-parameter reference needs about one copy
// of its float weights, not two.
func TernarizeLinears(ctx context.Context, m *model.Model) error {
	for name, w := range m.Weights {
		if m.Config.TensorRole(name) != model.RoleLinear || w.F32 == nil {
			continue
		}
		q, err := quantize.Quantize(ctx, quantize.TQ2, w.F32, w.Rows, w.Cols, quantize.Options{})
		if err != nil {
			return fmt.Errorf("validate: ternarize reference tensor %s: %w", name, err)
		}
		m.Weights[name] = model.FloatWeight(w.Rows, w.Cols, q.Dequantize())
	}
	return nil
}
