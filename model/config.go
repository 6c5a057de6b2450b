// Package model knows the architectures lowbit runs: it turns a HuggingFace
// config.json into one normalized Config (one file per architecture, behind
// the small arch interface), names each architecture's tensors and their
// roles, loads weights (HF float or converted lowbit directories), and runs
// the forward pass (forward.go), written once against the Backend interface
// (backend.go) that the CPU (cpu.go) and the CUDA backend implement, with
// sampling (sample.go) and generation (generate.go) on top.
package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Config is the normalized architecture: everything the converter and the
// forward pass need, whatever the source architecture called it. It is stored
// in manifest.json.
type Config struct {
	Arch             string       `json:"arch"` // llama, mistral, gemma, bitnet
	HFArchitecture   string       `json:"hf_architecture"`
	HiddenSize       int          `json:"hidden_size"`
	IntermediateSize int          `json:"intermediate_size"`
	NumLayers        int          `json:"num_layers"`
	NumHeads         int          `json:"num_heads"`
	NumKVHeads       int          `json:"num_kv_heads"`
	HeadDim          int          `json:"head_dim"`
	VocabSize        int          `json:"vocab_size"`
	MaxPositions     int          `json:"max_positions"`
	RMSNormEps       float64      `json:"rms_norm_eps"`
	RopeTheta        float64      `json:"rope_theta"`
	RopeScaling      *RopeScaling `json:"rope_scaling,omitempty"`
	// SlidingWindow limits attention to the last N positions (Mistral); 0 = none.
	SlidingWindow int  `json:"sliding_window,omitempty"`
	TieEmbeddings bool `json:"tie_embeddings"`
	// Activation of the gated MLP: silu (SwiGLU), gelu_tanh (GeGLU) or relu2 (BitNet).
	Activation string `json:"activation"`
	// NormPlusOne scales RMSNorm by (1 + w), as Gemma stores its gains.
	NormPlusOne bool `json:"norm_plus_one,omitempty"`
	// EmbedScale multiplies embeddings by sqrt(hidden_size) (Gemma).
	EmbedScale bool `json:"embed_scale,omitempty"`
	// SubNorms adds BitNet's attn_sub_norm (before o_proj) and ffn_sub_norm (before down_proj).
	SubNorms bool `json:"sub_norms,omitempty"`
	// QKVBias says q, k and v have biases (Qwen2).
	QKVBias bool `json:"qkv_bias,omitempty"`
	// QKNorm RMS-normalizes each head of q and k before the rotation
	// (q_norm, k_norm: Qwen3, Gemma 3).
	QKNorm bool `json:"qk_norm,omitempty"`
	// SandwichNorms puts a norm after attention and after the MLP too,
	// before each residual add (Gemma 2 and 3: post_attention_layernorm,
	// pre_feedforward_layernorm, post_feedforward_layernorm).
	SandwichNorms bool `json:"sandwich_norms,omitempty"`
	// AttnSoftCap and FinalSoftCap cap the attention scores and the
	// logits: cap * tanh(x / cap) (Gemma 2); 0: none.
	AttnSoftCap  float64 `json:"attn_logit_softcapping,omitempty"`
	FinalSoftCap float64 `json:"final_logit_softcapping,omitempty"`
	// QueryPreAttnScalar, when set, makes the attention scale
	// 1/sqrt(QueryPreAttnScalar) instead of 1/sqrt(HeadDim) (Gemma 2, 3).
	QueryPreAttnScalar float64 `json:"query_pre_attn_scalar,omitempty"`
	// LayerWindows holds each layer's sliding window (0: the layer attends
	// to everything) where layers differ (Gemma 2's alternation, Gemma 3's
	// pattern, Qwen2's max_window_layers); empty: SlidingWindow for all.
	LayerWindows []int `json:"layer_windows,omitempty"`
	// LocalRopeTheta is the rotary base of the sliding-window layers where
	// it differs from RopeTheta (Gemma 3's rope_local_base_freq); those
	// layers take no rope scaling.
	LocalRopeTheta float64 `json:"local_rope_theta,omitempty"`
	// NoRopeLayers lists the layers that take no rotary embedding
	// (SmolLM3).
	NoRopeLayers []int `json:"no_rope_layers,omitempty"`
	// RotaryDim is how many of a head's dimensions rotate (Phi's
	// partial_rotary_factor); 0: all of HeadDim.
	RotaryDim int   `json:"rotary_dim,omitempty"`
	BOS       int   `json:"bos_token_id"`
	EOS       []int `json:"eos_token_ids"`
}

