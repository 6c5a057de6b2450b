package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"lowbit/gguf"
)

// This file says, once for reading and writing, how llama.cpp holds each
// architecture lowbit runs: its name in general.architecture, the metadata
// keys of its hyperparameters, its tensor names, and the conventions of
// llama.cpp's converter (q and k rows interleaved for the rotation of the
// llama architecture, Gemma's gains stored as 1 + w, rope factors as
// tensors). The reader (gguf.go) builds a Config from those keys as
// llama.cpp reads them; the exporter asks Config.GGUF for the layout of a
// model and is refused where llama.cpp would compute another model.

// ggufFamily is one of llama.cpp's architectures that lowbit reads and writes.
type ggufFamily struct {
	// name is llama.cpp's (general.architecture); arch, hf and act are
	// the Config's Arch, HFArchitecture and Activation it reads back as.
	name, arch, hf, act string
	// permuteQK: llama.cpp rotates adjacent pairs (its NORM rope), so its
	// converter interleaves the rows of q and k of each head.
	permuteQK bool
	// normPlusOne: the file stores Gemma's gains as 1 + w.
	normPlusOne bool
	// qkvBias, qkNorm, sandwich, tiedOnly: the family's biases on q, k and
	// v, norms of q and k, norms after attention and the MLP, and a head
	// that is always the embedding table.
	qkvBias, qkNorm, sandwich, tiedOnly bool
	// fused: q, k and v as one attn_qkv, gate and up as one ffn_up (Phi-3).
	fused bool
	// swa: llama.cpp applies sliding windows for the family.
	swa bool
}

// ggufFamilies lists the families by llama.cpp's name. Mistral,
// TinyLlama and SmolLM2 are llama; BitNet is missing because llama.cpp's
// bitnet architecture gates its MLP with SiLU where BitNetForCausalLM
// squares a ReLU: it would compute another model.
func ggufFamilies() []ggufFamily {
	return []ggufFamily{
		{name: "llama", arch: "llama", hf: "LlamaForCausalLM", act: "silu", permuteQK: true},
		{name: "qwen2", arch: "qwen2", hf: "Qwen2ForCausalLM", act: "silu", qkvBias: true},
		{name: "qwen3", arch: "qwen3", hf: "Qwen3ForCausalLM", act: "silu", qkNorm: true},
		{name: "gemma", arch: "gemma", hf: "GemmaForCausalLM", act: "gelu_tanh", normPlusOne: true, tiedOnly: true},
		{name: "gemma2", arch: "gemma2", hf: "Gemma2ForCausalLM", act: "gelu_tanh", normPlusOne: true, sandwich: true, tiedOnly: true, swa: true},
		{name: "gemma3", arch: "gemma3", hf: "Gemma3ForCausalLM", act: "gelu_tanh", normPlusOne: true, sandwich: true, qkNorm: true, swa: true},
		{name: "phi3", arch: "phi3", hf: "Phi3ForCausalLM", act: "silu", fused: true},
		{name: "smollm3", arch: "smollm3", hf: "SmolLM3ForCausalLM", act: "silu", permuteQK: true},
	}
}

// ggufFamilyNamed is the family llama.cpp calls name.
func ggufFamilyNamed(name string) (ggufFamily, bool) {
	for _, f := range ggufFamilies() {
		if f.name == name {
			return f, true
		}
	}
	return ggufFamily{}, false
}

// ggufFamilyOf is the family a Config is written as.
func ggufFamilyOf(c Config) (ggufFamily, error) {
	arch := c.Arch
	if arch == "mistral" {
		arch = "llama" // llama.cpp's converter writes Mistral as llama
	}
	for _, f := range ggufFamilies() {
		if f.arch == arch {
			return f, nil
		}
	}
	if c.Arch == "bitnet" {
		return ggufFamily{}, errors.New("llama.cpp's bitnet architecture gates its MLP with SiLU where BitNetForCausalLM squares a ReLU: a GGUF of this model would compute another model in llama.cpp")
	}
	return ggufFamily{}, fmt.Errorf("architecture %s has no GGUF layout in lowbit", c.Arch)
}

