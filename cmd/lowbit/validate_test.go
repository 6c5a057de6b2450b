package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
)

func TestValidateKernels(t *testing.T) {
	out, _, err := runIn(t, "", "validate", "--kernels", "--seed", "9", "--device", "auto", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Status  string
		Kernels struct {
			Seed     uint64
			Backends []struct{ Backend, Status string }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != "PASS" || rep.Kernels.Seed != 9 || len(rep.Kernels.Backends) != 3 ||
		rep.Kernels.Backends[0].Backend != "cpu" || rep.Kernels.Backends[0].Status != "PASS" ||
		rep.Kernels.Backends[1].Backend != "cpu-quantize" || rep.Kernels.Backends[1].Status != "PASS" {
		t.Errorf("report %+v", rep)
	}
	// Without a GPU, CUDA is skipped, never passed.
	if b := rep.Kernels.Backends[len(rep.Kernels.Backends)-1]; b.Backend != "cuda" || b.Status == "PASS" {
		t.Errorf("cuda backend %+v", b)
	}
}

func TestValidateModel(t *testing.T) {
	src := testmodels.Path(t, "stories260K-hf")
	q := filepath.Join(t.TempDir(), "q4")
	if _, err := run(t, "convert", src, "--bits", "4", "-o", q, "-q"); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(t.TempDir(), "report.html")
	out, _, err := runIn(t, "", "validate", q, "--device", "cpu", "--max-tokens", "600", "--html", html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ACCURACY VALIDATION REPORT", "KLD mean", "top-1", "PPL", "hidden-state rel. error by layer", "result: PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	page, err := os.ReadFile(html)
	if err != nil || strings.Count(string(page), "<svg") != 2 || strings.Contains(string(page), "<script") {
		t.Errorf("HTML report: %v, %d plots", err, strings.Count(string(page), "<svg"))
	}
	// A threshold the model cannot meet fails with exit status 1.
	out, _, err = runIn(t, "", "validate", q, "--device", "cpu", "--max-tokens", "600", "--min-top1", "0.999", "--json")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, `"status": "FAIL"`) {
		t.Errorf("strict threshold: err %v, output %s", err, out)
	}
}

func TestValidateBadInput(t *testing.T) {
	src := testmodels.Path(t, "stories260K-hf")
	q := filepath.Join(t.TempDir(), "q8")
	if _, err := run(t, "convert", src, "--bits", "8", "-o", q, "-q"); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := fixture.Llama().Write(other); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing to do", []string{"validate"}, "--kernels"},
		{"no manifest", []string{"validate", src}, "not a lowbit model"},
		{"reference differs", []string{"validate", q, "--reference", other}, "reference"},
		{"empty text", []string{"validate", q, "--text", empty}, "empty"},
		{"missing text", []string{"validate", q, "--text", empty + ".none"}, "--text"},
		{"text is a directory", []string{"validate", q, "--text", other}, "--text: " + other + ": not a regular file (directory)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runIn(t, "", append(c.args, "--device", "cpu")...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}

// TestValidateSweep: --sweep prints a row per format, calibrated and not,
// and per mix, with bits per weight and each text's figures; --json
// carries the same; a second --text is only for a sweep.
func TestValidateSweep(t *testing.T) {
	src := t.TempDir()
	spec := fixture.Llama()
	spec.Hidden, spec.Intermediate, spec.HeadDim = 128, 256, 32
	if err := spec.Write(src); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(t.TempDir(), "eval.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("a dog ran to the door and then it sat. ", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runIn(t, "", "validate", "--sweep", src, "--text", text, "--sample", "200", "--targets", "4.6", "--max-tokens", "200", "-q")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"calibration built-in", "text eval.txt", "text sampled(seed 1)", "linear bpw", "q4+calib", "mix4.6", "eval.txt KLD", "sampled(seed 1) KLD"} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runIn(t, "", "validate", "--sweep", src, "--text", text, "--sample", "0", "--targets", "3.6", "--max-tokens", "200", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Texts []struct{ Name string }
		Rows  []struct {
			Variant struct{ Name string }
			Bits    map[string]float64 `json:"bits_per_weight"`
			Texts   []struct {
				KLD float64 `json:"kld_mean"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for i, r := range rep.Rows {
		names[r.Variant.Name] = i
		if len(r.Texts) != 1 || !(r.Texts[0].KLD >= 0) {
			t.Errorf("row %s: %+v", r.Variant.Name, r.Texts)
		}
	}
	mix, ok := names["mix3.6"]
	_, gptq := names["q4+gptq"]
	for _, n := range []string{"q8", "q8+calib", "q4", "q4+calib", "q2", "q1", "mix3.6+gptq"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no row %s", n)
		}
	}
	if len(rep.Texts) != 1 || !ok || !gptq || rep.Rows[mix].Bits["linear"] > 3.6 {
		t.Errorf("JSON report %+v", rep)
	}
	if _, _, err := runIn(t, "", "validate", src, "--text", text, "--text", text); err == nil || !strings.Contains(err.Error(), "--sweep") {
		t.Errorf("two texts without --sweep: %v", err)
	}
}

// TestConvertMixCLI: --bits 5.2 converts stories260K to a mix named by its target, which passes the 4-bit marks.
func TestConvertMixCLI(t *testing.T) {
	src := testmodels.Path(t, "stories260K-hf")
	q := filepath.Join(t.TempDir(), "mix")
	out, err := run(t, "convert", src, "--bits", "5.2", "-o", q, "-q")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "result: PASS") || !strings.Contains(out, "thresholds (mix5.2)") {
		t.Errorf("convert output:\n%s", out)
	}
	out, _, err = runIn(t, "", "show", q)
	if err != nil || !strings.Contains(out, "mix5.2") {
		t.Errorf("show: %v\n%s", err, out)
	}
}
