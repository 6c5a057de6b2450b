// Package convert is lowbit's pipeline from a HuggingFace model to a lowbit
// model directory: resolve the source (a local directory, the embedded demo,
// an alias of the built-in registry or any Hub repo id), read its config and
// safetensors, quantize every tensor in the format its role calls for, write
// tensors and manifest under a temporary name, rename into place (by default
// in the model store), then validate.
package convert

import (
	"fmt"
	"sort"
	"strings"

	"lowbit/quantize"
	"lowbit/store"
)

// Entry is one model of the built-in registry: a short alias for a Hub repo,
// with the shape figures needed to tell a user what each --bits will cost on
// disk before anything is downloaded.
type Entry struct {
	Alias        string `json:"alias"`
	Repo         string `json:"repo"`
	Architecture string `json:"architecture"`
	Gated        bool   `json:"gated"`
	Description  string `json:"description"`

	Hidden       int64 `json:"hidden_size"`
	Intermediate int64 `json:"intermediate_size"`
	Layers       int64 `json:"num_layers"`
	Heads        int64 `json:"num_heads"`
	KVHeads      int64 `json:"num_kv_heads"`
	HeadDim      int64 `json:"head_dim"`
	Vocab        int64 `json:"vocab_size"`
	TiedEmbed    bool  `json:"tied_embeddings"`
	// DefaultBits is the --bits the model is meant for ("ternary" for BitNet).
	DefaultBits string `json:"default_bits,omitempty"`
	// Embedded says the model is built into lowbit (store.DemoAlias) and
	// needs no download; it has no Repo.
	Embedded bool `json:"embedded,omitempty"`
}

