package tokenizer

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSharedTokenizerSpecials checks the special tokens, BOS, the several EOS ids and
// add_bos of the byte-level vocabularies without tokenizer.json, and that text decodes back.
func TestSharedTokenizerSpecials(t *testing.T) {
	dir := sharedTokenizers(t)
	sh := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	llama3Cfg := func(name string) string { return sh("llama3", "Llama-3.2-3B-Instruct", name) }
	for _, tc := range []struct {
		name    string
		files   map[string]string
		bos     int
		eos     int
		eosIDs  []int // each must be among EOSIDs
		addBOS  bool
		text    string
		wantIDs []int
	}{
		{"llama3 tokenizer.model as Meta ships it", map[string]string{"tokenizer.model": sh("llama3", "tokenizer.model")},
			128000, 128001, []int{128001, 128008, 128009}, true,
			"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|image|><|reserved_special_token_245|>", []int{128006, 882, 128007, 271, 13347, 128009, 128011, 128255}},
		{"llama3 tokenizer.model with Llama-3.2-3B-Instruct's configs", map[string]string{
			"tokenizer.model":         sh("llama3", "tokenizer.model"),
			"tokenizer_config.json":   llama3Cfg("tokenizer_config.json"),
			"special_tokens_map.json": llama3Cfg("special_tokens_map.json"),
			"generation_config.json":  llama3Cfg("generation_config.json"),
		}, 128000, 128009, []int{128001, 128008, 128009}, true, "<|begin_of_text|>Hi<|reserved_special_token_3|><|reserved_special_token_247|>", []int{128000, 13347, 128011, 128255}},
		{"qwen2.5 vocab.json + merges.txt", map[string]string{
			"vocab.json":             sh("qwen", "Qwen2.5-7B-Instruct", "vocab.json"),
			"merges.txt":             sh("qwen", "Qwen2.5-7B-Instruct", "merges.txt"),
			"tokenizer_config.json":  sh("qwen", "Qwen2.5-7B-Instruct", "tokenizer_config.json"),
			"generation_config.json": sh("qwen", "Qwen2.5-7B-Instruct", "generation_config.json"),
		}, 151643, 151645, []int{151645, 151643}, false, "<|im_start|>user\nHi<|im_end|>", []int{151644, 872, 198, 13048, 151645}},
		{"qwen3 vocab.json + merges.txt", map[string]string{
			"vocab.json":            sh("qwen", "Qwen2.5-7B-Instruct", "vocab.json"),
			"merges.txt":            sh("qwen", "Qwen2.5-7B-Instruct", "merges.txt"),
			"tokenizer_config.json": sh("qwen", "Qwen3-4B", "tokenizer_config.json"),
		}, -1, 151645, []int{151645, 151643}, false, "<think>\n</think>", []int{151667, 198, 151668}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Load(linkDir(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if tok.BOS() != tc.bos || tok.EOS() != tc.eos || AddBOS(tok) != tc.addBOS {
				t.Errorf("BOS %d EOS %d AddBOS %v, want %d %d %v", tok.BOS(), tok.EOS(), AddBOS(tok), tc.bos, tc.eos, tc.addBOS)
			}
			for _, id := range tc.eosIDs {
				if !slices.Contains(tok.EOSIDs(), id) {
					t.Errorf("EOSIDs %v lacks %d", tok.EOSIDs(), id)
				}
			}
			got, err := tok.Encode(tc.text, false)
			if err != nil || !slices.Equal(got, tc.wantIDs) {
				t.Errorf("Encode(%q) = %v, %v; want %v", tc.text, got, err, tc.wantIDs)
			}
			const plain = "Grüße, 世界! 🦙🦙 e\u0301 — 12345\n\n\tend "
			ids, err := tok.Encode(plain, false)
			if err != nil {
				t.Fatal(err)
			}
			want := plain
			if strings.HasPrefix(tc.name, "qwen") {
				want = strings.ReplaceAll(plain, "e\u0301", "\u00e9") // NFC
			}
			if dec := tok.Decode(ids); dec != want {
				t.Errorf("Decode(Encode(%q)) = %q, want %q", plain, dec, want)
			}
		})
	}
}

// tiktokenFile writes ranks in tiktoken's format: every byte, then extra tokens.
func tiktokenFile(extra ...string) string {
	var sb strings.Builder
	rank := 0
	for c := 0; c < 256; c++ {
		fmt.Fprintf(&sb, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(c)}), rank)
		rank++
	}
	for _, e := range extra {
		fmt.Fprintf(&sb, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(e)), rank)
		rank++
	}
	return sb.String()
}