// ggufNoRopeStep is SmolLM3's rotation in llama.cpp: every fourth layer
// (1-based) takes none.
const ggufNoRopeStep = 4

// GGUFLayout is how a model of one configuration is written as GGUF for
// llama.cpp: its architecture, the metadata of its hyperparameters, the
// names of its tensors and the transformations of their data.
type GGUFLayout struct {
	// Arch is llama.cpp's name for the architecture (general.architecture).
	Arch string
	// Metadata are the architecture's keys (<arch>.*), in writing order.
	Metadata []gguf.KV
	// Names maps each tensor of Config.ExpectedTensors (HF names) to its
	// GGUF name.
	Names map[string]string
	// Extra are tensors llama.cpp reads that lowbit derives from the
	// configuration (Phi-3's rope factors), F32.
	Extra []gguf.TensorData
	// PermuteQK says the rows of q and k are stored interleaved
	// (RowOrder gives the order).
	PermuteQK bool
	// NormPlusOne says the norms' gains are stored as 1 + w (float32).
	NormPlusOne bool
	// Notes say where llama.cpp computes the model differently from lowbit
	// in ways the file cannot express (sliding windows it ignores), and past
	// what context.
	Notes []string

	heads, kvHeads int
}

// GGUF is the layout of a model of configuration c in llama.cpp's terms,
// or an error naming what llama.cpp cannot compute the same way (an
// activation, an attention scale, a pattern of windows or rotations that
// its architecture fixes otherwise).
func (c Config) GGUF() (*GGUFLayout, error) {
	fam, err := ggufFamilyOf(c)
	if err != nil {
		return nil, err
	}
	l := &GGUFLayout{Arch: fam.name, PermuteQK: fam.permuteQK, NormPlusOne: fam.normPlusOne, Names: map[string]string{},
		heads: c.NumHeads, kvHeads: c.NumKVHeads}
	if fam.tiedOnly && !c.TieEmbeddings {
		return nil, fmt.Errorf("llama.cpp's %s always takes the embedding table as the output head; this model has its own head", fam.name)
	}
	if c.Activation != fam.act {
		return nil, fmt.Errorf("llama.cpp's %s computes the %s activation, this model %s", fam.name, fam.act, c.Activation)
	}
	if c.SubNorms || c.QKVBias != fam.qkvBias || c.QKNorm != fam.qkNorm || c.SandwichNorms != fam.sandwich || c.EmbedScale != fam.normPlusOne || c.NormPlusOne != fam.normPlusOne {
		return nil, fmt.Errorf("this %s model's norms, biases or embedding scale differ from llama.cpp's %s", c.Arch, fam.name)
	}
	if fam.permuteQK && c.rotaryDim() != c.HeadDim {
		return nil, fmt.Errorf("llama.cpp's %s rotates whole heads; this model rotates %d of %d dimensions", fam.name, c.rotaryDim(), c.HeadDim)
	}
	for g, name := range ggufNames(c) {
		l.Names[name] = g
	}
	m := ggufKVs{prefix: fam.name + "."}
	m.add("context_length", uint32(c.MaxPositions))
	m.add("embedding_length", uint32(c.HiddenSize))
	m.add("block_count", uint32(c.NumLayers))
	m.add("feed_forward_length", uint32(c.IntermediateSize))
	m.add("vocab_size", uint32(c.VocabSize))
	m.add("attention.head_count", uint32(c.NumHeads))
	m.add("attention.head_count_kv", uint32(c.NumKVHeads))
	m.add("attention.key_length", uint32(c.HeadDim))
	m.add("attention.value_length", uint32(c.HeadDim))
	m.add("attention.layer_norm_rms_epsilon", float32(c.RMSNormEps))
	m.add("rope.freq_base", float32(c.RopeTheta))
	m.add("rope.dimension_count", uint32(c.rotaryDim()))
	if err := l.ropeScaling(c, &m); err != nil {
		return nil, err
	}
	if err := l.family(c, fam, &m); err != nil {
		return nil, err
	}
	if m.err != nil {
		return nil, m.err
	}
	l.Metadata = m.list
	return l, nil
}

