package model

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/hostile"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// writeFixture writes a fixture model and returns its directory.
func writeFixture(t *testing.T, spec fixture.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := spec.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoadFixtures runs every architecture's fixture through Load and a
// forward pass, in F32, BF16 and sharded form, and checks that batched and
// token-by-token processing agree.
func TestLoadFixtures(t *testing.T) {
	ctx := context.Background()
	for _, arch := range []string{"LlamaForCausalLM", "MistralForCausalLM", "GemmaForCausalLM", "BitNetForCausalLM"} {
		for _, dt := range []string{"F32", "BF16"} {
			spec := fixture.Llama()
			spec.Arch, spec.DType, spec.Shards = arch, dt, 2
			spec.Tied = arch == "GemmaForCausalLM"
			t.Run(arch+"/"+dt, func(t *testing.T) {
				m, err := Load(ctx, writeFixture(t, spec), LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				tokens := []int{1, 5, 9, 33, 70, 2, 95, 4}
				batch, err := m.NewSession(SessionOptions{})
				if err != nil {
					t.Fatal(err)
				}
				all, err := batch.ForwardAll(ctx, tokens, false)
				if err != nil {
					t.Fatal(err)
				}
				single, err := m.NewSession(SessionOptions{Batch: 1, Backend: NewCPU(1)})
				if err != nil {
					t.Fatal(err)
				}
				v := m.Config.VocabSize
				for i, tok := range tokens {
					logits, err := single.Forward(ctx, []int{tok})
					if err != nil {
						t.Fatal(err)
					}
					if e := quantize.RelL2(all.Logits[i*v:(i+1)*v], logits); !(e < 1e-5) {
						t.Errorf("position %d: batched and single logits differ by %.3g", i, e)
					}
				}
			})
		}
	}
}

// TestQuantizedFormats runs one model in every quantized format through
// the packed kernels and checks the logits against the same model with the
// weights dequantized to float32: the quantized path computes what its
// weights say (tq2 also quantizes activations to int8, so it is looser).
// Distance to FP32 is logged.
func TestQuantizedFormats(t *testing.T) {
	ctx := context.Background()
	dir := writeFixture(t, fixture.Llama())
	ref, err := Load(ctx, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{1, 5, 9, 33, 70}
	refOut := forwardAll(t, ref, tokens)
	for _, tc := range []struct {
		f     quantize.Format
		bound float64
	}{{quantize.Q8, 1e-5}, {quantize.Q4, 1e-5}, {quantize.Q2, 1e-5}, {quantize.Q1, 1e-5}, {quantize.TQ2, 0.05}} {
		m, err := Load(ctx, dir, LoadOptions{Quantize: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Weights["model.layers.1.self_attn.o_proj.weight"].Format(); got != tc.f {
			t.Fatalf("o_proj is %s, want %s", got, tc.f)
		}
		dm := dequantized(t, m)
		out := forwardAll(t, m, tokens)
		e := quantize.RelL2(forwardAll(t, dm, tokens), out)
		t.Logf("%s: rel L2 to dequantized %.3g, to FP32 %.3g", tc.f, e, quantize.RelL2(refOut, out))
		if !(e < tc.bound) {
			t.Errorf("%s: rel L2 to the dequantized model %.3g, bound %g", tc.f, e, tc.bound)
		}
	}
}

// TestBlockFormatsLoad quantizes a model whose rows are whole 256-weight
// blocks to each of GGUF's block formats at load time and checks the
// logits against the same weights dequantized, token by token (the dot
// products) and as one prompt (the dequantized rows); on the fixture whose
// rows are not whole blocks, the matrices take each format's fallback.
func TestBlockFormatsLoad(t *testing.T) {
	ctx := context.Background()
	spec := fixture.Llama()
	spec.Hidden, spec.Intermediate, spec.HeadDim = 256, 512, 64
	dir := writeFixture(t, spec)
	odd := writeFixture(t, fixture.Llama())
	tokens := []int{1, 5, 9, 33, 70}
	for _, f := range []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K} {
		m, err := Load(ctx, dir, LoadOptions{Quantize: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"model.layers.1.self_attn.o_proj.weight", "model.layers.0.mlp.down_proj.weight"} {
			if got := m.Weights[name].Format(); got != f {
				t.Fatalf("%s is %s, want %s", name, got, f)
			}
		}
		dm := dequantized(t, m)
		want := forwardAll(t, dm, tokens)
		if e := quantize.RelL2(want, forwardAll(t, m, tokens)); !(e < 1e-5) {
			t.Errorf("%s: prompt logits differ from the dequantized model's by %.3g", f, e)
		}
		single, err := m.NewSession(SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config.VocabSize
		for i, tok := range tokens {
			logits, err := single.Forward(ctx, []int{tok})
			if err != nil {
				t.Fatal(err)
			}
			if e := quantize.RelL2(want[i*v:(i+1)*v], logits); !(e < 1e-5) {
				t.Errorf("%s position %d: logits differ from the dequantized model's by %.3g", f, i, e)
			}
		}
		o, err := Load(ctx, odd, LoadOptions{Quantize: f})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := o.Weights["model.layers.1.self_attn.o_proj.weight"].Format(), f.Spec().Fallback; got != want {
			t.Errorf("%s: o_proj of 48 columns is %s, want the fallback %s", f, got, want)
		}
	}
}

func forwardAll(t *testing.T, m *Model, tokens []int) []float32 {
	t.Helper()
	s, err := m.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.ForwardAll(context.Background(), tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}

func TestLoadErrors(t *testing.T) {
	ctx := context.Background()
	good := fixture.Llama()
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"no config", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
		}, "neither manifest.json"},
		{"missing field", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { delete(c, "hidden_size") })
		}, "hidden_size is missing"},
		{"unknown architecture", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["architectures"] = []string{"GPT2LMHeadModel"} })
		}, "GPT2LMHeadModel is not supported"},
		{"shape mismatch", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["intermediate_size"] = 96 })
		}, "model.layers.0.mlp.gate_proj.weight has shape [80 48], the config needs [96 48]"},
		{"missing tensor", func(t *testing.T, dir string) {
			writeWithout(t, dir, good, "model.layers.1.mlp.up_proj.weight")
		}, "tensor model.layers.1.mlp.up_proj.weight is missing"},
		{"no weights", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.safetensors"))
		}, "no model.safetensors"},
		{"corrupt manifest", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"format_version": 1, "tensors": [`), 0o644)
		}, "manifest"},
		{"manifest version", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"format_version": 99}`), 0o644)
		}, "version"},
		{"config is /dev/zero", func(t *testing.T, dir string) {
			hostile.DevZero(t, filepath.Join(dir, "config.json"))
		}, "config.json: not a regular file (character device)"},
		{"config is a fifo", func(t *testing.T, dir string) {
			hostile.FIFO(t, filepath.Join(dir, "config.json"))
		}, "config.json: not a regular file (named pipe)"},
		{"config too large", func(t *testing.T, dir string) {
			hostile.Oversized(t, filepath.Join(dir, "config.json"), MaxConfigSize+1)
		}, "config.json: file too large: 16777217 bytes is over the 16 MiB limit"},
		{"manifest is /dev/zero", func(t *testing.T, dir string) {
			hostile.DevZero(t, filepath.Join(dir, "manifest.json"))
		}, "manifest.json: not a regular file (character device)"},
		{"weights are /dev/zero", func(t *testing.T, dir string) {
			hostile.DevZero(t, filepath.Join(dir, "model.safetensors"))
		}, "model.safetensors: not a regular file (character device)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFixture(t, good)
			tc.setup(t, dir)
			_, err := Load(ctx, dir, LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Load(ctx, filepath.Join(t.TempDir(), "absent"), LoadOptions{}); err == nil {
		t.Error("absent directory loaded")
	}
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	b, _ = json.Marshal(c)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeWithout rewrites the fixture's weights without one tensor.
func writeWithout(t *testing.T, dir string, spec fixture.Spec, skip string) {
	t.Helper()
	var specs []safetensors.Spec
	tensors := spec.Tensors()
	for name, shape := range tensors {
		if name != skip {
			specs = append(specs, safetensors.Spec{Name: name, DType: "F32", Shape: shape})
		}
	}
	slices.SortFunc(specs, func(a, b safetensors.Spec) int { return strings.Compare(a.Name, b.Name) })
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		b, _ := safetensors.FromFloat32("F32", spec.Weights(s.Name, s.Shape))
		if err := w.Write(s.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewErrors(t *testing.T) {
	cfg, err := ParseHFConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":10}`))
	if err != nil {
		t.Fatal(err)
	}
	full := func() map[string]*Weight {
		w := map[string]*Weight{}
		for _, n := range cfg.ExpectedTensors() {
			s := cfg.TensorShape(n)
			r, c := 1, int(s[0])
			if len(s) == 2 {
				r, c = int(s[0]), int(s[1])
			}
			w[n] = FloatWeight(r, c, make([]float32, r*c))
		}
		return w
	}
	if _, err := New(cfg, full()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(map[string]*Weight)
		want string
	}{
		{"missing", func(w map[string]*Weight) { delete(w, "lm_head.weight") }, "tensor lm_head.weight is missing"},
		{"shape", func(w map[string]*Weight) { w["model.norm.weight"] = FloatWeight(1, 7, make([]float32, 7)) }, "model.norm.weight has shape [1, 7]"},
		{"short data", func(w map[string]*Weight) { w["model.norm.weight"].F32 = nil }, "model.norm.weight has 0 values"},
		{"bad quantized", func(w map[string]*Weight) {
			w["lm_head.weight"] = QuantWeight(&quantize.Tensor{Format: quantize.Q8, Rows: 10, Cols: 8, GroupSize: 32})
		}, "lm_head.weight"},
	}
	for _, tc := range tests {
		w := full()
		tc.edit(w)
		if _, err := New(cfg, w); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := ParseHFConfig([]byte(`{"architectures":["GemmaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"head_dim":32,"vocab_size":10,"rope_scaling":{"type":"linear","factor":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cfg)
	back, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.HeadDim != 32 || !back.NormPlusOne || back.RopeScaling.Factor != 2 || back.Activation != "gelu_tanh" {
		t.Errorf("round trip: %+v", back)
	}
	for _, bad := range []string{`[]`, `{}`, strings.Replace(string(b), `"gelu_tanh"`, `"tanh"`, 1), strings.Replace(string(b), `"factor":2`, `"factor":-2`, 1)} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// FuzzParseConfig feeds manifest architecture blocks: an accepted one must
// build a session-ready description without panicking.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"arch":"llama","hidden_size":8,"intermediate_size":16,"num_layers":1,"num_heads":2,"num_kv_heads":1,"head_dim":4,"vocab_size":10,"max_positions":16,"rms_norm_eps":1e-5,"rope_theta":10000,"activation":"silu","tie_embeddings":true}`))
	f.Add([]byte(`{"arch":"gemma","hidden_size":8,"intermediate_size":16,"num_layers":1,"num_heads":2,"num_kv_heads":2,"head_dim":4,"vocab_size":10,"max_positions":16,"rms_norm_eps":1e-6,"rope_theta":10000,"activation":"gelu_tanh","rope_scaling":{"type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8}}`))
	f.Add([]byte(`{"num_heads": -1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if c.HeadDim > 4096 {
			return // valid but large: skip the allocation
		}
		for i, f := range c.Rotary(0, c.MaxPositions).InvFreq {
			if math.IsNaN(float64(f)) || f < 0 {
				t.Fatalf("inverse frequency %d is %v", i, f)
			}
		}
	})
}