// TestLoadRefusesBadVocabularyFiles: a broken tiktoken file, vocab.json, merges.txt or
// added_tokens_decoder ends in an error naming the file and the line or entry.
func TestLoadRefusesBadVocabularyFiles(t *testing.T) {
	good := tiktokenFile("ab")
	qwenCfg := `{"tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": {"5": {"content": "<|x|>", "special": true}}}`
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // after "tokenizer: <dir>/"
	}{
		{"tiktoken not base64", map[string]string{"tokenizer.model": "QQ== 0\nQQ 1\n"},
			`tokenizer.model: tiktoken: line 2: token "QQ" is not base64 of one or more bytes`},
		{"tiktoken rank out of range", map[string]string{"tokenizer.model": "QQ== 0\nQg== 7\n"},
			`tokenizer.model: tiktoken: line 2: rank "7" is not a number in 0..1 (the file has 2 tokens)`},
		{"tiktoken rank twice", map[string]string{"tokenizer.model": "QQ== 0\nQg== 0\n"},
			`tokenizer.model: tiktoken: line 2: rank 0 given twice`},
		{"tiktoken three fields", map[string]string{"tokenizer.model": "QQ== 0 x\n"},
			`tokenizer.model: tiktoken: line 1: "QQ== 0 x" is not "base64-token rank"`},
		{"tiktoken long token", map[string]string{"tokenizer.model": tiktokenFile(strings.Repeat("x", 300))},
			`tokenizer.model: tiktoken: line 257: token of 300 bytes is over the 256-byte limit`},
		{"tiktoken too large", map[string]string{"tokenizer.model": "QQ== 0\n" + strings.Repeat("\n", maxTiktokenSize)},
			`tokenizer.model: tiktoken: 16777223 bytes is over the 16 MiB limit of a tiktoken file`},
		{"tiktoken missing byte", map[string]string{"tokenizer.model": "QQ== 0\n"},
			`tokenizer.model: tiktoken: no token for the byte 0x00 (every byte needs one)`},
		{"tiktoken not Llama 3", map[string]string{"tokenizer.model": good},
			`tokenizer.model: tiktoken: 257 ranks: only Llama 3's tiktoken file (128000 ranks) is known`},
		{"vocab.json not an object", map[string]string{"vocab.json": `[1]`, "merges.txt": ""},
			`vocab.json (with `},
		{"vocab.json negative id", map[string]string{"vocab.json": `{"a": -1}`, "merges.txt": ""},
			`vocab.json (with %s/tokenizer_config.json's added tokens): vocab entry "a" has id -1 out of range`},
		{"merges.txt one token", map[string]string{"vocab.json": `{"a": 0, "b": 1, "ab": 2}`, "merges.txt": "#version: 0.2\na b\nab\n"},
			`merges.txt: line 3: "ab" is not two tokens separated by a space`},
		{"merges.txt unknown token", map[string]string{"vocab.json": `{"a": 0, "b": 1, "ab": 2}`, "merges.txt": "a b\n\nb a\n"},
			`merges.txt: line 3: merge ("b", "a"): token not in the vocab`},
		{"added_tokens_decoder bad key", map[string]string{"vocab.json": `{"a": 0}`, "merges.txt": "",
			"tokenizer_config.json": `{"added_tokens_decoder": {"x": {"content": "<|x|>"}}}`},
			`tokenizer_config.json: added_tokens_decoder: key "x" is not an id`},
		{"unknown tokenizer_class", map[string]string{"vocab.json": `{"a": 0}`, "merges.txt": "",
			"tokenizer_config.json": `{"tokenizer_class": "BertTokenizer"}`},
			`tokenizer_config.json: tokenizer_class "BertTokenizer" is not supported with vocab.json + merges.txt (only GPT2Tokenizer and Qwen2Tokenizer)`},
		{"merges.txt without vocab.json", map[string]string{"merges.txt": "a b\n", "tokenizer_config.json": qwenCfg},
			`has none of tokenizer.json, tokenizer.model, vocab.json with merges.txt`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(d)
			want := d + "/" + strings.ReplaceAll(tc.want, "%s", d)
			if strings.HasPrefix(tc.want, "has none") {
				want = d + " " + tc.want
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, want)
			}
		})
	}
}

