package model

import (
	"os"
	"strings"
	"testing"

	"lowbit/internal/testmodels"
)

func TestParseHFConfig(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		check func(t *testing.T, c Config)
	}{
		{"tinyllama", `{"architectures":["LlamaForCausalLM"],"hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":22,"num_attention_heads":32,"num_key_value_heads":4,"vocab_size":32000,"max_position_embeddings":2048,"rms_norm_eps":1e-05,"rope_theta":10000.0,"hidden_act":"silu","tie_word_embeddings":false,"bos_token_id":1,"eos_token_id":2}`,
			func(t *testing.T, c Config) {
				if c.Arch != "llama" || c.HeadDim != 64 || c.NumKVHeads != 4 || c.TieEmbeddings || c.EOS[0] != 2 || c.Activation != "silu" {
					t.Errorf("%+v", c)
				}
			}},
		{"mistral", `{"architectures":["MistralForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32000,"max_position_embeddings":32768,"rms_norm_eps":1e-05,"rope_theta":10000.0,"sliding_window":4096,"hidden_act":"silu"}`,
			func(t *testing.T, c Config) {
				if c.Arch != "mistral" || c.SlidingWindow != 4096 || c.HeadDim != 128 {
					t.Errorf("%+v", c)
				}
			}},
		{"mistral no window", `{"architectures":["MistralForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"sliding_window":null,"rope_theta":1000000.0}`,
			func(t *testing.T, c Config) {
				if c.SlidingWindow != 0 || c.RopeTheta != 1e6 {
					t.Errorf("%+v", c)
				}
			}},
		{"gemma", `{"architectures":["GemmaForCausalLM"],"hidden_size":2048,"intermediate_size":16384,"num_hidden_layers":18,"num_attention_heads":8,"num_key_value_heads":1,"head_dim":256,"vocab_size":256000,"hidden_act":"gelu","hidden_activation":"gelu_pytorch_tanh","rms_norm_eps":1e-06,"bos_token_id":2,"eos_token_id":1}`,
			func(t *testing.T, c Config) {
				if c.Arch != "gemma" || c.HeadDim != 256 || !c.NormPlusOne || !c.EmbedScale || !c.TieEmbeddings || c.Activation != "gelu_tanh" || c.BOS != 2 {
					t.Errorf("%+v", c)
				}
			}},
		{"bitnet", `{"architectures":["BitNetForCausalLM"],"hidden_size":2560,"intermediate_size":6912,"num_hidden_layers":30,"num_attention_heads":20,"num_key_value_heads":5,"vocab_size":128256,"hidden_act":"relu2","rope_theta":500000.0,"tie_word_embeddings":true,"bos_token_id":128000,"eos_token_id":[128001,128009]}`,
			func(t *testing.T, c Config) {
				if c.Arch != "bitnet" || !c.SubNorms || c.Activation != "relu2" || c.HeadDim != 128 || len(c.EOS) != 2 {
					t.Errorf("%+v", c)
				}
				if len(c.ExpectedTensors()) != 2+30*11 {
					t.Errorf("%d expected tensors", len(c.ExpectedTensors()))
				}
			}},
		{"llama3 rope", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}`,
			func(t *testing.T, c Config) {
				if c.RopeScaling == nil || c.RopeScaling.Type != "llama3" || c.RopeScaling.Factor != 8 {
					t.Errorf("%+v", c.RopeScaling)
				}
			}},
		{"transformers 5 rope_parameters", `{"architectures":["BitNetForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"rope_parameters":{"rope_theta":500000.0,"rope_type":"default"}}`,
			func(t *testing.T, c Config) {
				if c.RopeTheta != 500000 || c.RopeScaling != nil {
					t.Errorf("theta %v scaling %+v", c.RopeTheta, c.RopeScaling)
				}
			}},
		{"rope_parameters llama3", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}`,
			func(t *testing.T, c Config) {
				if c.RopeTheta != 500000 || c.RopeScaling == nil || c.RopeScaling.Type != "llama3" {
					t.Errorf("theta %v scaling %+v", c.RopeTheta, c.RopeScaling)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseHFConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestParseHFConfigErrors(t *testing.T) {
	base := `"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10`
	tests := []struct{ json, want string }{
		{`[1]`, "not a JSON object"},
		{`{"hidden_size":64}`, "field architectures is missing"},
		{`{"architectures":[]}`, "architectures is empty"},
		{`{"architectures":["GPT2LMHeadModel"]}`, "LlamaForCausalLM"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":64}`, "intermediate_size is missing"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_key_value_heads":3}`, "not a multiple"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"hidden_act":"gelu"}`, "hidden_act"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"hidden_size":"big"}`, "hidden_size"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":0,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10}`, "must be positive"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_scaling":{"type":"ntk","factor":2}}`, `rope_scaling type "ntk" is not supported`},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"eos_token_id":"x"}`, "eos_token_id"},
		// Absurd sizes are refused by name and limit before anything is made from them.
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"hidden_size":1099511627776}`, "field hidden_size = 1099511627776 is over the limit of 65536"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_hidden_layers":1000000000}`, "field num_hidden_layers = 1000000000 is over the limit of 4096"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_hidden_layers":1e9}`, "field num_hidden_layers: json: cannot unmarshal number 1e9"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"intermediate_size":99999999999999999999}`, "field intermediate_size: json: cannot unmarshal number 99999999999999999999"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"vocab_size":-5}`, "field vocab_size must be positive, is -5"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"max_position_embeddings":1099511627776}`, "field max_position_embeddings = 1099511627776 is over the limit of 16777216"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"head_dim":1048576}`, "field head_dim = 1048576 is over the limit of 4096"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_attention_heads":65536,"num_key_value_heads":1}`, "field num_attention_heads = 65536 is over the limit of 4096"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_key_value_heads":8}`, "num_attention_heads 4 is not a multiple of num_key_value_heads 8"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_attention_heads":3}`, "head_dim 21 must be even"},
		{`{"architectures":["MistralForCausalLM"],` + base + `,"sliding_window":1099511627776}`, "field sliding_window = 1099511627776 is outside [0, 16777216]"},
		// Today's families.
		{`{"architectures":["Qwen2ForCausalLM"],` + base + `,"layer_types":["full_attention","sliding_attention"]}`, "layer_types has 2 entries for 1 layers"},
		{`{"architectures":["Qwen2ForCausalLM"],` + base + `,"layer_types":["local"],"sliding_window":8}`, `layer_types[0] = "local"`},
		{`{"architectures":["Qwen2ForCausalLM"],` + base + `,"layer_types":["sliding_attention"]}`, "sliding_window = 0 must be in [1, 16777216]"},
		{`{"architectures":["Qwen3ForCausalLM"],` + base + `,"attention_bias":true}`, "attention_bias = true is not supported"},
		{`{"architectures":["Gemma3ForCausalLM"],` + base + `,"sliding_window_pattern":0}`, "sliding_window_pattern must be positive"},
		{`{"architectures":["Phi3ForCausalLM"],` + base + `,"partial_rotary_factor":1.5}`, "partial_rotary_factor = 1.5 is outside (0, 1]"},
		{`{"architectures":["SmolLM3ForCausalLM"],` + base + `,"no_rope_layers":[1,0]}`, "no_rope_layers has 2 entries for 1 layers"},
	}
	for _, tc := range tests {
		_, err := ParseHFConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.json, err, tc.want)
		}
	}
}

