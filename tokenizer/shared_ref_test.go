package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"lowbit/internal/testmodels"
)

// sharedTokenizers returns shared/tokenizers (real tokenizer files of current model
// families and the ids the tokenizers library gives for test strings, beside
// shared/models), skipping t when it is absent.
func sharedTokenizers(t testing.TB) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(testmodels.Dir(t)), "tokenizers")
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		t.Skipf("skipping: %s (real tokenizer files) is not present", p)
	}
	return p
}

// idCase is a text and the ids the tokenizers library gives for it.
type idCase struct {
	text string
	ids  []int
	bos  bool // the ids start with the special tokens Encode adds with addBOS
}

// llamaCppCases reads llama.cpp's tokenizer test strings (ggml-vocab-NAME.gguf.inp) and
// their ids without BOS (.out, one line per string).
func llamaCppCases(t *testing.T, inpPath, outPath string) []idCase {
	t.Helper()
	inp, err := os.ReadFile(inpPath)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	inputs := strings.Split(strings.TrimSuffix(string(inp), sep), sep)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(inputs) != len(lines) || len(inputs) < 40 {
		t.Fatalf("%s: %d inputs and %d lines of ids", inpPath, len(inputs), len(lines))
	}
	var cases []idCase
	for i, l := range lines {
		c := idCase{text: inputs[i]}
		for _, f := range strings.Fields(l) {
			v, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s line %d: %v", outPath, i+1, err)
			}
			c.ids = append(c.ids, v)
		}
		cases = append(cases, c)
	}
	return cases
}

// swiftEncodedCase reads one of swift-transformers' *_encoded.json (ids with BOS).
func swiftEncodedCase(t *testing.T, path string) []idCase {
	var f struct {
		Text     string `json:"text"`
		TokenIDs []int  `json:"token_ids"`
	}
	readJSON(t, path, &f)
	if len(f.TokenIDs) < 2 {
		t.Fatalf("%s: token_ids: %v", path, f.TokenIDs)
	}
	return []idCase{{text: f.Text, ids: f.TokenIDs, bos: true}}
}

// swiftTokenizerTests reads one model's cases of swift-transformers' tokenizer_tests.json
// (ids with the special tokens transformers adds by default).
func swiftTokenizerTests(t *testing.T, path, model string) []idCase {
	var f map[string][]struct {
		Input   string `json:"input"`
		Encoded struct {
			InputIDs []int `json:"input_ids"`
		} `json:"encoded"`
	}
	readJSON(t, path, &f)
	if len(f[model]) == 0 {
		t.Fatalf("%s: no cases for %s", path, model)
	}
	var cases []idCase
	for _, c := range f[model] {
		cases = append(cases, idCase{text: c.Input, ids: c.Encoded.InputIDs, bos: true})
	}
	return cases
}

// swiftMultilingual reads swift-transformers' multilingual and emoji conformance set
// (inputs.json) with the ids of one model's baseline (special tokens added as
// transformers does by default, so bos says whether the model adds any).
func swiftMultilingual(t *testing.T, dir, baseline string, bos bool) []idCase {
	var in struct {
		Inputs []struct {
			ID   string `json:"id"`
			Text string `json:"text"`
		} `json:"inputs"`
	}
	readJSON(t, filepath.Join(dir, "inputs.json"), &in)
	var base struct {
		Entries map[string]struct {
			InputIDs []int `json:"input_ids"`
		} `json:"entries"`
	}
	readJSON(t, filepath.Join(dir, "baselines", baseline), &base)
	var cases []idCase
	for _, x := range in.Inputs {
		e, ok := base.Entries[x.ID]
		if !ok {
			t.Fatalf("%s: no entry %q", baseline, x.ID)
		}
		cases = append(cases, idCase{text: x.Text, ids: e.InputIDs, bos: bos})
	}
	if len(cases) < 30 {
		t.Fatalf("%s: %d cases", baseline, len(cases))
	}
	return cases
}