// family adds what one family has of its own: windows, soft-capping, the
// attention scale llama.cpp fixes, the layers without rotation.
func (l *GGUFLayout) family(c Config, fam ggufFamily, m *ggufKVs) error {
	var window, period int
	if fam.swa {
		var err error
		if window, period, err = c.windowPattern(); err != nil {
			return err
		}
	} else if w := c.shortestWindow(); w > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("llama.cpp's %s has no sliding windows: past %d tokens it attends to positions this model's windowed layers do not", fam.name, w))
	}
	switch fam.name {
	case "gemma2", "gemma3":
		// llama.cpp scales q by 1/sqrt(head size), but for the 27B models
		// (told apart by their layer count) by 1/sqrt(hidden/heads).
		want := float64(c.HeadDim)
		if c.NumLayers == map[string]int{"gemma2": 46, "gemma3": 62}[fam.name] {
			want = float64(c.HiddenSize / c.NumHeads)
		}
		if got := c.QueryPreAttnScalar; got > 0 && got != want {
			return fmt.Errorf("llama.cpp's %s scales attention by 1/sqrt(%g) for this shape; this model's query_pre_attn_scalar is %g", fam.name, want, got)
		}
		if window > 0 {
			m.add("attention.sliding_window", uint32(window))
			m.add("attention.sliding_window_pattern", uint32(period))
		} else if fam.name == "gemma2" {
			m.add("attention.sliding_window_pattern", uint32(1)) // no layer slides
		}
		if c.FinalSoftCap > 0 {
			m.add("final_logit_softcapping", float32(c.FinalSoftCap))
		} else if fam.name == "gemma2" {
			return errors.New("llama.cpp's gemma2 caps the logits (at 30 by default); this model does not")
		}
		if fam.name == "gemma2" {
			if !(c.AttnSoftCap > 0) {
				return errors.New("llama.cpp's gemma2 caps the attention scores (at 50 by default); this model does not")
			}
			m.add("attn_logit_softcapping", float32(c.AttnSoftCap))
		} else if c.AttnSoftCap > 0 {
			return errors.New("llama.cpp's gemma3 does not cap attention scores; this model does")
		}
		if fam.name == "gemma3" && window > 0 {
			local := c.LocalRopeTheta
			if local == 0 {
				if c.RopeScaling != nil {
					return errors.New("llama.cpp's gemma3 rotates its sliding layers unscaled; this model scales them as its global ones")
				}
				local = c.RopeTheta
			}
			m.add("rope.freq_base_swa", float32(local))
		}
	case "smollm3":
		for layer := range c.NumLayers {
			if slices.Contains(c.NoRopeLayers, layer) != ((layer+1)%ggufNoRopeStep == 0) {
				return fmt.Errorf("llama.cpp's smollm3 leaves every %dth layer unrotated; this model's unrotated layers are %v", ggufNoRopeStep, c.NoRopeLayers)
			}
		}
	}
	if fam.name != "smollm3" && len(c.NoRopeLayers) > 0 {
		return fmt.Errorf("llama.cpp's %s rotates every layer; this model leaves layers %v unrotated", fam.name, c.NoRopeLayers)
	}
	if fam.name != "gemma3" && c.LocalRopeTheta > 0 && c.LocalRopeTheta != c.RopeTheta && window > 0 {
		return fmt.Errorf("llama.cpp's %s rotates every layer at one base; this model's sliding layers take %g", fam.name, c.LocalRopeTheta)
	}
	if fam.name != "gemma2" && fam.name != "gemma3" && c.QueryPreAttnScalar > 0 && c.QueryPreAttnScalar != float64(c.HeadDim) {
		return fmt.Errorf("llama.cpp's %s scales attention by 1/sqrt(head size); this model by 1/sqrt(%g)", fam.name, c.QueryPreAttnScalar)
	}
	if c.FinalSoftCap > 0 && fam.name != "gemma2" && fam.name != "gemma3" {
		return fmt.Errorf("llama.cpp's %s does not cap the logits; this model does", fam.name)
	}
	return nil
}

