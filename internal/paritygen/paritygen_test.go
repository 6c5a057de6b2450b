package paritygen

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGenerator checks the Go generator against the values gen.py printed
// on the GPU machine (the first line of testdata/parity/gen.log).
func TestGenerator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int64
		want  []float64
	}{
		{"model.norm.weight", []int64{4}, []float64{0.9097375869750977, 0.9275640249252319, 0.9804114103317261, 1.0281214714050293}},
		{"lm_head.weight", []int64{2, 3}, []float64{0.5690133571624756, 0.5597248077392578, -0.5290269255638123, -0.08916806429624557, 0.19879987835884094, 0.5648882985115051}},
	} {
		rows, cols, w := Tensor(tc.name, tc.shape)
		if rows*cols != len(tc.want) || len(w) != len(tc.want) {
			t.Fatalf("%s: %dx%d, %d values; want %d", tc.name, rows, cols, len(w), len(tc.want))
		}
		for i, v := range tc.want {
			if float64(w[i]) != v {
				t.Errorf("%s[%d] = %v, gen.py %v", tc.name, i, w[i], v)
			}
		}
	}
}

// TestCommittedRecords reads the records committed before the families'
// cases were added: they stay in RandomModels and readable.
func TestCommittedRecords(t *testing.T) {
	names := RandomModels()
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Fatalf("duplicate names in %v", names)
	}
	for _, n := range []string{"tinyllama", "mistral", "mistral_window", "gemma", "bitnet", "llama3_rope", "llama_linear_rope"} {
		if !slices.Contains(names, n) {
			t.Errorf("%s is not in RandomModels", n)
		}
		// This package sits two levels below the root, not one as Dir assumes.
		if _, _, err := Read(filepath.Join("..", Dir), n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Read(dir, "absent"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing record: %v, want fs.ErrNotExist", err)
	}
	js := `{"config": {"vocab_size": 2}, "prompt": [1], "tokens": [1, 5], "greedy": [5],
		"tensors": [{"name": "model.norm.weight", "shape": [4]}]}`
	if err := os.WriteFile(filepath.Join(dir, "m.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(dir, "m"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("record without logits: %v, want fs.ErrNotExist", err)
	}
	want := []float32{1.5, -2, float32(math.Inf(1)), 0}
	raw := make([]byte, 4*len(want))
	for i, v := range want {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(filepath.Join(dir, "m.f32"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, logits, err := Read(dir, "m")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(logits, want) || !slices.Equal(rec.Tokens, []int{1, 5}) || len(rec.Tensors) != 1 || rec.Tensors[0].Shape[0] != 4 {
		t.Fatalf("read %+v %v", rec, logits)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.f32"), raw[:5], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(dir, "m"); err == nil {
		t.Fatal("a logits file of 5 bytes was accepted")
	}
}

func TestCheckTensors(t *testing.T) {
	rec := Record{Tensors: []TensorInfo{
		{"model.embed_tokens.weight", []int64{8, 4}},
		{"model.layers.0.self_attn.qkv_proj.weight", []int64{12, 4}},
	}}
	shapes := map[string][]int64{
		"model.embed_tokens.weight":                {8, 4},
		"model.layers.0.self_attn.qkv_proj.weight": {12, 4},
		"model.layers.0.self_attn.q_proj.weight":   {4, 4},
	}
	shape := func(n string) []int64 { return shapes[n] }
	for _, tc := range []struct {
		name  string
		rec   Record
		names []string
		want  []string // substrings of the error; none: no error
	}{
		{"equal", rec, []string{"model.embed_tokens.weight", "model.layers.0.self_attn.qkv_proj.weight"}, nil},
		{"old record", Record{}, []string{"model.layers.0.self_attn.q_proj.weight"}, nil},
		{"split", rec, []string{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"},
			[]string{"q_proj.weight: not a transformers parameter", "qkv_proj.weight: transformers parameter lowbit does not expect"}},
		{"shape", Record{Tensors: []TensorInfo{{"model.embed_tokens.weight", []int64{4, 8}}}}, []string{"model.embed_tokens.weight"},
			[]string{"shape [8 4], transformers [4 8]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rec.CheckTensors(tc.names, shape)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