// linkDir makes a model directory of files from shared/tokenizers (name -> path), as a
// download of the model would hold them.
func linkDir(t *testing.T, files map[string]string) string {
	d := t.TempDir()
	for name, p := range files {
		if err := os.Symlink(p, filepath.Join(d, name)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestSharedTokenizersReference encodes llama.cpp's tokenizer test strings,
// swift-transformers' vectors and its multilingual and emoji set with every real
// tokenizer of shared/tokenizers that has reference ids, and wants those ids exactly.
func TestSharedTokenizersReference(t *testing.T) {
	dir := sharedTokenizers(t)
	sh := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	llamaCpp := func(name string) func(t *testing.T) []idCase {
		return func(t *testing.T) []idCase {
			return llamaCppCases(t, sh("llamacpp", "ggml-vocab-"+name+".gguf.inp"), sh("llamacpp", "ggml-vocab-"+name+".gguf.out"))
		}
	}
	swift := sh("testvectors_swift_transformers")
	llama3 := func(t *testing.T) (Tokenizer, error) {
		cfg := sh("llama3", "Llama-3.2-3B-Instruct")
		return Load(linkDir(t, map[string]string{
			"tokenizer.model":         sh("llama3", "tokenizer.model"),
			"tokenizer_config.json":   filepath.Join(cfg, "tokenizer_config.json"),
			"special_tokens_map.json": filepath.Join(cfg, "special_tokens_map.json"),
			"generation_config.json":  filepath.Join(cfg, "generation_config.json"),
		}))
	}
	qwen25 := func(t *testing.T) (Tokenizer, error) { return Load(sh("qwen", "Qwen2.5-7B-Instruct")) }
	qwen3 := func(t *testing.T) (Tokenizer, error) {
		return Load(linkDir(t, map[string]string{
			"vocab.json":             sh("qwen", "Qwen2.5-7B-Instruct", "vocab.json"), // byte-identical to Qwen3's
			"merges.txt":             sh("qwen", "Qwen2.5-7B-Instruct", "merges.txt"),
			"tokenizer_config.json":  sh("qwen", "Qwen3-4B", "tokenizer_config.json"),
			"generation_config.json": sh("qwen", "Qwen3-4B", "generation_config.json"),
		}))
	}
	phi3JSON := func(t *testing.T) (Tokenizer, error) { return Load(sh("phi3", "Phi-3-mini-4k-instruct")) }
	// Phi-3's tokenizer.model is byte for byte Llama 2's (README: same sha256).
	llama2SPM := func(t *testing.T) (Tokenizer, error) {
		return LoadSentencePiece(sh("phi3", "Phi-3-mini-4k-instruct", "tokenizer.model"))
	}
	for _, tc := range []struct {
		name  string
		load  func(t *testing.T) (Tokenizer, error)
		cases func(t *testing.T) []idCase
	}{
		{"llama3-tiktoken/llama-bpe", llama3, llamaCpp("llama-bpe")},
		{"llama3-tiktoken/swift-llama3.2", llama3, func(t *testing.T) []idCase {
			return swiftEncodedCase(t, filepath.Join(swift, "llama_3.2_encoded.json"))
		}},
		{"llama3-tiktoken/swift-tests", llama3, func(t *testing.T) []idCase {
			return swiftTokenizerTests(t, filepath.Join(swift, "tokenizer_tests.json"), "pcuenq/Llama-3.2-1B-Instruct-tokenizer")
		}},
		{"qwen2.5-vocab-merges/qwen2", qwen25, llamaCpp("qwen2")},
		{"qwen2.5-vocab-merges/multilingual", qwen25, func(t *testing.T) []idCase {
			return swiftMultilingual(t, filepath.Join(swift, "multilingual"), "Qwen__Qwen2.5-0.5B.json", false)
		}},
		{"qwen3-vocab-merges/qwen2", qwen3, llamaCpp("qwen2")},
		{"phi3-json/phi-3", phi3JSON, llamaCpp("phi-3")},
		{"phi3-spm/phi-3", llama2SPM, llamaCpp("phi-3")},
		{"llama2-spm/llama-spm", llama2SPM, llamaCpp("llama-spm")},
		{"llama2-spm/swift-llama", llama2SPM, func(t *testing.T) []idCase {
			return swiftEncodedCase(t, filepath.Join(swift, "llama_encoded.json"))
		}},
		{"llama2-spm/swift-tests", llama2SPM, func(t *testing.T) []idCase {
			return swiftTokenizerTests(t, filepath.Join(swift, "tokenizer_tests.json"), "coreml-projects/Llama-2-7b-chat-coreml")
		}},
		{"llama2-spm/multilingual", llama2SPM, func(t *testing.T) []idCase {
			return swiftMultilingual(t, filepath.Join(swift, "multilingual"), "TinyLlama__TinyLlama-1.1B-Chat-v1.0.json", true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := tc.load(t)
			if err != nil {
				t.Fatal(err)
			}
			checkIDs(t, tok, tc.cases(t))
		})
	}
}

// checkIDs wants the reference ids of every case, and logs how many are equal.
func checkIDs(t *testing.T, tok Tokenizer, cases []idCase) {
	t.Helper()
	equal := 0
	for _, c := range cases {
		got, err := tok.Encode(c.text, c.bos)
		if err != nil {
			t.Errorf("Encode(%q): %v", c.text, err)
			continue
		}
		if !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q, %v)\n got %v\nwant %v", c.text, c.bos, got, c.ids)
			continue
		}
		equal++
	}
	t.Logf("%d/%d cases equal", equal, len(cases))
}
