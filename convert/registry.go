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
	other = e.Layers*2*e.Hidden + e.Hidden // norms
	if e.Architecture == "BitNetForCausalLM" {
		other += e.Layers * (e.Hidden + e.Intermediate) // sub-norms
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
		return 0, fmt.Errorf("unknown --bits %q (want 1, 2, 4, 8 or ternary)", bits)
	}
	s := f.Spec()
	if s.TensorScale {
		return float64(s.CodeBits), nil // one scale a tensor costs a weight nothing
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