func TestStoriesConfig(t *testing.T) {
	b, err := os.ReadFile(testmodels.Path(t, "stories260K-hf/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseHFConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.HiddenSize != 64 || c.NumLayers != 5 || c.NumKVHeads != 4 || c.HeadDim != 8 || !c.TieEmbeddings {
		t.Errorf("%+v", c)
	}
	for _, n := range c.ExpectedTensors() {
		if c.TensorShape(n) == nil {
			t.Errorf("no shape for %s", n)
		}
	}
	if c.TensorRole("model.layers.3.mlp.down_proj.weight") != RoleLinear || c.TensorRole("model.layers.0.input_layernorm.weight") != RoleNorm ||
		c.TensorRole("model.embed_tokens.weight") != RoleEmbedding || c.TensorRole("lm_head.weight") != RoleOutput {
		t.Error("roles")
	}
}

func FuzzParseHFConfig(f *testing.F) {
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10}`))
	f.Add([]byte(`{"architectures":["GemmaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"head_dim":32,"vocab_size":10,"rope_scaling":{"type":"linear","factor":2}}`))
	f.Add([]byte(`{"architectures":["BitNetForCausalLM"],"eos_token_id":[1,2]}`))
	f.Add([]byte(`{"architectures":["MistralForCausalLM"],"hidden_size":65536,"intermediate_size":262144,"num_hidden_layers":4096,"num_attention_heads":16,"vocab_size":16777216,"sliding_window":4096}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseHFConfig(data)
		if err != nil {
			return
		}
		if err := c.Check(); err != nil {
			t.Fatalf("accepted config fails Check: %v", err)
		}
		names := c.ExpectedTensors()
		if len(names) > 3+11*maxLayers {
			t.Fatalf("accepted config lists %d tensors", len(names))
		}
		for _, n := range names[:2] {
			_ = c.TensorShape(n)
		}
	})
}
