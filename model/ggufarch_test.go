package model

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/gguf"
	"lowbit/internal/fixture"
)

// layoutGGUF writes an HF model as GGUF F32 the way Config.GGUF lays it out
// (metadata, names, interleaved q and k, gains as 1 + w, rope factors).
func layoutGGUF(t testing.TB, m *Model) []byte {
	t.Helper()
	l, err := m.Config.GGUF()
	if err != nil {
		t.Fatal(err)
	}
	arch, _ := gguf.ValueOf(l.Arch)
	kvs := append([]gguf.KV{{Key: "general.architecture", Value: arch}}, l.Metadata...)
	var tensors []gguf.TensorData
	for _, name := range m.Config.ExpectedTensors() {
		w := m.Weights[name]
		data := slices.Clone(w.F32)
		if order := l.RowOrder(name, w.Rows); order != nil {
			for r, src := range order {
				copy(data[r*w.Cols:], w.F32[src*w.Cols:(src+1)*w.Cols])
			}
		}
		if l.NormPlusOne && m.Config.TensorRole(name) == RoleNorm {
			for i := range data {
				data[i]++
			}
		}
		dims := []int64{int64(w.Cols), int64(w.Rows)}
		if len(m.Config.TensorShape(name)) == 1 {
			dims = dims[:1]
		}
		tensors = append(tensors, gguf.TensorData{Name: l.Names[name], Dims: dims, Type: gguf.F32, Data: f32Bytes(data)})
	}
	tensors = append(tensors, l.Extra...)
	b, err := gguf.Marshal(kvs, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patchFixture writes a fixture and changes keys of its config.json.
func patchFixture(t testing.TB, s fixture.Spec, set map[string]any) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := s.Write(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		c[k] = v
	}
	b, _ = json.Marshal(c)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ggufFamilySpecs are the families' fixtures as llama.cpp computes them
// (Gemma 2's attention scale, SmolLM3's every fourth layer unrotated, four
// layers), with the config changes that make them so, and rope scalings
// GGUF carries.
func ggufFamilySpecs() []struct {
	name  string
	spec  fixture.Spec
	patch map[string]any
} {
	type fs = struct {
		name  string
		spec  fixture.Spec
		patch map[string]any
	}
	var out []fs
	for _, s := range fixture.Families() {
		if s.Arch == "BitNetForCausalLM" {
			continue
		}
		s.Layers = 4
		var p map[string]any
		switch s.Arch {
		case "Gemma2ForCausalLM":
			p = map[string]any{"query_pre_attn_scalar": s.HeadDim}
		case "SmolLM3ForCausalLM":
			p = map[string]any{"no_rope_layers": []int{1, 1, 1, 0}}
		case "Phi3ForCausalLM":
			half := s.HeadDim / 4 // partial_rotary_factor 0.5: a quarter of the head in pairs
			short, long := make([]float64, half), make([]float64, half)
			for i := range short {
				short[i], long[i] = 1+0.1*float64(i), 1+0.5*float64(i)
			}
			p = map[string]any{"max_position_embeddings": 512, "original_max_position_embeddings": 256,
				"rope_scaling": map[string]any{"type": "longrope", "short_factor": short, "long_factor": long}}
		}
		out = append(out, fs{s.Arch, s, p})
	}
	llama3 := fixture.Llama()
	llama3.Layers, llama3.Vocab = 2, 128
	out = append(out, fs{"llama3 rope scaling", llama3, map[string]any{"rope_scaling": map[string]any{
		"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}})
	return out
}

// TestGGUFLayoutRoundTrip writes every family GGUF carries as Config.GGUF
// lays it out, in F32, and reads it back: the same logits as the HF
// directory's (Llama 3.1's scaling, which GGUF holds as frequency factors,
// within rounding).
func TestGGUFLayoutRoundTrip(t *testing.T) {
	ctx := context.Background()
	tokens := []int{1, 7, 50, 3, 95, 12, 40, 2, 66, 101, 17}
	for _, c := range ggufFamilySpecs() {
		t.Run(c.name, func(t *testing.T) {
			hf, err := Load(ctx, patchFixture(t, c.spec, c.patch), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "m.gguf")
			if err := os.WriteFile(p, layoutGGUF(t, hf), 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := Load(ctx, p, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, want := allLogits(t, g, tokens), allLogits(t, hf, tokens)
			limit := 0.0
			if strings.HasPrefix(c.name, "llama3") {
				limit = 1e-5
			}
			if e := relL2(got, want); e > limit {
				t.Errorf("logits differ by %.3g (relative L2)\nread %+v\nwant %+v", e, g.Config, hf.Config)
			}
		})
	}
}

// TestGGUFLayoutRefuses: what llama.cpp computes differently has no layout.
func TestGGUFLayoutRefuses(t *testing.T) {
	base := fixture.Llama()
	for _, c := range []struct {
		name  string
		arch  string
		patch map[string]any
		want  string
	}{
		{"bitnet", "BitNetForCausalLM", nil, "SiLU"},
		{"gemma2 scale", "Gemma2ForCausalLM", map[string]any{"query_pre_attn_scalar": 100}, "query_pre_attn_scalar is 100"},
		{"smollm3 rotation", "SmolLM3ForCausalLM", nil, "every 4th layer"},
		{"gemma untied", "GemmaForCausalLM", map[string]any{"tie_word_embeddings": false}, "embedding table as the output head"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := base
			s.Arch, s.Tied = c.arch, c.patch["tie_word_embeddings"] == nil
			m, err := Load(context.Background(), patchFixture(t, s, c.patch), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Config.GGUF(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

// ggufFamilySeeds are GGUF files of every family, for FuzzGGUFModel.
func ggufFamilySeeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, c := range ggufFamilySpecs() {
		c.spec.Layers = 1
		if c.spec.Arch == "SmolLM3ForCausalLM" {
			c.patch = map[string]any{"no_rope_layers": []int{1}}
		}
		m, err := Load(context.Background(), patchFixture(f, c.spec, c.patch), LoadOptions{})
		if err != nil {
			f.Fatal(err)
		}
		b := layoutGGUF(f, m)
		if _, err := gguf.Read(bytes.NewReader(b), int64(len(b))); err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
