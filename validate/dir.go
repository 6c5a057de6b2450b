package validate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
)

// DirOptions tune ModelDir.
type DirOptions struct {
	// Reference is the float original (empty: FindReference).
	Reference string
	// CacheDir is the HF cache searched for the reference.
	CacheDir string
	// Text, MaxTokens and Backend are as in ModelOptions.
	Text      string
	MaxTokens int
	Backend   func() (model.Backend, error)
	// Adjust, when set, changes the format's default thresholds (flags).
	Adjust func(*Thresholds)
}

// ModelDir checks a converted lowbit model directory against its float
// original and returns the report and the reference directory used. A
// BitNet model converted to tq2 is measured against its original's
// ternarized weights (TernarizeLinears), with TernaryThresholds.
func ModelDir(ctx context.Context, dir string, o DirOptions) (*ModelReport, string, error) {
	man, err := manifest.Read(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("validate: %s has no %s: not a lowbit model (convert it first)", dir, manifest.FileName)
	}
	if err != nil {
		return nil, "", fmt.Errorf("validate: %w", err)
	}
	ref := o.Reference
	if ref == "" {
		if ref, err = FindReference(dir, o.CacheDir); err != nil {
			return nil, "", err
		}
	}
	quant, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return nil, "", err
	}
	refModel, err := model.Load(ctx, ref, model.LoadOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("validate: reference: %w", err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, "", err
	}
	th, refWeights := ManifestThresholds(man), ""
	if isTernaryPair(quant, man.Quantization.Format) {
		if err := TernarizeLinears(ctx, refModel); err != nil {
			return nil, "", err
		}
		th, refWeights = TernaryThresholds(), ReferenceTernary
	}
	if o.Adjust != nil {
		o.Adjust(&th)
	}
	rep, err := CompareModels(ctx, quant, refModel, tok, ModelOptions{Text: o.Text, MaxTokens: o.MaxTokens, Thresholds: th, Backend: o.Backend})
	if err != nil {
		return nil, "", err
	}
	rep.Format, rep.ReferenceWeights = man.Quantization.Format, refWeights
	return rep, ref, nil
}

// ManifestThresholds are the default pass marks of a converted model: its
// linear format's, and for a mix of formats those of the format of most
// bits per weight at or below the mix's target (a mix at 4.6 bits is held
// to 4-bit marks, one at 3.5 to 2-bit marks).
func ManifestThresholds(man *manifest.Manifest) Thresholds {
	q := man.Quantization
	if q.TargetBits <= 0 {
		return DefaultThresholds(q.Format)
	}
	best := quantize.Format("")
	for _, f := range quantize.Formats() {
		s := f.Spec()
		if f.Quantized() && !s.Int8Activations && s.Bits <= q.TargetBits && (best == "" || s.Bits > best.Bits()) {
			best = f
		}
	}
	return DefaultThresholds(string(best))
}

// FormatCases keeps the cases of the given format (all when empty).
func FormatCases(format string) []Case {
	var out []Case
	for _, c := range Cases() {
		if format == "" || string(c.Format) == format {
			out = append(out, c)
		}
	}
	return out
}

// RealWeights takes up to maxRows rows of a few linear weights of a float
// model directory (the first layer's attention and MLP projections), as
// kernel inputs with the value distributions of a trained model.
func RealWeights(ctx context.Context, dir string, maxRows int) ([]RealWeight, error) {
	if _, err := os.Stat(filepath.Join(dir, manifest.FileName)); err == nil {
		return nil, fmt.Errorf("validate: --model %s is a quantized lowbit model; give its float original", dir)
	}
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return nil, err
	}
	var names []string
	for name, w := range m.Weights {
		if w.F32 != nil && w.Rows > 1 && strings.Contains(name, "layers.0.") && strings.HasSuffix(name, "proj.weight") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("validate: %s has no float projection weights in its first layer", dir)
	}
	var out []RealWeight
	for _, name := range names {
		w := m.Weights[name]
		rows := min(w.Rows, maxRows)
		out = append(out, RealWeight{Name: name, Rows: rows, Cols: w.Cols, W: w.F32[:rows*w.Cols]})
	}
	return out, nil
}
