package convert

import (
	"math"
	"strings"
	"testing"

	"lowbit/store"
)

// TestBitsPerWeight pins the storage cost of each --bits: the code's bits
// plus an fp16 scale (and for q4 and q2 an fp16 minimum) a group; GGUF's
// figure for a block format; codes and sub-block bytes for a super-block
// format.
func TestBitsPerWeight(t *testing.T) {
	tests := []struct {
		bits  string
		group int
		want  float64
	}{
		{"8", 0, 8.5}, {"q8", 128, 8.125}, {"4", 0, 5}, {"4", 128, 4.25},
		{"2", 0, 3}, {"2", 64, 2.5}, {"1", 0, 1.5}, {"ternary", 0, 2}, {"tq2", 64, 2},
		{"q5_0", 0, 5.5}, {"Q5_1", 0, 6}, {"q2k", 0, 2.625}, {"q3_k", 0, 3.4375},
		{"Q4_K", 0, 4.5}, {"q5k", 0, 5.5}, {"q6k", 0, 6.5625},
		{"q2s", 0, 2.5}, {"q3s", 0, 3.5}, {"q4s", 0, 4.5},
	}
	for _, tc := range tests {
		got, err := BitsPerWeight(tc.bits, tc.group)
		if err != nil || got != tc.want {
			t.Errorf("BitsPerWeight(%q, %d) = %v, %v; want %v", tc.bits, tc.group, got, err, tc.want)
		}
	}
	for _, bits := range []string{"3", "f16", ""} {
		if _, err := BitsPerWeight(bits, 0); err == nil || !strings.Contains(err.Error(), "unknown --bits") {
			t.Errorf("BitsPerWeight(%q): err %v, want unknown --bits", bits, err)
		}
	}
}

// TestRegistryParams checks each entry's shape figures through its
// parameter count: exactly the count a converter that builds the model
// reports, where one does (tol 0), else within tol of the publisher's
// rounded figure. A mistyped width, depth or vocabulary shows here.
func TestRegistryParams(t *testing.T) {
	tests := []struct {
		alias string
		want  float64
		tol   float64 // relative; 0: exact
	}{
		// Exact counts from Keras-Hub's presets (keras_hub/src/models/*/*_presets.py),
		// which build each model and count its weights.
		{"llama2-7b", 6738415616, 0},           // llama2_7b_en
		{"llama2-7b-chat", 6738415616, 0},      // llama2_7b_en (the chat model's shape)
		{"mistral-7b", 7241732096, 0},          // mistral_7b_en
		{"mistral-7b-instruct", 7241732096, 0}, // mistral_0.2_instruct_7b_en
		{"gemma-2b", 2506172416, 0},            // gemma_2b_en
		{"llama3.1-8b", 8030261248, 0},         // llama3_8b_en: Llama 3.1 8B has Llama 3 8B's shape
		{"qwen2.5-0.5b", 494032768, 0},         // qwen2.5_instruct_0.5b_en
		{"qwen2.5-7b", 7615616512, 0},          // qwen2.5_math_instruct_7b_en, Qwen2.5-7B's shape (the card: 7.61B)
		{"qwen3-0.6b", 596049920, 0},           // qwen3_0.6b_en
		{"qwen3-8b", 8190735360, 0},            // qwen3_8b_en
		{"gemma2-2b", 2614341888, 0},           // gemma2_instruct_2b_en
		{"gemma3-1b", 999885952, 0},            // gemma3_instruct_1b
		{"phi3.5-mini", 3821079552, 0},         // phi3_mini_4k_instruct_en: Phi-3.5-mini has Phi-3-mini's shape
		// Mistral 7B v0.1 (mistral_7b_en) with the 768 rows v0.3 adds to
		// embedding and head (its card: "Extended vocabulary to 32768").
		{"mistral-7b-v0.3", 7241732096 + 2*768*4096, 0},
		// Publishers' rounded figures.
		{store.DemoAlias, 260e3, 0.01}, // stories260K
		{"tinyllama", 1.1e9, 0.01},     // TinyLlama-1.1B
		{"llama3.2-1b", 1.23e9, 0.01},  // Meta's Llama 3.2 card: 1B (1.23B)
		{"phi4-mini", 3.8e9, 0.02},     // Phi-4-mini card: 3.8B parameters
		{"smollm2-360m", 360e6, 0.01},  // SmolLM2 card: 360M parameters
		{"smollm3-3b", 3e9, 0.03},      // SmolLM3 card and blog: a 3B model
		{"mistral-nemo", 12e9, 0.03},   // Mistral NeMo card and announcement: 12B
		// bitnet-2b is left out: its card gives only "~2B" (2.41B here,
		// 2.08B without the embedding), too coarse to check a shape.
	}
	seen := map[string]bool{"bitnet-2b": true}
	for _, tc := range tests {
		seen[tc.alias] = true
		e, ok := Lookup(tc.alias)
		if !ok {
			t.Errorf("%s: not in the registry", tc.alias)
			continue
		}
		got := float64(e.TotalParams())
		if tc.tol == 0 && got != tc.want || math.Abs(got/tc.want-1) > tc.tol {
			t.Errorf("%s: %.0f parameters, want %.0f (±%g%%)", tc.alias, got, tc.want, tc.tol*100)
		}
	}
	for _, e := range Registry() {
		if !seen[e.Alias] {
			t.Errorf("%s: no published parameter count to check its shape against", e.Alias)
		}
	}
}

