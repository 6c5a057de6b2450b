package model_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/convert"
	"lowbit/internal/testmodels"
	"lowbit/model"
)

// TestLowbitDir converts stories260K with the converter (q8 linear,
// embedding and head) and runs the converted directory: greedy output
// equals FP32's for at least 32 tokens. A corrupted weight file is then
// refused by its checksum.
func TestLowbitDir(t *testing.T) {
	ctx := context.Background()
	src := filepath.Dir(testmodels.Path(t, "stories260K-hf/model.safetensors"))
	b, err := os.ReadFile(testmodels.Path(t, "stories260K/expected_greedy_200_tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp struct {
		Generated []int `json:"generated_tokens"`
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "stories-q8")
	if _, err := convert.Run(ctx, convert.Options{Source: src, Out: out, Bits: "8", Workers: 2}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(ctx, out, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f := m.Weights["model.layers.2.self_attn.q_proj.weight"].Format(); f != "q8" {
		t.Fatalf("q_proj loaded as %s", f)
	}
	s, err := m.NewSession(model.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := model.Generate(ctx, s, []int{1}, model.GenerateOptions{MaxTokens: 32})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range st.Tokens {
		if id != exp.Generated[i] {
			t.Fatalf("q8 token %d is %d, FP32 gives %d", i, id, exp.Generated[i])
		}
	}

	// Flip a byte in the middle of the weights: the checksum catches it.
	p := filepath.Join(out, "model.safetensors")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-100] ^= 0xff
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Load(ctx, out, model.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("corrupt weights: err %v, want a checksum mismatch", err)
	}
}
