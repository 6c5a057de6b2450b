package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/testmodels"
)

const testdata = "../testdata/tokenizer"

type refCase struct {
	IDs        []int  `json:"ids"`
	Decoded    string `json:"decoded"`
	IDsSpecial []int  `json:"ids_special"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func refStrings(t testing.TB) []string {
	var s []string
	readJSON(t, filepath.Join(testdata, "strings.json"), &s)
	return s
}

// checkRef compares encode (and decode, and streaming decode) with the reference ids.
func checkRef(t *testing.T, tok Tokenizer, refName string) {
	strs := refStrings(t)
	var ref struct {
		Cases []refCase `json:"cases"`
	}
	readJSON(t, filepath.Join(testdata, "ref_"+refName+".json"), &ref)
	if len(ref.Cases) != len(strs) {
		t.Fatalf("%s: %d cases for %d strings", refName, len(ref.Cases), len(strs))
	}
	bad := 0
	for i, s := range strs {
		c := ref.Cases[i]
		got, err := tok.Encode(s, false)
		if err != nil {
			t.Errorf("%s: Encode(%q): %v", refName, s, err)
			continue
		}
		if !slices.Equal(got, c.IDs) {
			bad++
			if bad <= 10 {
				t.Errorf("%s: Encode(%q)\n got %v\nwant %v", refName, s, got, c.IDs)
			}
		}
		if c.IDsSpecial != nil {
			got, err := tok.Encode(s, true)
			if err != nil || !slices.Equal(got, c.IDsSpecial) {
				t.Errorf("%s: Encode(%q, addBOS) = %v, %v; want %v", refName, s, got, err, c.IDsSpecial)
			}
		}
		dec := decodeKeepSpecial(tok, c.IDs)
		if dec != c.Decoded {
			t.Errorf("%s: Decode(%v) = %q, want %q", refName, c.IDs, dec, c.Decoded)
		}
		var sb strings.Builder
		d := newDecoderKeepSpecial(tok)
		for _, id := range c.IDs {
			sb.WriteString(d.Next(id))
		}
		sb.WriteString(d.Flush())
		if sb.String() != dec {
			t.Errorf("%s: streaming decode of %v = %q, want %q", refName, c.IDs, sb.String(), dec)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d strings differ", refName, bad, len(strs))
	}
}

func TestSentencePieceReference(t *testing.T) {
	dir := testmodels.Dir(t)
	for _, tc := range []struct{ ref, path string }{
		{"llama2_spm", filepath.Join(dir, "llama2-tokenizer/tokenizer.model")},
		{"tok512_spm", filepath.Join(dir, "stories260K/tok512.model")},
		{"spm_nodummy", filepath.Join(testdata, "spm_nodummy.model")},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			tok, err := LoadSentencePiece(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			checkRef(t, tok, tc.ref)
		})
	}
}

func TestLlamaVocabTests(t *testing.T) {
	dir := testmodels.Dir(t)
	cases := llamaCppCases(t, filepath.Join(dir, "llama-vocab-tests/ggml-vocab-llama-spm.gguf.inp"),
		filepath.Join(dir, "llama-vocab-tests/ggml-vocab-llama-spm.gguf.out"))
	for _, tc := range []struct {
		name string
		load func() (Tokenizer, error)
	}{
		{"tokenizer.model", func() (Tokenizer, error) {
			return LoadSentencePiece(filepath.Join(dir, "llama2-tokenizer/tokenizer.model"))
		}},
		{"tokenizer.json", func() (Tokenizer, error) {
			return LoadHFJSON(filepath.Join(dir, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0/tokenizer.json"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := tc.load()
			if err != nil {
				t.Fatal(err)
			}
			checkIDs(t, tok, cases)
		})
	}
}

func TestHFJSONReference(t *testing.T) {
	tinyllama := func(t *testing.T) string {
		return testmodels.Path(t, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0/tokenizer.json")
	}
	for _, tc := range []struct {
		ref  string
		load func(t *testing.T) (Tokenizer, error)
	}{
		{"tinyllama_hf", func(t *testing.T) (Tokenizer, error) { return LoadHFJSON(tinyllama(t)) }},
		{"tinyllama_metaspace", func(t *testing.T) (Tokenizer, error) {
			// gen.py's variant: the same vocab with the newer Metaspace pre-tokenizer.
			var f map[string]any
			readJSON(t, tinyllama(t), &f)
			f["normalizer"] = nil
			f["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}
			b, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			return parseHFJSON(b)
		}},
		{"bytelevel_llama3", func(t *testing.T) (Tokenizer, error) {
			return LoadHFJSON(filepath.Join(testdata, "bytelevel_llama3.json"))
		}},
		{"bytelevel_gpt2", func(t *testing.T) (Tokenizer, error) {
			return LoadHFJSON(filepath.Join(testdata, "bytelevel_gpt2.json"))
		}},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			tok, err := tc.load(t)
			if err != nil {
				t.Fatal(err)
			}
			checkRef(t, tok, tc.ref)
		})
	}
}
