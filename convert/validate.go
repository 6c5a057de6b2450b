package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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

// validateOutput is the last stage: the CPU kernels of the linear format
// against the float64 reference, and (when the model has a tokenizer) the
// converted model in dir (to be renamed to out) against its float source.
// The report is written into dir.
func validateOutput(ctx context.Context, dir, out, srcDir string, format quantize.Format, progress io.Writer) (*validate.Report, error) {
	rep := &validate.Report{}
	if format.Quantized() {
		if progress != nil {
			fmt.Fprintf(progress, "validating %s kernels\n", format)
		}
		k, err := validate.RunKernels(ctx, validate.KernelOptions{
			Backends: validate.CPUBackends(),
			Cases:    validate.FormatCases(string(format)),
			Shapes:   []validate.Shape{{Rows: 64, Cols: 256}, {Rows: 37, Cols: 200}},
		})
		if err != nil {
			return nil, err
		}
		rep.Kernels = k
	}
	if _, err := tokenizer.Load(dir); err == nil && srcDir != "" { // "": no float source (bitnet.go)
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
