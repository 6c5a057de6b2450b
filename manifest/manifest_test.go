package manifest

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/hostile"
)

const zeroSum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func validManifest() *Manifest {
	e := 0.01
	return &Manifest{
		FormatVersion: FormatVersion,
		LowbitVersion: "test",
		Source:        Source{RepoID: "org/model", Files: []File{{Path: "model.safetensors", Size: 100, SHA256: zeroSum}}},
		Architecture:  json.RawMessage(`{"arch":"llama"}`),
		Quantization:  Quantization{Format: "q4", GroupSize: 32, EmbeddingFormat: "q8", OutputFormat: "q8", Search: true},
		Files:         []File{{Path: "model.safetensors", Size: 40, SHA256: zeroSum}},
		Tensors: []Tensor{
			{Name: "w", Shape: []int64{2, 32}, Format: "q4", GroupSize: 32, RelL2Error: &e, Parts: []Part{
				{Role: RoleQWeight, Tensor: "w.qweight", DType: "U8", Shape: []int64{2, 16}, File: "model.safetensors", Offsets: [2]int64{0, 32}, SHA256: zeroSum},
				{Role: RoleScales, Tensor: "w.scales", DType: "F16", Shape: []int64{2, 1}, File: "model.safetensors", Offsets: [2]int64{32, 36}, SHA256: zeroSum},
				{Role: RoleMins, Tensor: "w.mins", DType: "F16", Shape: []int64{2, 1}, File: "model.safetensors", Offsets: [2]int64{36, 40}, SHA256: zeroSum},
			}},
			{Name: "norm", Shape: []int64{32}, Format: "f32", Parts: []Part{
				{Role: RoleData, Tensor: "norm", DType: "F32", Shape: []int64{32}, File: "model.safetensors", Offsets: [2]int64{40, 168}, SHA256: zeroSum},
			}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m := validManifest()
	m.Summarize()
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary.Parameters != 2*32+32 {
		t.Errorf("parameters = %d, want 96", got.Summary.Parameters)
	}
	if got.Summary.MaxErrorTensor != "w" || got.Summary.MaxRelL2Error != 0.01 {
		t.Errorf("summary max error = %v %q", got.Summary.MaxRelL2Error, got.Summary.MaxErrorTensor)
	}
	if p, ok := got.Tensors[0].Part(RoleScales); !ok || p.Tensor != "w.scales" {
		t.Errorf("Part(scales) = %+v, %v", p, ok)
	}
	if _, ok := got.Tensor("norm"); !ok {
		t.Error("Tensor(norm) not found")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != FileName {
		t.Errorf("directory holds %v, want only %s (no temporary files)", entries, FileName)
	}
}

// TestCalibrationRoundTrip: a calibrated mix's record reads back as
// written; a manifest without one (from before calibration) still reads.
func TestCalibrationRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m := validManifest()
	m.Quantization.Format, m.Quantization.GroupSize, m.Quantization.TargetBits = "mix3.5", 0, 3.5
	m.Quantization.Calibration = &Calibration{Source: "built-in", SHA256: zeroSum, Tokens: 258, Method: "mean-square-activation"}
	m.Summarize()
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Quantization.Calibration; c == nil || *c != *m.Quantization.Calibration || got.Quantization.TargetBits != 3.5 {
		t.Errorf("read back %+v, target %v", c, got.Quantization.TargetBits)
	}
	old := validManifest()
	old.Summarize()
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "calibration") || strings.Contains(string(b), "target_bits") {
		t.Errorf("an uncalibrated manifest names calibration: %s", b)
	}
	if _, err := Parse(b); err != nil {
		t.Errorf("a manifest without calibration: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(m *Manifest)
		raw    string
		want   string
	}{
		{name: "version", mutate: func(m *Manifest) { m.FormatVersion = 99 }, want: "format_version 99"},
		{name: "no architecture", mutate: func(m *Manifest) { m.Architecture = nil }, want: "architecture"},
		{name: "no format", mutate: func(m *Manifest) { m.Quantization.Format = "" }, want: "quantization.format"},
		{name: "duplicate tensor", mutate: func(m *Manifest) { m.Tensors[1].Name = "w" }, want: `"w" is listed twice`},
		{name: "bad role", mutate: func(m *Manifest) { m.Tensors[0].Parts[0].Role = "weird" }, want: "part role"},
		{name: "bad sha", mutate: func(m *Manifest) { m.Tensors[0].Parts[1].SHA256 = "abc" }, want: "sha256"},
		{name: "bad offsets", mutate: func(m *Manifest) { m.Tensors[0].Parts[0].Offsets = [2]int64{10, 2} }, want: "offsets"},
		{name: "escaping file", mutate: func(m *Manifest) { m.Tensors[0].Parts[0].File = "../x.safetensors" }, want: "plain relative path"},
		{name: "negative dim", mutate: func(m *Manifest) { m.Tensors[1].Shape = []int64{-1} }, want: "negative dimension"},
		{name: "no parts", mutate: func(m *Manifest) { m.Tensors[1].Parts = nil }, want: "no parts"},
		{name: "scales only", mutate: func(m *Manifest) { m.Tensors[0].Parts = m.Tensors[0].Parts[1:] }, want: "neither a data nor a qweight"},
		{name: "calibration without source", mutate: func(m *Manifest) { m.Quantization.Calibration = &Calibration{SHA256: zeroSum, Tokens: 3, Method: "x"} }, want: "calibration: field source"},
		{name: "calibration bad sha", mutate: func(m *Manifest) {
			m.Quantization.Calibration = &Calibration{Source: "a", SHA256: "z", Tokens: 3, Method: "x"}
		}, want: "calibration: sha256"},
		{name: "calibration no tokens", mutate: func(m *Manifest) {
			m.Quantization.Calibration = &Calibration{Source: "a", SHA256: zeroSum, Method: "x"}
		}, want: "calibration: tokens 0"},
		{name: "calibration no method", mutate: func(m *Manifest) { m.Quantization.Calibration = &Calibration{Source: "a", SHA256: zeroSum, Tokens: 3} }, want: "calibration: field method"},
		{name: "negative target", mutate: func(m *Manifest) { m.Quantization.TargetBits = -2 }, want: "target_bits"},
		{name: "unknown field", raw: `{"format_version":1,"surprise":true}`, want: "surprise"},
		{name: "not json", raw: `{"format_version":`, want: "manifest"},
		{name: "trailing", raw: "", want: "trailing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			raw := []byte(tc.raw)
			if tc.mutate != nil || tc.name == "trailing" {
				m := validManifest()
				if tc.mutate != nil {
					tc.mutate(m)
				}
				raw, _ = json.Marshal(m)
				if tc.name == "trailing" {
					raw = append(raw, []byte(" {}")...)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, FileName), raw, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestNonFiniteNumbers: a float field JSON cannot carry, or an error that
// cannot be, is refused naming the tensor and the field, and nothing is written.
func TestNonFiniteNumbers(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(m *Manifest)
		want   string
	}{
		{"NaN error", func(m *Manifest) { e := math.NaN(); m.Tensors[0].RelL2Error = &e }, `tensor "w": field rel_l2_error is NaN, not a finite non-negative number`},
		{"infinite error", func(m *Manifest) { e := math.Inf(1); m.Tensors[0].RelL2Error = &e }, `tensor "w": field rel_l2_error is +Inf, not a finite non-negative number`},
		{"negative error", func(m *Manifest) { e := -0.5; m.Tensors[0].RelL2Error = &e }, `tensor "w": field rel_l2_error is -0.5`},
		{"infinite summary", func(m *Manifest) { m.Summary.MeanRelL2Error = math.Inf(1) }, "field summary.mean_rel_l2_error is +Inf"},
		{"NaN bits", func(m *Manifest) { m.Summary.BitsPerWeight = math.NaN() }, "field summary.bits_per_weight is NaN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := validManifest()
			m.Summarize()
			tc.mutate(m)
			if _, err := m.Marshal(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Marshal: err = %v, want %q", err, tc.want)
			}
			dir := t.TempDir()
			if err := m.Write(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write: err = %v, want %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("Write left %v", entries)
			}
		})
	}
}

func TestReadRefusesHostileFiles(t *testing.T) {
	tests := []struct {
		name string
		make func(t testing.TB, path string)
		want string
	}{
		{"/dev/zero", hostile.DevZero, "not a regular file (character device)"},
		{"fifo", hostile.FIFO, "not a regular file (named pipe)"},
		{"too large", func(t testing.TB, p string) { hostile.Oversized(t, p, MaxSize+1) }, "over the 256 MiB limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			tc.make(t, path)
			_, err := Read(filepath.Dir(path))
			if err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %s and say %q", err, path, tc.want)
			}
		})
	}
}

func TestReadMissing(t *testing.T) {
	_, err := Read(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "not a lowbit model directory") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	good, _ := json.Marshal(validManifest())
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format_version":1,"architecture":{},"quantization":{"format":"q4"},"tensors":[{"name":"a","shape":[1],"format":"f32","parts":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses must survive a re-encode and re-parse unchanged in meaning.
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(b); err != nil {
			t.Fatalf("re-parse of an accepted manifest failed: %v", err)
		}
	})
}
