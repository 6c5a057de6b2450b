// Package paritygen is what lowbit's parity tests share with
// testdata/parity/gen.py, the script that runs HuggingFace transformers on
// a GPU machine: the name-keyed generator that rebuilds the random models'
// weights bit for bit (so no weights are stored), the records gen.py
// writes, and the list of random models. The CPU parity test (model) and
// the GPU one (gpu) both build their models from it, so the generator
// exists once in Go.
package paritygen

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Dir is testdata/parity as seen from a package directory one level below
// the repository root (model, gpu), where go test runs a package's tests.
const Dir = "../testdata/parity"

// RandomModels lists gen.py's random-weight models, whose records both
// parity tests replay: the shapes of today's checkpoints, and one small
// model per architecture feature (rope scalings, windows, biases, q/k
// norms, soft-capping, joined projections, partial and absent rotation).
func RandomModels() []string {
	return []string{
		"tinyllama", "mistral", "mistral_window", "gemma", "bitnet", "llama3_rope", "llama_linear_rope",
		"llama_yarn", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "phi3_partial", "mistral_v03", "smollm3",
	}
}

// Uniform is gen.py's generator: n values v_i in [-1, 1), each a function
// of the tensor's name and i alone (FNV-1a 64 of the name, then the
// splitmix64 finalizer of key + (i+1) * golden ratio).
func Uniform(name string, n int) []float32 {
	key := uint64(0xCBF29CE484222325)
	for _, b := range []byte(name) {
		key = (key ^ uint64(b)) * 0x100000001B3
	}
	out := make([]float32, n)
	for i := range out {
		z := key + uint64(i+1)*0x9E3779B97F4A7C15
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		u := float32(z>>40) * (1.0 / (1 << 24))
		out[i] = u*2 - 1
	}
	return out
}

// Tensor is the tensor gen.py loads into transformers for a parameter of
// this name and shape: 1-D ones (norm gains, biases) are 1 + 0.1 v, 2-D
// ones v / sqrt(cols), in float32 arithmetic as numpy does it. A 1-D
// tensor comes back as one row.
func Tensor(name string, shape []int64) (rows, cols int, w []float32) {
	if len(shape) == 1 {
		w = Uniform(name, int(shape[0]))
		for i, v := range w {
			w[i] = float32(float32(0.1)*v) + 1
		}
		return 1, len(w), w
	}
	rows, cols = int(shape[0]), int(shape[1])
	w = Uniform(name, rows*cols)
	s := float32(1 / math.Sqrt(float64(cols)))
	for i, v := range w {
		w[i] = v * s
	}
	return rows, cols, w
}

// Record is <name>.json: the config.json transformers read, the tokens
// whose logits <name>.f32 holds, and transformers' greedy continuation of
// the prompt.
type Record struct {
	Config json.RawMessage `json:"config"`
	Prompt []int           `json:"prompt"`
	Tokens []int           `json:"tokens"`
	Greedy []int           `json:"greedy"`
	// Tensors are the parameters transformers built, in its order (records
	// written since gen.py lists them; nil in older ones).
	Tensors []TensorInfo `json:"tensors,omitempty"`
}

// TensorInfo is one parameter of a transformers model.
type TensorInfo struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
}

// Read reads name's record and float32 logits from dir. A record not yet
// generated is an error wrapping fs.ErrNotExist.
func Read(dir, name string) (Record, []float32, error) {
	var rec Record
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		return rec, nil, fmt.Errorf("parity record %s: %w", name, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, nil, fmt.Errorf("parity record %s: %w", name, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, name+".f32"))
	if err != nil {
		return rec, nil, fmt.Errorf("parity logits %s: %w", name, err)
	}
	if len(raw)%4 != 0 {
		return rec, nil, fmt.Errorf("parity logits %s: %d bytes is not a whole number of float32s", name, len(raw))
	}
	logits := make([]float32, len(raw)/4)
	for i := range logits {
		logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return rec, logits, nil
}

// ReadOrSkip reads name's record and logits from dir, skipping t when
// they have not been generated yet (a new case of gen.py before it ran on
// the GPU machine) and failing it on any other error.
func ReadOrSkip(t testing.TB, dir, name string) (Record, []float32) {
	t.Helper()
	rec, logits, err := Read(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no parity record %s yet: run testdata/parity/gen.py on the GPU machine (%v)", name, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec, logits
}

// CheckTensors compares the tensors a lowbit configuration expects (names
// and shape) with those transformers built for the record, so that a
// joined, renamed or forgotten parameter is named rather than surfacing
// as a missing tensor or wrong logits. Records without a tensor list pass.
func (r Record) CheckTensors(names []string, shape func(string) []int64) error {
	if r.Tensors == nil {
		return nil
	}
	hf := map[string][]int64{}
	for _, t := range r.Tensors {
		hf[t.Name] = t.Shape
	}
	var problems []string
	for _, n := range names {
		s, ok := hf[n]
		switch {
		case !ok:
			problems = append(problems, n+": not a transformers parameter")
		case !slices.Equal(s, shape(n)):
			problems = append(problems, fmt.Sprintf("%s: shape %v, transformers %v", n, shape(n), s))
		}
		delete(hf, n)
	}
	for _, t := range r.Tensors {
		if _, ok := hf[t.Name]; ok {
			problems = append(problems, t.Name+": transformers parameter lowbit does not expect")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("tensors differ from transformers': %s", strings.Join(problems, "; "))
	}
	return nil
}