// TestRegistryEntries checks what the list promises: unique aliases and
// repos, every Hub entry naming its repo, and a repo marked gated exactly
// when its organization gates its models on the Hub (a download without
// accepted terms fails, and the list says so beforehand).
func TestRegistryEntries(t *testing.T) {
	gatedOrgs := map[string]bool{"meta-llama": true, "google": true, "mistralai": true}
	aliases, repos := map[string]bool{}, map[string]bool{}
	for _, e := range Registry() {
		if aliases[e.Alias] {
			t.Errorf("alias %s twice", e.Alias)
		}
		aliases[e.Alias] = true
		if e.Embedded {
			if e.Repo != "" {
				t.Errorf("%s: embedded yet has repo %s", e.Alias, e.Repo)
			}
			continue
		}
		org, _, ok := strings.Cut(e.Repo, "/")
		if !ok {
			t.Errorf("%s: repo %q is not org/name", e.Alias, e.Repo)
		}
		if repos[e.Repo] {
			t.Errorf("repo %s twice", e.Repo)
		}
		repos[e.Repo] = true
		if e.Gated != gatedOrgs[org] {
			t.Errorf("%s (%s): gated %v, want %v", e.Alias, e.Repo, e.Gated, gatedOrgs[org])
		}
		if got, ok := Lookup(strings.ToUpper(e.Repo)); !ok || got.Alias != e.Alias {
			t.Errorf("Lookup(%s) = %s, %v", strings.ToUpper(e.Repo), got.Alias, ok)
		}
		if e.Heads%e.KVHeads != 0 || e.Hidden <= 0 || e.HeadDim <= 0 || e.Vocab <= 0 {
			t.Errorf("%s: impossible shape %+v", e.Alias, e)
		}
	}
}

// TestParamsFamilyExtras pins what each family adds to a layer beyond
// Llama's two norms, on one small shape: biases (Qwen2), q/k norms
// (Qwen3), two more norms (Gemma 2) or both (Gemma 3).
func TestParamsFamilyExtras(t *testing.T) {
	base := Entry{Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 100, TiedEmbed: true}
	const llamaOther = 2*2*64 + 64
	tests := []struct {
		arch  string
		extra int64
	}{
		{"LlamaForCausalLM", 0}, {"MistralForCausalLM", 0}, {"Phi3ForCausalLM", 0}, {"SmolLM3ForCausalLM", 0},
		{"Qwen2ForCausalLM", 2 * (64 + 2*32)},
		{"Qwen3ForCausalLM", 2 * 2 * 16},
		{"Gemma2ForCausalLM", 2 * 2 * 64},
		{"Gemma3ForCausalLM", 2 * (2*64 + 2*16)},
		{"BitNetForCausalLM", 2 * (64 + 128)},
	}
	for _, tc := range tests {
		e := base
		e.Architecture = tc.arch
		if _, _, _, other := e.Params(); other != llamaOther+tc.extra {
			t.Errorf("%s: other %d, want %d", tc.arch, other, llamaOther+tc.extra)
		}
	}
}
