package convert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"

	"golang.org/x/sync/errgroup"

	"lowbit/calib"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
	"lowbit/tokenizer"
)

// mixPlaceholder is a mixed model's linear format until planMix has
// chosen each tensor's: quantized, so the plan checks the tensor as one.
const mixPlaceholder = quantize.Q8

// noCalibration says why the conversion cannot calibrate ("" when it can):
// calibration weighs the scale search, so it needs a search, a format
// with scales to search, and float weights to run.
func noCalibration(s settings, plans []*tensorPlan) string {
	for _, p := range plans {
		if p.packedScale != "" {
			return "a packed ternary checkpoint has no float weights to run"
		}
	}
	switch {
	case s.target > 0:
		return ""
	case !s.linear.Quantized():
		return fmt.Sprintf("the linear weights stay %s", s.linear)
	case s.linear.Spec().TensorScale:
		return fmt.Sprintf("%s has one scale per tensor, nothing to weigh", s.linear)
	case !s.search:
		return "--no-search: plain min/max scales weigh nothing"
	}
	return ""
}

// calibrate is the calibration stage: the float model in dir runs over
// the calibration text on the CPU (calib.Collect). The model is loaded
// whole, as validation's reference is, and dropped when this returns. Its
// weights are first checked as conversion checks them (so a bad weight is
// reported by tensor and place, not as a NaN in the calibration), and,
// with --allow-nonfinite, a NaN or Inf runs as 0, as it will be stored.
func calibrate(ctx context.Context, dir string, plans []*tensorPlan, s settings, progress io.Writer) (*calib.Stats, *calib.Sensitivity, error) {
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("calibrate: %w", err)
	}
	for _, p := range plans {
		w := m.Weights[p.name]
		if w == nil || w.F32 == nil {
			continue
		}
		if err := checkFinite(p, w.F32, 0, int64(w.Cols), s.allowNonFinite); err != nil {
			return nil, nil, err
		}
		formats := []quantize.Format{p.format}
		if p.role == model.RoleLinear && s.target > 0 {
			formats = formats[:0] // any candidate that stores it will do
			for _, c := range calib.Candidates() {
				formats = append(formats, c.Format)
			}
		}
		if err := storable(w.F32, w.Cols, formats); err != nil {
			return nil, nil, fmt.Errorf("tensor %s: quantize: %w", p.name, err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("calibrate: %w", err)
	}
	bar := progressBar(noBar{})
	opts := calib.Options{Text: s.calibText, MaxTokens: s.calibTokens, Workers: s.workers, Hessians: s.gptq}
	if progress != nil {
		var shown int
		opts.Progress = func(done, total int) {
			if shown == 0 {
				bar = newCountBar(progress, int64(total), fmt.Sprintf("calibrate on %s", s.calibSource))
			}
			bar.Add(done - shown)
			shown = done
		}
	}
	st, err := calib.Collect(ctx, m, tok, opts)
	bar.Finish()
	if err != nil {
		if errors.Is(err, calib.ErrHessiansTooLarge) {
			return nil, nil, fmt.Errorf("--gptq: %w", err)
		}
		return nil, nil, fmt.Errorf("calibrate: %w", err)
	}
	var sens *calib.Sensitivity
	if s.target > 0 {
		// A mix ranks its tensors by what each costs the model's output.
		bar = progressBar(noBar{})
		sopts := calib.SensitivityOptions{Text: s.calibText, Compensate: s.gptq}
		if progress != nil {
			var shown int
			sopts.Progress = func(done, total int) {
				if shown == 0 {
					bar = newCountBar(progress, int64(total), "measure each tensor's sensitivity")
				}
				bar.Add(done - shown)
				shown = done
			}
		}
		sens, err = calib.MeasureSensitivity(ctx, m, tok, st, sopts)
		bar.Finish()
		if err != nil {
			return nil, nil, fmt.Errorf("calibrate: %w", err)
		}
	}
	// Hand the float model's memory back now: left to the collector, it
	// would stay resident while quantizing grew the heap to twice its size.
	debug.FreeOSMemory()
	return st, sens, nil
}

// storable is nil when one of formats stores w, else the first's complaint.
func storable(w []float32, cols int, formats []quantize.Format) error {
	var first error
	for _, f := range formats {
		if !f.Quantized() {
			return nil
		}
		err := f.CheckRange(w, cols, 0)
		if err == nil {
			return nil
		}
		first = cmp.Or(first, err)
	}
	return first
}

// calibrationRecord is the manifest's account of the calibration (nil
// when none ran).
func calibrationRecord(s settings) *manifest.Calibration {
	if s.stats == nil {
		return nil
	}
	c := &manifest.Calibration{Source: s.calibSource, SHA256: s.stats.TextSHA256, Tokens: s.stats.Tokens, Method: calib.Method}
	if s.gptq {
		c.Compensation = calib.GPTQ
	}
	return c
}

// planMix chooses each linear weight's format for a mix (calib.Mix): every
// candidate's cost is measured on a sample of the tensor's rows, read
// from the checkpoint, in parallel; then each plan gets its format, group
// and parts.
func planMix(ctx context.Context, set *safetensors.Set, plans []*tensorPlan, s settings, progress io.Writer) error {
	var linear []*tensorPlan
	for _, p := range plans {
		if p.role == model.RoleLinear {
			linear = append(linear, p)
		}
	}
	if len(linear) == 0 {
		return fmt.Errorf("--bits %g: the model has no linear weights to mix", s.target)
	}
	cands := calib.Candidates()
	costs := make([]calib.Costs, len(linear))
	bar := newCountBar(progress, int64(len(linear)), fmt.Sprintf("measure %d formats", len(cands)))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.workers)
	for i, p := range linear {
		g.Go(func() error {
			w, err := sampleRows(p, set, s.allowNonFinite)
			if err != nil {
				return err
			}
			if costs[i], err = calib.Measure(gctx, s.stats, p.name, w, p.rows, p.cols, cands, calib.MeasureOptions{Compensate: s.gptq, Sensitivity: s.sens}); err != nil {
				return fmt.Errorf("tensor %s: %w", p.name, err)
			}
			bar.Add(1)
			return nil
		})
	}
	err := g.Wait()
	bar.Finish()
	if err != nil {
		return err
	}
	pick, err := calib.Mix(costs, s.target)
	if err != nil {
		return fmt.Errorf("--bits %g: %w", s.target, err)
	}
	for i, p := range linear {
		c := cands[pick[i]]
		p.format, p.group = c.Format, c.Group
		if p.group == 0 {
			p.group = c.Format.DefaultGroupSize()
		}
		p.parts = partsOf(p)
	}
	return nil
}

// sampleRows reads the rows calib.SampleRows picks of a planned tensor as
// float32, checked as conversion checks them.
func sampleRows(p *tensorPlan, set *safetensors.Set, allow bool) ([]float32, error) {
	raw, err := set.Data(cmp.Or(p.src, p.name))
	if err != nil {
		return nil, err
	}
	esz, cols := int64(p.info.DType.Size()), int64(p.cols)
	rows := calib.SampleRows(p.rows)
	w := make([]float32, len(rows)*p.cols)
	for i, r := range rows {
		if err := toFloat(p, raw[int64(r)*cols*esz:(int64(r)+1)*cols*esz], w[i*p.cols:(i+1)*p.cols], int64(r), cols, allow); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// linearFormats are the formats the plans store linear weights in, sorted.
func linearFormats(plans []*tensorPlan) []quantize.Format {
	var out []quantize.Format
	for _, p := range plans {
		if p.role == model.RoleLinear && !slices.Contains(out, p.format) {
			out = append(out, p.format)
		}
	}
	slices.Sort(out)
	return out
}