// TestVocabMergesGPT2 checks a small GPT-2 style vocabulary end to end: ranks, added
// tokens from tokenizer_config.json, add_prefix_space.
func TestVocabMergesGPT2(t *testing.T) {
	d := t.TempDir()
	files := map[string]string{
		"vocab.json":            `{"H": 0, "i": 1, "Ġ": 2, "Hi": 3, "ĠH": 4, "ĠHi": 5, "!": 6}`,
		"merges.txt":            "#version: 0.2\nH i\nĠ H\nĠH i\nĠ Hi\n",
		"tokenizer_config.json": `{"add_prefix_space": true, "added_tokens_decoder": {"7": {"content": "<|endoftext|>", "special": true}}, "eos_token": "<|endoftext|>"}`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	// " H" + "i" is ranked before " " + "Hi": add_prefix_space makes "Hi" " Hi".
	got, err := tok.Encode("Hi!<|endoftext|>", false)
	if want := []int{5, 6, 7}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Encode = %v, %v; want %v", got, err, want)
	}
	if tok.EOS() != 7 || !slices.Equal(tok.EOSIDs(), []int{7}) || AddBOS(tok) {
		t.Errorf("EOS %d EOSIDs %v AddBOS %v, want 7 [7] false", tok.EOS(), tok.EOSIDs(), AddBOS(tok))
	}
	if dec := tok.Decode(got); dec != " Hi!" {
		t.Errorf("Decode = %q, want %q", dec, " Hi!")
	}
}

// fuzzEncode encodes a few strings with m; ids must be in the vocabulary and decode to
// valid UTF-8, and ids outside it must decode without a crash.
func fuzzEncode(t *testing.T, m *hfModel) {
	m.Decode([]int{-1, 0, 1, 1 << 30})
	for _, s := range []string{"", "Hello world", " a  b\n", "日本🦙 123456", "<x>a<x>", "<|x|>a<|x|>", "\xff"} {
		ids, err := m.Encode(s, true)
		if err != nil {
			continue
		}
		for _, id := range ids {
			if id < 0 || id >= m.VocabSize() {
				t.Fatalf("Encode(%q) gave id %d outside the vocab (%d)", s, id, m.VocabSize())
			}
		}
		if out := m.Decode(ids); !utf8.ValidString(out) {
			t.Fatalf("Decode gave invalid UTF-8 %q", out)
		}
	}
}

func FuzzTiktoken(f *testing.F) {
	f.Add([]byte(tiktokenFile("ab", "abc", " world", "12")))
	f.Add([]byte(tiktokenFile("\xe6\x97", "\xe6\x97\xa5")))
	f.Add([]byte("QQ== 0\r\nQg== 1\r\n"))
	f.Add([]byte("QQ== 0\nQQ== 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseTiktoken(b, nil); err == nil {
			t.Fatal("a file that is not Llama 3's was accepted")
		}
		tokens, err := parseTiktokenRanks(b)
		if err != nil {
			return
		}
		m, err := tiktokenModel(tokens, []hfAdded{{ID: len(tokens), Content: "<|x|>", Special: true}}, wordMatcher{llama3: true, digits: 3})
		if err != nil {
			return
		}
		fuzzEncode(t, m)
	})
}

func FuzzVocabMerges(f *testing.F) {
	f.Add([]byte(`{"H": 0, "i": 1, "Ġ": 2, "Hi": 3, "ĠH": 4, "ĠHi": 5}`), []byte("#version: 0.2\nH i\nĠ H\nĠH i\n"), false)
	f.Add([]byte(`{"a": 0, "b": 1, "ab": 2, "<|x|>": 3}`), []byte("a b\n\n  \nab ab\n"), true)
	f.Add([]byte(`{"a": 16777216}`), []byte("a a a\n"), false)
	f.Fuzz(func(t *testing.T, vocab, merges []byte, qwen bool) {
		m, err := parseVocabJSON(vocab, []hfAdded{{ID: 3, Content: "<|x|>", Special: true}})
		if err != nil {
			return
		}
		if err := m.parseMergesText(merges); err != nil {
			return
		}
		class := "GPT2Tokenizer"
		if qwen {
			class = "Qwen2Tokenizer"
		}
		pattern, nfc, err := vocabMergesFlavor(class)
		if err != nil {
			t.Fatal(err)
		}
		m.setByteLevel(pattern, nfc)
		m.finish()
		fuzzEncode(t, m)
	})
}
