package convert

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/calib"
	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
	"lowbit/validate"
)

// TestConvertCalibration: a conversion calibrates on the built-in text
// unless told otherwise, records what it used, and the weights it stores
// differ from an uncalibrated conversion's only in their scales' choice.
func TestConvertCalibration(t *testing.T) {
	text := filepath.Join(t.TempDir(), "calib.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("the cat sat on the mat and looked at the door. ", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	textBytes, _ := os.ReadFile(text)
	for _, tc := range []struct {
		name   string
		opts   Options
		source string // "": no calibration
		sha    string
	}{
		{"default", Options{Bits: "4"}, calib.DefaultSource, calib.TextHash(calib.DefaultText)},
		{"file", Options{Bits: "4", Calib: text, CalibTokens: 100}, text, calib.TextHash(string(textBytes))},
		{"off", Options{Bits: "4", NoCalib: true}, "", ""},
		{"no search", Options{Bits: "4", NoSearch: true}, "", ""},
		{"floats", Options{Bits: "f16"}, "", ""},
		{"q2", Options{Bits: "2"}, calib.DefaultSource, calib.TextHash(calib.DefaultText)},
		{"gptq", Options{Bits: "4", GPTQ: true}, calib.DefaultSource, calib.TextHash(calib.DefaultText)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := convertFixture(t, fixture.Llama(), tc.opts)
			m, err := manifest.Read(res.OutDir)
			if err != nil {
				t.Fatal(err)
			}
			c := m.Quantization.Calibration
			if tc.source == "" {
				if c != nil {
					t.Fatalf("calibration %+v recorded, want none", c)
				}
				return
			}
			if c == nil || c.Source != tc.source || c.SHA256 != tc.sha || c.Method != calib.Method || c.Tokens <= 0 {
				t.Fatalf("calibration %+v, want source %s, sha256 %s", c, tc.source, tc.sha)
			}
			if (c.Compensation == calib.GPTQ) != tc.opts.GPTQ {
				t.Errorf("compensation %q with GPTQ %v", c.Compensation, tc.opts.GPTQ)
			}
			if tc.opts.CalibTokens > 0 && c.Tokens > tc.opts.CalibTokens+1 {
				t.Errorf("%d tokens for --calib-tokens %d", c.Tokens, tc.opts.CalibTokens)
			}
		})
	}
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			opts Options
			want string
		}{
			{Options{Bits: "4", Calib: text, NoCalib: true}, "contradict"},
			{Options{Bits: "4", Calib: filepath.Join(t.TempDir(), "absent.txt")}, "--calib"},
			{Options{Bits: "4", CalibTokens: -1}, "--calib-tokens"},
			{Options{Bits: "3.5", NoCalib: true}, "--no-calib"},
			{Options{Bits: "3.5", GroupSize: 64}, "--group-size"},
			{Options{Bits: "0.5"}, "below the fewest"},
			{Options{Bits: "40"}, "no smaller than float"},
			{Options{Bits: "4", GPTQ: true, NoCalib: true}, "--no-calib"},
			{Options{Bits: "ternary", GPTQ: true}, "tq2 does not support"},
			{Options{Bits: "f16", GPTQ: true}, "--gptq: the linear weights stay f16"},
			{Options{Bits: "4", GPTQ: true, NoSearch: true}, "--gptq: --no-search"},
		} {
			src := writeSource(t, fixture.Llama(), nil)
			tc.opts.Source, tc.opts.Out = src, filepath.Join(t.TempDir(), "out")
			_, err := Run(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: %v, want an error naming %q", tc.opts, err, tc.want)
			}
		}
	})
}

