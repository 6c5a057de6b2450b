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