// RopeScaling is the rotary embedding scaling of the config (linear,
// dynamic, llama3, yarn or longrope; or factors, each pair's frequency
// divided by its ShortFactor, as a GGUF file's rope_freqs gives it), with what transformers resolves on
// loading already resolved (original_max_position_embeddings, longrope's
// factor), so that the rotation needs nothing else from config.json.
type RopeScaling struct {
	Type   string  `json:"type"`
	Factor float64 `json:"factor"`
	// LowFreqFactor and HighFreqFactor bound llama3's blend.
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	// OriginalMaxPositionEmbeddings is the pretraining length llama3, yarn
	// and longrope extend.
	OriginalMaxPositionEmbeddings int `json:"original_max_position_embeddings,omitempty"`
	// BetaFast and BetaSlow bound yarn's ramp in rotations over the
	// pretraining length; 0: 32 and 1.
	BetaFast float64 `json:"beta_fast,omitempty"`
	BetaSlow float64 `json:"beta_slow,omitempty"`
	// AttentionFactor multiplies cos and sin (yarn, longrope); 0: derived
	// from the factor.
	AttentionFactor float64 `json:"attention_factor,omitempty"`
	// Mscale and MscaleAllDim, both set, derive yarn's attention factor as
	// their ratio (DeepSeek); 0: unset.
	Mscale       float64 `json:"mscale,omitempty"`
	MscaleAllDim float64 `json:"mscale_all_dim,omitempty"`
	// Truncate widens yarn's ramp to whole dimensions; nil: true.
	Truncate *bool `json:"truncate,omitempty"`
	// ShortFactor and LongFactor divide each rotated pair's frequency
	// (longrope): the short ones within the pretraining length, the long
	// ones past it. Factors scaling has only ShortFactor, at every length.
	ShortFactor []float64 `json:"short_factor,omitempty"`
	LongFactor  []float64 `json:"long_factor,omitempty"`
}

// Role is what a tensor does in the model, which decides how it is stored.
type Role string

// The tensor roles.
const (
	RoleEmbedding Role = "embedding"
	RoleOutput    Role = "output"
	RoleLinear    Role = "linear"
	RoleNorm      Role = "norm"
	RoleOther     Role = "other"
)

// arch is one architecture's reading of config.json.
type arch interface {
	// name is the normalized architecture name.
	name() string
	// parse fills the architecture-specific parts of c from the raw config.
	parse(raw hfConfig, c *Config) error
}

// architectures maps HF architecture names to their readers.
func architectures() map[string]arch {
	return map[string]arch{
		"LlamaForCausalLM":   llama{},
		"MistralForCausalLM": mistral{},
		"GemmaForCausalLM":   gemma{},
		"BitNetForCausalLM":  bitnet{},
		"Qwen2ForCausalLM":   qwen2{},
		"Qwen3ForCausalLM":   qwen3{},
		"Gemma2ForCausalLM":  gemma2{},
		"Gemma3ForCausalLM":  gemma3{},
		"Phi3ForCausalLM":    phi3{},
		"SmolLM3ForCausalLM": smollm3{},
	}
}