// TestConvertMix: --bits 4.6 mixes formats per tensor to at most 4.6 bits
// per linear weight, records the mix and each tensor's format, and the
// model loads and validates.
func TestConvertMix(t *testing.T) {
	spec := fixture.Llama()
	spec.Hidden, spec.Intermediate, spec.HeadDim = 64, 128, 16
	res, _ := convertFixture(t, spec, Options{Bits: "4.6"})
	m, err := manifest.Read(res.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	q := m.Quantization
	if q.Format != "mix4.6" || q.TargetBits != 4.6 || q.Calibration == nil || res.Format != "mix4.6" {
		t.Fatalf("quantization %+v, result format %s", q, res.Format)
	}
	checkStored(t, res.OutDir, m)
	cfg, err := model.ParseConfig(m.Architecture)
	if err != nil {
		t.Fatal(err)
	}
	var bits, params float64
	formats := map[string]bool{}
	for _, e := range m.Tensors {
		if cfg.TensorRole(e.Name) != model.RoleLinear {
			continue
		}
		f, err := quantize.ParseFormat(e.Format)
		if err != nil || !f.Quantized() || (e.GroupSize <= 0) != f.Spec().TensorScale {
			t.Fatalf("%s stored as %q in groups of %d", e.Name, e.Format, e.GroupSize)
		}
		formats[fmt.Sprintf("%s/%d", e.Format, e.GroupSize)] = true
		for _, p := range e.Parts {
			bits += float64(p.Offsets[1]-p.Offsets[0]) * 8
		}
		params += float64(e.Shape[0] * e.Shape[1])
	}
	if bits/params > 4.6+1e-9 || bits/params < 3 {
		t.Errorf("%.3f bits per linear weight, want at most 4.6 (and not far below)", bits/params)
	}
	if len(formats) < 2 {
		t.Errorf("one format and group for every tensor (%v): nothing was mixed", formats)
	}
	if res.Validation == nil || res.Validation.Model == nil {
		t.Fatal("the mix was not validated")
	}
	if th := res.Validation.Model.Thresholds; th != validate.DefaultThresholds("q4") {
		t.Errorf("a 4.6-bit mix held to %+v, want the 4-bit marks", th)
	}
	if _, err := model.Load(context.Background(), res.OutDir, model.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCalibrationPaysOnStories: on the real stories260K model, the q4
// conversion calibrated on the built-in text is closer to the float model
// than the uncalibrated one on text sampled from the float model (2048
// tokens: the validation passage's 256 are too few to tell them apart).
func TestCalibrationPaysOnStories(t *testing.T) {
	ctx := context.Background()
	src := testmodels.Path(t, "stories260K-hf")
	ref, err := model.Load(ctx, src, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	text, err := validate.SampleText(ctx, ref, tok, 2048, 1)
	if err != nil {
		t.Fatal(err)
	}
	kld := map[string]float64{}
	for _, opts := range []Options{{NoCalib: true}, {}, {GPTQ: true}} {
		opts.Source, opts.Out, opts.Bits, opts.NoValidate = src, filepath.Join(t.TempDir(), "out"), "4", true
		res, err := Run(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		quant, err := model.Load(ctx, res.OutDir, model.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := validate.CompareModels(ctx, quant, ref, tok, validate.ModelOptions{Text: text, Window: 256})
		if err != nil {
			t.Fatal(err)
		}
		kld[res.Manifest.Quantization.Calibration.String()] = rep.KLDMean
	}
	none, cal, gptq := kld["none"], kld[calib.Method], kld[calib.Method+"+"+calib.GPTQ]
	t.Logf("q4 KLD mean on 2048 sampled tokens: %.4f uncalibrated, %.4f calibrated (%.1f%% lower), %.4f with GPTQ (%.1f%% lower)",
		none, cal, 100*(1-cal/none), gptq, 100*(1-gptq/none))
	// Issue 29's bar: calibration alone 15% below; GPTQ below that again.
	if !(cal < 0.85*none) || !(gptq < 0.85*none) || !(gptq < 0.9*cal) {
		t.Errorf("KLD %.4f calibrated, %.4f with GPTQ: not 15%% below the uncalibrated %.4f, or GPTQ not 10%% below calibration alone", cal, gptq, none)
	}
}