// shortestWindow is the narrowest sliding window of any layer within the
// context, 0 when none slides.
func (c Config) shortestWindow() int {
	out := 0
	for l := range c.NumLayers {
		if w := c.Window(l); w > 0 && w < c.MaxPositions && (out == 0 || w < out) {
			out = w
		}
	}
	return out
}

// windowPattern describes the model's sliding windows as llama.cpp's
// keys can: one window, on the layers that are not every period-th
// (1-based); window 0 when no layer slides within the context.
func (c Config) windowPattern() (window, period int, err error) {
	windows := make([]int, c.NumLayers)
	for l := range windows {
		if w := c.Window(l); w > 0 && w < c.MaxPositions {
			windows[l] = w
		}
	}
	for _, w := range windows {
		if w > 0 && window > 0 && w != window {
			return 0, 0, fmt.Errorf("this model's sliding windows differ between layers (%v); GGUF holds one", windows)
		}
		if w > 0 {
			window = w
		}
	}
	if window == 0 {
		return 0, 0, nil
	}
	period = slices.Index(windows, 0) + 1 // the first full layer ends the period
	if period == 0 {
		period = c.NumLayers + 1 // every layer slides
	}
	for l, w := range windows {
		if (w > 0) != ((l+1)%period != 0) {
			return window, 0, fmt.Errorf("this model's sliding layers %v are not every layer but each %dth, the pattern GGUF holds", windows, period)
		}
	}
	return window, period, nil
}

// ropeScaling adds the keys (and tensors) of the config's rope scaling as
// llama.cpp's converter writes them.
func (l *GGUFLayout) ropeScaling(c Config, m *ggufKVs) error {
	s := c.RopeScaling
	if s == nil {
		return nil
	}
	switch s.Type {
	case "linear":
		m.add("rope.scaling.type", "linear")
		m.add("rope.scaling.factor", float32(s.Factor))
	case "dynamic":
		// Dynamic NTK changes the rotation only past max_position_embeddings,
		// which is the context llama.cpp is told: nothing to write.
	case "yarn":
		m.add("rope.scaling.type", "yarn")
		m.add("rope.scaling.factor", float32(s.Factor))
		m.add("rope.scaling.original_context_length", uint32(s.OriginalMaxPositionEmbeddings))
		if s.BetaFast > 0 {
			m.add("rope.scaling.yarn_beta_fast", float32(s.BetaFast))
		}
		if s.BetaSlow > 0 {
			m.add("rope.scaling.yarn_beta_slow", float32(s.BetaSlow))
		}
		if s.AttentionFactor > 0 {
			m.add("rope.scaling.yarn_attn_factor", float32(s.AttentionFactor))
		}
		l.Notes = append(l.Notes, "llama.cpp computes YaRN's rotation its own way; lowbit has not held it to transformers'")
	case "llama3":
		f := llama3Factors(c.RopeTheta, c.rotaryDim(), s)
		l.Extra = append(l.Extra, gguf.TensorData{Name: "rope_freqs.weight", Dims: []int64{int64(len(f))}, Type: gguf.F32, Data: f32Bytes(f)})
	case "longrope":
		r := longrope(c.RopeTheta, c.rotaryDim(), s.OriginalMaxPositionEmbeddings+1, s)
		m.add("rope.scaling.attn_factor", r.Factor)
		m.add("rope.scaling.original_context_length", uint32(s.OriginalMaxPositionEmbeddings))
		for _, t := range []struct {
			name string
			f    []float64
		}{{"rope_factors_long.weight", s.LongFactor}, {"rope_factors_short.weight", s.ShortFactor}} {
			f := make([]float32, len(t.f))
			for i, x := range t.f {
				f[i] = float32(x)
			}
			l.Extra = append(l.Extra, gguf.TensorData{Name: t.name, Dims: []int64{int64(len(f))}, Type: gguf.F32, Data: f32Bytes(f)})
		}
	default:
		return fmt.Errorf("rope scaling %q has no GGUF form", s.Type)
	}
	return nil
}