// Registry is the built-in list of models, in display order.
func Registry() []Entry {
	return []Entry{
		{Alias: store.DemoAlias, Architecture: "LlamaForCausalLM", Embedded: true, Description: "stories260K, a TinyStories Llama built into lowbit (no download)",
			Hidden: 64, Intermediate: 172, Layers: 5, Heads: 8, KVHeads: 4, HeadDim: 8, Vocab: 512, TiedEmbed: true},
		{Alias: "tinyllama", Repo: "TinyLlama/TinyLlama-1.1B-Chat-v1.0", Architecture: "LlamaForCausalLM", Description: "TinyLlama 1.1B chat",
			Hidden: 2048, Intermediate: 5632, Layers: 22, Heads: 32, KVHeads: 4, HeadDim: 64, Vocab: 32000},
		{Alias: "llama2-7b", Repo: "meta-llama/Llama-2-7b-hf", Architecture: "LlamaForCausalLM", Gated: true, Description: "Llama 2 7B base",
			Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32, KVHeads: 32, HeadDim: 128, Vocab: 32000},
		{Alias: "llama2-7b-chat", Repo: "meta-llama/Llama-2-7b-chat-hf", Architecture: "LlamaForCausalLM", Gated: true, Description: "Llama 2 7B chat",
			Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32, KVHeads: 32, HeadDim: 128, Vocab: 32000},
		{Alias: "mistral-7b", Repo: "mistralai/Mistral-7B-v0.1", Architecture: "MistralForCausalLM", Gated: true, Description: "Mistral 7B v0.1 base",
			Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 32000},
		{Alias: "mistral-7b-instruct", Repo: "mistralai/Mistral-7B-Instruct-v0.2", Architecture: "MistralForCausalLM", Gated: true, Description: "Mistral 7B instruct v0.2",
			Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 32000},
		{Alias: "gemma-2b", Repo: "google/gemma-2b", Architecture: "GemmaForCausalLM", Gated: true, Description: "Gemma 2B base",
			Hidden: 2048, Intermediate: 16384, Layers: 18, Heads: 8, KVHeads: 1, HeadDim: 256, Vocab: 256000, TiedEmbed: true},
		{Alias: "bitnet-2b", Repo: "microsoft/bitnet-b1.58-2B-4T-bf16", Architecture: "BitNetForCausalLM", Description: "BitNet b1.58 2B4T (bf16 master weights)",
			Hidden: 2560, Intermediate: 6912, Layers: 30, Heads: 20, KVHeads: 5, HeadDim: 128, Vocab: 128256, TiedEmbed: true, DefaultBits: "ternary"},
		// One popular model of each current family, shapes as their
		// config.json gives them.
		{Alias: "llama3.2-1b", Repo: "meta-llama/Llama-3.2-1B-Instruct", Architecture: "LlamaForCausalLM", Gated: true, Description: "Llama 3.2 1B instruct",
			Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, Vocab: 128256, TiedEmbed: true},
		{Alias: "llama3.1-8b", Repo: "meta-llama/Llama-3.1-8B-Instruct", Architecture: "LlamaForCausalLM", Gated: true, Description: "Llama 3.1 8B instruct",
			Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 128256},
		{Alias: "qwen2.5-0.5b", Repo: "Qwen/Qwen2.5-0.5B-Instruct", Architecture: "Qwen2ForCausalLM", Description: "Qwen2.5 0.5B instruct",
			Hidden: 896, Intermediate: 4864, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, Vocab: 151936, TiedEmbed: true},
		{Alias: "qwen2.5-7b", Repo: "Qwen/Qwen2.5-7B-Instruct", Architecture: "Qwen2ForCausalLM", Description: "Qwen2.5 7B instruct",
			Hidden: 3584, Intermediate: 18944, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128, Vocab: 152064},
		{Alias: "qwen3-0.6b", Repo: "Qwen/Qwen3-0.6B", Architecture: "Qwen3ForCausalLM", Description: "Qwen3 0.6B (thinking and non-thinking)",
			Hidden: 1024, Intermediate: 3072, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Vocab: 151936, TiedEmbed: true},
		{Alias: "qwen3-8b", Repo: "Qwen/Qwen3-8B", Architecture: "Qwen3ForCausalLM", Description: "Qwen3 8B (thinking and non-thinking)",
			Hidden: 4096, Intermediate: 12288, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936},
		{Alias: "gemma2-2b", Repo: "google/gemma-2-2b-it", Architecture: "Gemma2ForCausalLM", Gated: true, Description: "Gemma 2 2B instruct",
			Hidden: 2304, Intermediate: 9216, Layers: 26, Heads: 8, KVHeads: 4, HeadDim: 256, Vocab: 256000, TiedEmbed: true},
		{Alias: "gemma3-1b", Repo: "google/gemma-3-1b-it", Architecture: "Gemma3ForCausalLM", Gated: true, Description: "Gemma 3 1B instruct (text only)",
			Hidden: 1152, Intermediate: 6912, Layers: 26, Heads: 4, KVHeads: 1, HeadDim: 256, Vocab: 262144, TiedEmbed: true},
		{Alias: "phi3.5-mini", Repo: "microsoft/Phi-3.5-mini-instruct", Architecture: "Phi3ForCausalLM", Description: "Phi-3.5 mini instruct (3.8B)",
			Hidden: 3072, Intermediate: 8192, Layers: 32, Heads: 32, KVHeads: 32, HeadDim: 96, Vocab: 32064},
		{Alias: "phi4-mini", Repo: "microsoft/Phi-4-mini-instruct", Architecture: "Phi3ForCausalLM", Description: "Phi-4 mini instruct (3.8B)",
			Hidden: 3072, Intermediate: 8192, Layers: 32, Heads: 24, KVHeads: 8, HeadDim: 128, Vocab: 200064, TiedEmbed: true},
		{Alias: "smollm2-360m", Repo: "HuggingFaceTB/SmolLM2-360M-Instruct", Architecture: "LlamaForCausalLM", Description: "SmolLM2 360M instruct",
			Hidden: 960, Intermediate: 2560, Layers: 32, Heads: 15, KVHeads: 5, HeadDim: 64, Vocab: 49152, TiedEmbed: true},
		{Alias: "smollm3-3b", Repo: "HuggingFaceTB/SmolLM3-3B", Architecture: "SmolLM3ForCausalLM", Description: "SmolLM3 3B (thinking and non-thinking)",
			Hidden: 2048, Intermediate: 11008, Layers: 36, Heads: 16, KVHeads: 4, HeadDim: 128, Vocab: 128256, TiedEmbed: true},
		{Alias: "mistral-7b-v0.3", Repo: "mistralai/Mistral-7B-Instruct-v0.3", Architecture: "MistralForCausalLM", Gated: true, Description: "Mistral 7B instruct v0.3",
			Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 32768},
		{Alias: "mistral-nemo", Repo: "mistralai/Mistral-Nemo-Instruct-2407", Architecture: "MistralForCausalLM", Gated: true, Description: "Mistral NeMo 12B instruct (2407)",
			Hidden: 5120, Intermediate: 14336, Layers: 40, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 131072},
	}
}

