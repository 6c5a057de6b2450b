package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lowbit/gguf"
	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
)

// exportGGUF writes dir's tokenizer as a GGUF file of metadata only and
// parses it.
func exportGGUF(t *testing.T, dir string, vocab int) *gguf.File {
	t.Helper()
	kvs, _, err := GGUFMetadata(dir, vocab)
	if err != nil {
		t.Fatal(err)
	}
	b, err := gguf.Marshal(kvs, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGGUFMetadataStoriesAsLlamaCpp: the vocabulary of stories260K-hf
// written by lowbit is the one llama.cpp's converter wrote into
// stories260K-f32.gguf, key for key.
func TestGGUFMetadataStoriesAsLlamaCpp(t *testing.T) {
	want, err := gguf.Open(testmodels.GGUF(t, "stories260K-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got := exportGGUF(t, testmodels.Path(t, "stories260K-hf"), 512)
	for _, key := range []string{ggufModelKey, ggufPreKey, ggufTokensKey, ggufScoresKey, ggufTypesKey, ggufBOSKey, ggufEOSKey, ggufAddBOSKey} {
		w, ok1 := want.Value(key)
		g, ok2 := got.Value(key)
		if !ok1 || !ok2 {
			t.Errorf("key %s: in llama.cpp's file %v, in lowbit's %v", key, ok1, ok2)
			continue
		}
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			t.Errorf("key %s differs from llama.cpp's", key)
		}
	}
}

// TestGGUFMetadataRoundTrip writes the tokenizers of real and fixture
// models as GGUF metadata and reads them back: the GGUF tokenizer has the
// same vocabulary size (padded to the model's rows), special ids, add_bos
// and chat template, and encodes and decodes test texts as the directory's
// tokenizer does (SentencePiece vocabularies except on runs of spaces,
// which llama.cpp keeps where HF's tokenizers remove them).
func TestGGUFMetadataRoundTrip(t *testing.T) {
	fixtureDir := func(arch string) func(t *testing.T) string {
		return func(t *testing.T) string {
			d := t.TempDir()
			s := fixture.Llama()
			s.Arch, s.Vocab, s.Chat = arch, 120, true
			if err := s.Write(d); err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	shared := func(p ...string) func(t *testing.T) string {
		return func(t *testing.T) string {
			d := filepath.Join(append([]string{sharedTokenizers(t)}, p...)...)
			if _, err := os.Stat(d); err != nil {
				t.Skipf("skipping: %s is not present", d)
			}
			return d
		}
	}
	model := func(p string) func(t *testing.T) string {
		return func(t *testing.T) string { return testmodels.Path(t, p) }
	}
	llama3 := func(t *testing.T) string {
		sh := sharedTokenizers(t)
		cfg := filepath.Join(sh, "llama3", "Llama-3.2-3B-Instruct")
		return linkDir(t, map[string]string{
			"tokenizer.model":         filepath.Join(sh, "llama3", "tokenizer.model"),
			"tokenizer_config.json":   filepath.Join(cfg, "tokenizer_config.json"),
			"special_tokens_map.json": filepath.Join(cfg, "special_tokens_map.json"),
			"generation_config.json":  filepath.Join(cfg, "generation_config.json"),
		})
	}
	texts := []string{"Once upon a time, there was a little girl named Lily.", "Hello\nworld", "日本語 🦙 and 3.14159",
		"<|im_start|>user\nhi<|im_end|>", "don't STOP 1234567", "a\tb", ""}
	for _, tc := range []struct {
		name  string
		dir   func(t *testing.T) string
		extra int // rows past the tokenizer's vocabulary
		kind  string
	}{
		{"fixture-llama3-chat", fixtureDir("LlamaForCausalLM"), 8, "llama"},
		{"fixture-chatml", fixtureDir("Qwen2ForCausalLM"), 0, "llama"},
		{"fixture-gemma", fixtureDir("GemmaForCausalLM"), 3, "llama"},
		{"stories260K", model("stories260K-hf"), 0, "llama"},
		{"tinyllama-tokenizer.json", model("llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0"), 0, "llama"},
		{"phi3-mini", shared("phi3", "Phi-3-mini-4k-instruct"), 64, "llama"},
		{"llama3-tiktoken", llama3, 0, "gpt2"},
		{"qwen2.5-vocab-merges", shared("qwen", "Qwen2.5-7B-Instruct"), 0, "gpt2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			hf, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			f := exportGGUF(t, dir, hf.VocabSize()+tc.extra)
			if kind, _ := f.String(ggufModelKey); kind != tc.kind {
				t.Errorf("tokenizer.ggml.model %q, want %q", kind, tc.kind)
			}
			g, err := LoadGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if g.VocabSize() != hf.VocabSize()+tc.extra || g.BOS() != hf.BOS() || g.EOS() != hf.EOS() || AddBOS(g) != AddBOS(hf) {
				t.Errorf("gguf: vocab %d bos %d eos %d add_bos %v; dir: vocab %d (+%d) bos %d eos %d add_bos %v",
					g.VocabSize(), g.BOS(), g.EOS(), AddBOS(g), hf.VocabSize(), tc.extra, hf.BOS(), hf.EOS(), AddBOS(hf))
			}
			for _, id := range hf.EOSIDs() {
				if !slices.Contains(g.EOSIDs(), id) {
					t.Errorf("end-of-generation id %d (%q) of the directory is not the GGUF's (%v)", id, hf.Piece(id), g.EOSIDs())
				}
			}
			for id := range hf.VocabSize() {
				if g.Piece(id) != hf.Piece(id) {
					t.Errorf("piece %d: gguf %q, dir %q", id, g.Piece(id), hf.Piece(id))
					break
				}
			}
			if tpl, err := LoadChatTemplate(dir); err != nil {
				t.Fatal(err)
			} else if src, _ := f.String(ggufTemplateKey); tpl != nil && src != tpl.Source {
				t.Errorf("chat template %q, want %q", src, tpl.Source)
			}
			unk, _ := f.Int(ggufUnkKey)
			for _, s := range texts {
				// Runs of spaces: llama.cpp keeps them where HF removes them.
				// Special tokens in text: lowbit's GGUF SentencePiece reader
				// does not parse them (llama.cpp does, when asked).
				if tc.kind == "llama" && (strings.Contains(s, "  ") || strings.HasPrefix(s, " ") || strings.Contains(s, "<|")) {
					continue
				}
				want, err := hf.Encode(s, false)
				if err != nil {
					t.Fatal(err)
				}
				got, err := g.Encode(s, false)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("Encode(%q): gguf %v, dir %v", s, got, want)
				}
				// llama.cpp shows an unknown token as ▅, HF's decoders drop it.
				if d, w := g.Decode(got), hf.Decode(want); d != w && !slices.Contains(got, int(unk)) {
					t.Errorf("Decode(%v): gguf %q, dir %q", got, d, w)
				}
			}
		})
	}
}

// TestGGUFMetadataRefuses: a tokenizer with more tokens than the model has
// rows cannot be written.
func TestGGUFMetadataRefuses(t *testing.T) {
	d := t.TempDir()
	s := fixture.Llama()
	if err := s.Write(d); err != nil {
		t.Fatal(err)
	}
	hf, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := GGUFMetadata(d, hf.VocabSize()-1); err == nil || !strings.Contains(err.Error(), "more than the model's") {
		t.Errorf("error %v", err)
	}
}