// llama3Factors are llama.cpp's rope_freqs for Llama 3.1's scaling: the
// divisor of each pair's frequency (1 for the fast ones, the factor for
// the slow ones, a blend between).
func llama3Factors(theta float64, dim int, s *RopeScaling) []float32 {
	out := make([]float32, dim/2)
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWavelen, highWavelen := old/s.LowFreqFactor, old/s.HighFreqFactor
	for i := range out {
		freq := 1 / math.Pow(theta, float64(2*i)/float64(dim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(s.Factor)
		default:
			smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/s.Factor + smooth))
		}
	}
	return out
}

// RowOrder lists, for each row of HF tensor name as the file stores it,
// the HF row it holds; nil when the rows keep their order. Only whole rows
// move, so a quantized row keeps its blocks.
func (l *GGUFLayout) RowOrder(name string, rows int) []int {
	if !l.PermuteQK {
		return nil
	}
	heads := 0
	switch {
	case strings.HasSuffix(name, "self_attn.q_proj.weight"):
		heads = l.heads
	case strings.HasSuffix(name, "self_attn.k_proj.weight"):
		heads = l.kvHeads
	default:
		return nil
	}
	idx := unpermuteRows(rows, heads)
	perm := make([]int, rows)
	for hf, file := range idx {
		perm[file] = hf
	}
	return perm
}

// ggufTensorName is the GGUF name of a tensor of Config.ExpectedTensors.
// Gemma 2's post_attention_layernorm follows attention; Llama's (the same
// HF name) precedes the MLP.
func ggufTensorName(name string) string {
	switch name {
	case "model.embed_tokens.weight":
		return "token_embd.weight"
	case "model.norm.weight":
		return "output_norm.weight"
	case "lm_head.weight":
		return "output.weight"
	}
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return name
	}
	layer, part, _ := strings.Cut(rest, ".")
	base, suffix := part, ""
	if i := strings.LastIndex(part, "."); i >= 0 {
		base, suffix = part[:i], part[i:]
	}
	g, ok := map[string]string{
		"input_layernorm":            "attn_norm",
		"post_attention_layernorm":   "ffn_norm",
		"pre_feedforward_layernorm":  "ffn_norm",
		"post_feedforward_layernorm": "post_ffw_norm",
		"self_attn.q_proj":           "attn_q",
		"self_attn.k_proj":           "attn_k",
		"self_attn.v_proj":           "attn_v",
		"self_attn.qkv_proj":         "attn_qkv",
		"self_attn.o_proj":           "attn_output",
		"self_attn.q_norm":           "attn_q_norm",
		"self_attn.k_norm":           "attn_k_norm",
		"self_attn.attn_sub_norm":    "attn_sub_norm",
		"mlp.gate_proj":              "ffn_gate",
		"mlp.up_proj":                "ffn_up",
		"mlp.gate_up_proj":           "ffn_up",
		"mlp.down_proj":              "ffn_down",
		"mlp.ffn_sub_norm":           "ffn_sub_norm",
	}[base]
	if !ok {
		return name
	}
	return "blk." + layer + "." + g + suffix
}

// ggufNames maps the GGUF tensor names of a configuration to HF's, with
// Gemma 2 and 3's post_attention_layernorm as post_attention_norm.
func ggufNames(c Config) map[string]string {
	names := map[string]string{}
	for _, n := range c.ExpectedTensors() {
		g := ggufTensorName(n)
		if c.SandwichNorms && strings.HasSuffix(n, ".post_attention_layernorm.weight") {
			g = strings.TrimSuffix(g, "ffn_norm.weight") + "post_attention_norm.weight"
		}
		names[g] = n
	}
	return names
}

// ggufKVs collects metadata under a prefix, keeping the first error (a
// value ValueOf has no type for, which only a mistake here can give).
type ggufKVs struct {
	prefix string
	list   []gguf.KV
	err    error
}

func (m *ggufKVs) add(key string, v any) {
	val, err := gguf.ValueOf(v)
	if err != nil {
		if m.err == nil {
			m.err = fmt.Errorf("gguf key %s%s: %w", m.prefix, key, err)
		}
		return
	}
	m.list = append(m.list, gguf.KV{Key: m.prefix + key, Value: val})
}

// f32Bytes is w as F32 data.
func f32Bytes(w []float32) []byte {
	b := make([]byte, 0, 4*len(w))
	for _, x := range w {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}
