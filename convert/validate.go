package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
	"lowbit/validate"
)

// ErrValidation is returned (wrapped) by Run when the written model fails
// its validation: the model is in place, with the report beside it in
// validation.json, so that it can be inspected; the caller decides.
var ErrValidation = errors.New("the converted model failed validation")

// validationFile holds the last stage's report in the output directory.
const validationFile = "validation.json"

// validationTokens is how much of the built-in text the model check reads:
// enough for stable figures, short enough that the float reference of a
// 1B-parameter model runs in well under a minute on a laptop.
const validationTokens = 256

// validateOutput is the last stage: the CPU kernels of the linear formats
// against the float64 reference, and the converted model in dir (to be
// renamed to out) against its float source (srcDir; "" when there is none,
// which the report says). The report is written into dir.
func validateOutput(ctx context.Context, dir, out, srcDir string, formats []quantize.Format, progress io.Writer) (*validate.Report, error) {
	rep := &validate.Report{}
	var cases []validate.Case
	var names []string
	for _, f := range formats {
		if f.Quantized() {
			cases = append(cases, validate.FormatCases(string(f))...)
			names = append(names, string(f))
		}
	}
	if len(cases) > 0 {
		if progress != nil {
			fmt.Fprintf(progress, "validating %s kernels\n", strings.Join(names, ", "))
		}
		k, err := validate.RunKernels(ctx, validate.KernelOptions{
			Seed:     validate.NewSeed(),
			Backends: validate.CPUBackends(),
			Cases:    cases,
			Shapes:   []validate.Shape{{Rows: 64, Cols: 256}, {Rows: 37, Cols: 200}},
		})
		if err != nil {
			return nil, err
		}
		rep.Kernels = k
	}
	if srcDir == "" {
		rep.NotChecked = append(rep.NotChecked, "the model against its source: a packed ternary checkpoint has no float weights to compare with")
	} else {
		if progress != nil {
			fmt.Fprintln(progress, "validating the model against its source")
		}
		m, _, err := validate.ModelDir(ctx, dir, validate.DirOptions{Reference: srcDir, MaxTokens: validationTokens})
		if err != nil {
			return nil, err
		}
		rep.Model, rep.ModelDir, rep.Reference = m, out, srcDir
	}
	rep.Finish()
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, validationFile), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", validationFile, err)
	}
	return rep, nil
}

// checkTokenizer loads the source's tokenizer and chat template before
// anything is converted: a model that cannot be tokenized can be neither
// validated nor run, and a tokenizer with ids past the embedding table would
// index outside it.
func checkTokenizer(dir string, cfg model.Config) error {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("the source's tokenizer does not load: %w", err)
	}
	if n := tok.VocabSize(); n > cfg.VocabSize {
		return fmt.Errorf("the source's tokenizer has %d tokens, more than config.json's vocab_size %d", n, cfg.VocabSize)
	}
	if _, err := tokenizer.LoadChatTemplate(dir); err != nil {
		return fmt.Errorf("the source's chat template does not load: %w", err)
	}
	return nil
}

// validationRecord is the manifest's summary of the last stage's report.
func validationRecord(r *validate.Report) *manifest.Validation {
	v := &manifest.Validation{Status: r.Status, NotChecked: r.NotChecked}
	if m := r.Model; m != nil {
		v.KLDMean, v.Top1, v.PPLRatio = finite(m.KLDMean), finite(m.Top1), finite(m.PPLRatio)
	}
	return v
}

// finite is &x, or nil for a figure JSON cannot hold (a failed check's NaN).
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}