// Supported lists the HF architectures lowbit reads.
func Supported() []string {
	var s []string
	for k := range architectures() {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// hfConfig is config.json with the fields kept raw for typed reading.
type hfConfig map[string]json.RawMessage

// ParseHFConfig reads a HuggingFace config.json into a Config.
func ParseHFConfig(data []byte) (Config, error) {
	var raw hfConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return Config{}, fmt.Errorf("config.json is not a JSON object: %w", err)
	}
	var archs []string
	if err := raw.get("architectures", &archs, true); err != nil {
		return Config{}, err
	}
	if len(archs) == 0 {
		return Config{}, errors.New("config.json: field architectures is empty")
	}
	a, ok := architectures()[archs[0]]
	if !ok {
		return Config{}, fmt.Errorf("config.json: architecture %s is not supported (supported: %s)", archs[0], strings.Join(Supported(), ", "))
	}
	c := Config{Arch: a.name(), HFArchitecture: archs[0]}
	if err := raw.common(&c); err != nil {
		return Config{}, err
	}
	if err := a.parse(raw, &c); err != nil {
		return Config{}, err
	}
	if err := c.Check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// get decodes field into v; a missing required field is an error naming it.
func (r hfConfig) get(field string, v any, required bool) error {
	b, ok := r[field]
	if !ok || string(b) == "null" {
		if required {
			return fmt.Errorf("config.json: field %s is missing", field)
		}
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("config.json: field %s: %w", field, err)
	}
	return nil
}

// common reads the fields every Llama-family config shares.
func (r hfConfig) common(c *Config) error {
	req := []struct {
		field string
		dst   *int
	}{
		{"hidden_size", &c.HiddenSize},
		{"intermediate_size", &c.IntermediateSize},
		{"num_hidden_layers", &c.NumLayers},
		{"num_attention_heads", &c.NumHeads},
		{"vocab_size", &c.VocabSize},
	}
	for _, f := range req {
		if err := r.get(f.field, f.dst, true); err != nil {
			return err
		}
	}
	c.NumKVHeads = c.NumHeads
	if err := r.get("num_key_value_heads", &c.NumKVHeads, false); err != nil {
		return err
	}
	if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if err := r.get("head_dim", &c.HeadDim, false); err != nil {
		return err
	}
	c.MaxPositions = 2048
	if err := r.get("max_position_embeddings", &c.MaxPositions, false); err != nil {
		return err
	}
	c.RMSNormEps = 1e-6
	if err := r.get("rms_norm_eps", &c.RMSNormEps, false); err != nil {
		return err
	}
	c.RopeTheta = 10000
	if err := r.get("rope_theta", &c.RopeTheta, false); err != nil {
		return err
	}
	if err := r.get("tie_word_embeddings", &c.TieEmbeddings, false); err != nil {
		return err
	}
	if err := r.ropeScaling(c); err != nil {
		return err
	}
	c.BOS = 1
	if err := r.get("bos_token_id", &c.BOS, false); err != nil {
		return err
	}
	// eos_token_id is an int or a list of ints.
	if b, ok := r["eos_token_id"]; ok && string(b) != "null" {
		var one int
		if err := json.Unmarshal(b, &one); err == nil {
			c.EOS = []int{one}
		} else if err := json.Unmarshal(b, &c.EOS); err != nil {
			return fmt.Errorf("config.json: field eos_token_id must be an integer or a list of integers")
		}
	}
	return nil
}

// ropeScaling reads rope_scaling (HF writes "type" or "rope_type"), or
// rope_parameters, which transformers 5 writes instead of rope_theta and
// rope_scaling (theta inside, type "default" when unscaled, nested by layer
// type where sliding and full attention layers rotate differently: Gemma
// 3). It resolves what transformers resolves on loading:
// original_max_position_embeddings from the top level of config.json first
// (Phi-3 keeps it there), then from the scaling, then
// max_position_embeddings; a missing yarn or longrope factor as
// max_position_embeddings over it.
func (r hfConfig) ropeScaling(c *Config) error {
	var rs map[string]any
	if err := r.get("rope_scaling", &rs, false); err != nil {
		return err
	}
	d := ropeDict{name: "rope_scaling", m: rs}
	if rs == nil {
		if err := r.get("rope_parameters", &rs, false); err != nil || rs == nil {
			return err
		}
		d = ropeDict{name: "rope_parameters", m: rs}
	}
	full, nested, err := d.sub("full_attention")
	if err != nil {
		return err
	}
	local, isLocal, err := d.sub("sliding_attention")
	if err != nil {
		return err
	}
	if nested || isLocal {
		if isLocal {
			if err := local.localTheta(c); err != nil {
				return err
			}
		}
		if !nested {
			return nil
		}
		d = full
	}
	// transformers keeps a theta given with the rope parameters over the
	// top-level one.
	if theta, ok, err := d.num("rope_theta"); err != nil {
		return err
	} else if ok {
		c.RopeTheta = theta
	}
	s := &RopeScaling{}
	if s.Type, err = d.kind(); err != nil {
		return err
	}
	switch s.Type {
	case "default", "":
		return nil
	case "su": // Phi-3's first name for longrope
		s.Type = "longrope"
	}
	factor, hasFactor, err := d.num("factor")
	if err != nil {
		return err
	}
	s.Factor = factor
	for _, f := range []struct {
		key string
		dst *float64
	}{
		{"low_freq_factor", &s.LowFreqFactor}, {"high_freq_factor", &s.HighFreqFactor},
		{"beta_fast", &s.BetaFast}, {"beta_slow", &s.BetaSlow},
		{"mscale", &s.Mscale}, {"mscale_all_dim", &s.MscaleAllDim},
	} {
		if *f.dst, _, err = d.num(f.key); err != nil {
			return err
		}
	}
	if af, ok, err := d.num("attention_factor"); err != nil {
		return err
	} else if ok && !(af > 0) {
		return fmt.Errorf("config.json: field %s.attention_factor must be positive, is %v", d.name, af)
	} else {
		s.AttentionFactor = af
	}
	if t, ok := d.m["truncate"]; ok && t != nil {
		b, isBool := t.(bool)
		if !isBool {
			return fmt.Errorf("config.json: field %s.truncate must be true or false, is %v", d.name, t)
		}
		s.Truncate = &b
	}
	if s.ShortFactor, err = d.list("short_factor"); err != nil {
		return err
	}
	if s.LongFactor, err = d.list("long_factor"); err != nil {
		return err
	}
	switch s.Type {
	case "llama3", "yarn", "longrope":
		if s.OriginalMaxPositionEmbeddings, err = r.originalMax(d, c.MaxPositions); err != nil {
			return err
		}
		if !hasFactor && s.Type != "llama3" {
			s.Factor = float64(c.MaxPositions) / float64(s.OriginalMaxPositionEmbeddings)
		}
	}
	if err := s.check(); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	c.RopeScaling = s
	return nil
}

// Limits of the sizes a configuration may give, each far above any published
// model (the largest have hidden_size 16384, 53248-wide MLPs, 126 layers,
// 128 heads of 256, 262144 tokens and 10M positions), so that a corrupt or
// hostile config.json is refused, naming the field, before anything is
// allocated or listed from its numbers.
const (
	maxHiddenSize       = 1 << 16
	maxIntermediateSize = 1 << 18
	maxLayers           = 1 << 12
	maxHeads            = 1 << 12
	maxHeadDim          = 1 << 12
	maxVocabSize        = 1 << 24
	maxPositions        = 1 << 24
)

// MaxConfigSize bounds the config.json read from a model directory (real
// ones are a few kilobytes).
const MaxConfigSize = 16 << 20

// Check verifies that the configuration describes a model that can exist.
func (c Config) Check() error {
	sizes := []struct {
		field  string
		v, max int
	}{
		{"hidden_size", c.HiddenSize, maxHiddenSize}, {"intermediate_size", c.IntermediateSize, maxIntermediateSize},
		{"num_hidden_layers", c.NumLayers, maxLayers}, {"num_attention_heads", c.NumHeads, maxHeads},
		{"num_key_value_heads", c.NumKVHeads, maxHeads}, {"head_dim", c.HeadDim, maxHeadDim},
		{"vocab_size", c.VocabSize, maxVocabSize}, {"max_position_embeddings", c.MaxPositions, maxPositions},
	}
	for _, f := range sizes {
		if f.v <= 0 {
			return fmt.Errorf("config.json: field %s must be positive, is %d", f.field, f.v)
		}
		if f.v > f.max {
			return fmt.Errorf("config.json: field %s = %d is over the limit of %d", f.field, f.v, f.max)
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config.json: head_dim %d must be even for rotary embeddings", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || !(c.RopeTheta > 0) {
		return fmt.Errorf("config.json: rms_norm_eps (%v) and rope_theta (%v) must be positive", c.RMSNormEps, c.RopeTheta)
	}
	if c.SlidingWindow < 0 || c.SlidingWindow > maxPositions {
		return fmt.Errorf("config.json: field sliding_window = %d is outside [0, %d]", c.SlidingWindow, maxPositions)
	}
	return c.checkRope()
}

// TensorRole says what a tensor of this architecture does.
func (c Config) TensorRole(name string) Role {
	switch {
	case name == "model.embed_tokens.weight":
		return RoleEmbedding
	case name == "lm_head.weight":
		return RoleOutput
	case strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, "norm.bias"):
		return RoleNorm
	case strings.HasPrefix(name, "model.layers.") && strings.HasSuffix(name, "_proj.weight"):
		return RoleLinear
	}
	return RoleOther
}

// ExpectedTensors lists the tensors a checkpoint of this configuration must hold.
func (c Config) ExpectedTensors() []string {
	names := []string{"model.embed_tokens.weight", "model.norm.weight"}
	if !c.TieEmbeddings {
		names = append(names, "lm_head.weight")
	}
	for l := 0; l < c.NumLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		names = append(names, p+"input_layernorm.weight", p+"post_attention_layernorm.weight")
		if c.Arch == "phi3" {
			names = append(names, p+"self_attn.qkv_proj.weight", p+"self_attn.o_proj.weight",
				p+"mlp.gate_up_proj.weight", p+"mlp.down_proj.weight")
		} else {
			names = append(names, p+"self_attn.q_proj.weight", p+"self_attn.k_proj.weight", p+"self_attn.v_proj.weight",
				p+"self_attn.o_proj.weight", p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight", p+"mlp.down_proj.weight")
		}
		if c.QKVBias {
			names = append(names, p+"self_attn.q_proj.bias", p+"self_attn.k_proj.bias", p+"self_attn.v_proj.bias")
		}
		if c.QKNorm {
			names = append(names, p+"self_attn.q_norm.weight", p+"self_attn.k_norm.weight")
		}
		if c.SandwichNorms {
			names = append(names, p+"pre_feedforward_layernorm.weight", p+"post_feedforward_layernorm.weight")
		}
		if c.SubNorms {
			names = append(names, p+"self_attn.attn_sub_norm.weight", p+"mlp.ffn_sub_norm.weight")
		}
	}
	return names
}

// StoredAs is the checkpoint tensor that holds name: name itself, or, for
// tied embeddings saved only under the output head's name (transformers
// saves tied weights under either, and loads both), lm_head.weight.
func (c Config) StoredAs(name string, has func(string) bool) string {
	if name == "model.embed_tokens.weight" && c.TieEmbeddings && !has(name) && has("lm_head.weight") {
		return "lm_head.weight"
	}
	return name
}

// TensorShape is the shape a tensor of this configuration must have (nil if unknown).
func (c Config) TensorShape(name string) []int64 {
	h, it := int64(c.HiddenSize), int64(c.IntermediateSize)
	q, kv := int64(c.NumHeads*c.HeadDim), int64(c.NumKVHeads*c.HeadDim)
	switch {
	case name == "model.embed_tokens.weight", name == "lm_head.weight":
		return []int64{int64(c.VocabSize), h}
	case name == "model.norm.weight":
		return []int64{h}
	}
	i := strings.LastIndex(name, ".")
	if i < 0 || !strings.HasPrefix(name, "model.layers.") {
		return nil
	}
	switch suffix := name[strings.Index(name[len("model.layers."):], ".")+len("model.layers.")+1:]; suffix {
	case "input_layernorm.weight", "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight":
		return []int64{h}
	case "self_attn.q_norm.weight", "self_attn.k_norm.weight":
		return []int64{int64(c.HeadDim)}
	case "self_attn.q_proj.bias":
		return []int64{q}
	case "self_attn.k_proj.bias", "self_attn.v_proj.bias":
		return []int64{kv}
	case "self_attn.qkv_proj.weight":
		return []int64{q + 2*kv, h}
	case "mlp.gate_up_proj.weight":
		return []int64{2 * it, h}
	case "self_attn.q_proj.weight":
		return []int64{q, h}
	case "self_attn.k_proj.weight", "self_attn.v_proj.weight":
		return []int64{kv, h}
	case "self_attn.o_proj.weight":
		return []int64{h, q}
	case "mlp.gate_proj.weight", "mlp.up_proj.weight":
		return []int64{it, h}
	case "mlp.down_proj.weight":
		return []int64{h, it}
	case "self_attn.attn_sub_norm.weight":
		return []int64{q}
	case "mlp.ffn_sub_norm.weight":
		return []int64{it}
	}
	return nil
}

// CachePositionBytes is the key/value cache one position of one sequence
// takes (keys and values of every layer, stored as t), what a server
// divides its cache budget by.
func (c Config) CachePositionBytes(t KVType) int64 {
	return 2 * int64(c.NumLayers) * t.RowBytes(c.NumKVHeads*c.HeadDim, c.HeadDim)
}