// Lookup finds an alias (case-insensitive) or a repo id of the registry.
func Lookup(nameOrRepo string) (Entry, bool) {
	for _, e := range Registry() {
		if strings.EqualFold(e.Alias, nameOrRepo) || e.Repo != "" && strings.EqualFold(e.Repo, nameOrRepo) {
			return e, true
		}
	}
	return Entry{}, false
}

// Aliases lists the registry's aliases, sorted, for error messages.
func Aliases() []string {
	var a []string
	for _, e := range Registry() {
		a = append(a, e.Alias)
	}
	sort.Strings(a)
	return a
}

// Params breaks the parameter count into the parts that are stored differently.
func (e Entry) Params() (linear, embed, head, other int64) {
	q := e.Heads * e.HeadDim
	kv := e.KVHeads * e.HeadDim
	perLayer := e.Hidden*q + 2*e.Hidden*kv + q*e.Hidden + 3*e.Hidden*e.Intermediate
	linear = e.Layers * perLayer
	embed = e.Vocab * e.Hidden
	if !e.TiedEmbed {
		head = e.Vocab * e.Hidden
	}
	other = e.Layers*2*e.Hidden + e.Hidden // a layer's two norms, and the last
	// What a family adds to a layer is small, but counting it keeps the
	// total equal to the published one. (Phi-3 stores q, k, v and gate, up
	// each as one joined matrix: the same count.)
	switch e.Architecture {
	case "BitNetForCausalLM":
		other += e.Layers * (e.Hidden + e.Intermediate) // attn_sub_norm, ffn_sub_norm
	case "Qwen2ForCausalLM":
		other += e.Layers * (q + 2*kv) // q, k and v biases
	case "Qwen3ForCausalLM":
		other += e.Layers * 2 * e.HeadDim // q_norm, k_norm
	case "Gemma2ForCausalLM":
		other += e.Layers * 2 * e.Hidden // pre_ and post_feedforward_layernorm
	case "Gemma3ForCausalLM":
		other += e.Layers * (2*e.Hidden + 2*e.HeadDim) // both
	}
	return linear, embed, head, other
}

// TotalParams is the number of parameters of the model.
func (e Entry) TotalParams() int64 {
	l, em, h, o := e.Params()
	return l + em + h + o
}

// EstimateBytes is the approximate size of the converted model's weights for
// the given --bits, with embeddings and head at 8-bit (128-weight groups) and
// norms in F32, as the converter stores them by default.
func (e Entry) EstimateBytes(bits string) (int64, error) {
	bpw, err := BitsPerWeight(bits, 0)
	if err != nil {
		return 0, err
	}
	q8, _ := BitsPerWeight("8", quantize.Q8.TableGroupSize())
	l, em, h, o := e.Params()
	b := float64(l)*bpw/8 + float64(em+h)*q8/8 + float64(o)*4
	return int64(b), nil
}

// BitsPerWeight is the storage cost of one weight in a quantized format (a
// --bits value), its fp16 scales and minimums included, for a group size
// (0: the format's default).
func BitsPerWeight(bits string, group int) (float64, error) {
	f, err := quantize.ParseFormat(bits)
	if err != nil || !f.Quantized() {
		return 0, fmt.Errorf("unknown --bits %q (want 1, 2, 4, 8, ternary, a block format: q5_0, q5_1, q2k, q3k, q4k, q5k, q6k, or a super-block one: q2s, q3s, q4s)", bits)
	}
	s := f.Spec()
	if s.TensorScale || s.BlockScales {
		// The scales are in the blocks, if any; one a tensor costs a
		// weight nothing.
		return float64(s.BlockBytes*8) / float64(s.Block), nil
	}
	if group <= 0 {
		group = s.Group
	}
	scaleBits := 16.0 // an fp16 scale a group
	if s.Mins {
		scaleBits = 32 // and an fp16 minimum
	}
	return float64(s.CodeBits) + scaleBits/float64(group), nil
}
