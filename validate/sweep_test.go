package validate

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/calib"
	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/tokenizer"
)

// fixtureModel writes spec and loads it with its tokenizer.
func fixtureModel(t *testing.T, spec fixture.Spec) (*model.Model, tokenizer.Tokenizer, string) {
	t.Helper()
	dir := t.TempDir()
	if err := spec.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(context.Background(), dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok, dir
}

// TestSweep: a row per format without and with calibration and per mix;
// bits per weight by class as the formats store them; more bits, less
// divergence; a mix within its target.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	spec := fixture.Llama()
	spec.Hidden, spec.Intermediate, spec.HeadDim = 128, 256, 32 // whole 128-weight groups in the tables
	ref, tok, _ := fixtureModel(t, spec)
	st, err := calib.Collect(ctx, ref, tok, calib.Options{Text: strings.Repeat("the cat sat on the mat. ", 30), Hessians: true})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("a dog ran to the door and then it sat. ", 20)
	rows, err := Sweep(ctx, ref, tok, SweepOptions{Texts: []SweepText{{Name: "t", Text: text}}, Calib: st, Variants: DefaultVariants([]float64{4.6}, true), MaxTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]SweepRow{}
	for _, r := range rows {
		byName[r.Variant.Name] = r
		n := 0
		for _, c := range r.Formats {
			n += c
		}
		if n != 7*spec.Layers || len(r.Texts) != 1 || r.Texts[0].Tokens == 0 {
			t.Fatalf("%s: %d linear weights counted, %d texts", r.Variant.Name, n, len(r.Texts))
		}
		if e, ok := r.Bits[string(model.RoleEmbedding)]; !ok || math.Abs(e-8.125) > 1e-9 {
			t.Errorf("%s: embedding at %v bits per weight, want q8 in groups of 128 (8.125)", r.Variant.Name, e)
		}
	}
	for _, name := range []string{"q8", "q8+calib", "q8+gptq", "q4", "q4+calib", "q4+gptq", "q2", "q2+calib", "q2+gptq", "q1", "q1+calib", "q1+gptq", "mix4.6", "mix4.6+gptq"} {
		if _, ok := byName[name]; !ok {
			t.Fatalf("no row %s among %d", name, len(rows))
		}
	}
	want := map[string]float64{"q8": 8.5, "q4": 5, "q2": 3, "q1": 1.5}
	for name, bits := range want {
		if got := byName[name].Bits[string(model.RoleLinear)]; math.Abs(got-bits) > 1e-9 {
			t.Errorf("%s: %v bits per linear weight, want %v", name, got, bits)
		}
	}
	kld := func(name string) float64 { return byName[name].Texts[0].KLDMean }
	if !(kld("q8") < kld("q4") && kld("q4") < kld("q2") && kld("q2") < kld("q1")) {
		t.Errorf("KLD q8 %.4g, q4 %.4g, q2 %.4g, q1 %.4g: not falling with bits", kld("q8"), kld("q4"), kld("q2"), kld("q1"))
	}
	if b := byName["mix4.6"].Bits[string(model.RoleLinear)]; b > 4.6+1e-9 || len(byName["mix4.6"].Formats) < 2 {
		t.Errorf("mix4.6: %v bits per linear weight in %v", b, byName["mix4.6"].Formats)
	}
	if _, err := Sweep(ctx, ref, tok, SweepOptions{Texts: []SweepText{{Name: "t", Text: text}}, Variants: DefaultVariants(nil, false)}); err == nil {
		t.Error("calibrated rows without a calibration were swept")
	}
}

// TestSampleText: a seed gives one text, another seed another, of at
// least the tokens asked.
func TestSampleText(t *testing.T) {
	ctx := context.Background()
	ref, tok, _ := fixtureModel(t, fixture.Llama())
	a, err := SampleText(ctx, ref, tok, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SampleText(ctx, ref, tok, 300, 1)
	c, _ := SampleText(ctx, ref, tok, 300, 2)
	if a != b || a == c {
		t.Errorf("seed 1 twice gave the same text: %v; seeds 1 and 2: %v", a == b, a == c)
	}
	if ids, _ := tok.Encode(a, false); len(ids) < 200 {
		t.Errorf("%d tokens sampled, want about 300", len(ids))
	}
}

// TestSweepDirRefusesCalibrationText: an evaluation text that holds the
// calibration text would grade what the calibration tuned.
func TestSweepDirRefusesCalibrationText(t *testing.T) {
	_, _, dir := fixtureModel(t, fixture.Llama())
	cal := strings.Repeat("the cat sat on the mat. ", 30)
	_, err := SweepDir(context.Background(), dir, SweepDirOptions{CalibText: cal, Texts: []SweepText{{Name: "eval", Text: "intro. " + cal}}})
	if err == nil || !strings.Contains(err.Error(), "calibration text") {
		t.Errorf("err = %v", err)
	}
}

// TestSweepStories sweeps the real stories260K model on text sampled from
// it: calibration lowers q4's divergence, and the mix at 5.2 bits (q4's
// bits there, whose 172-weight rows pad) does no worse than q4.
func TestSweepStories(t *testing.T) {
	dir := filepath.Join(testmodels.Dir(t), "stories260K-hf")
	rep, err := SweepDir(context.Background(), dir, SweepDirOptions{SampleTokens: 1024, SampleSeed: 1, Targets: []float64{5.2}})
	if err != nil {
		t.Fatal(err)
	}
	kld := map[string]float64{}
	for _, r := range rep.Rows {
		kld[r.Variant.Name] = r.Texts[0].KLDMean
		t.Logf("%-10s %.3f bits: KLD %.4f top-1 %.1f%%", r.Variant.Name, r.Bits["linear"], r.Texts[0].KLDMean, 100*r.Texts[0].Top1)
	}
	if !(kld["q4+calib"] < 0.9*kld["q4"]) {
		t.Errorf("q4 KLD %.4f calibrated, %.4f not: not 10%% lower", kld["q4+calib"], kld["q4"])
	}
	if !(kld["q4+gptq"] < kld["q4+calib"]) {
		t.Errorf("q4 KLD %.4f compensated, %.4f calibrated only", kld["q4+gptq"], kld["q4+calib"])
	}
	if !(kld["mix5.2"] <= kld["q4"]) {
		t.Errorf("mix5.2 KLD %.4f above q4's %.4f", kld["mix5.2"], kld["q4"])
	}
	if rep.Calibration.Source != calib.DefaultSource || rep.Calibration.Tokens < 1000 {
		t.Errorf("calibration %+v", rep.Calibration)
	}
}
