package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"lowbit/internal/testmodels"
)

func TestStories260KGolden(t *testing.T) {
	dir := testmodels.Dir(t)
	text, err := os.ReadFile(filepath.Join(dir, "stories260K/expected_greedy_200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Prompt    []int `json:"prompt_tokens"`
		Generated []int `json:"generated_tokens"`
	}
	readJSON(t, filepath.Join(dir, "stories260K/expected_greedy_200_tokens.json"), &golden)
	if len(golden.Generated) != 200 || !slices.Equal(golden.Prompt, []int{1}) {
		t.Fatalf("unexpected golden file: prompt %v, %d generated", golden.Prompt, len(golden.Generated))
	}
	for _, path := range []string{"stories260K/tok512.model", "stories260K-hf"} {
		t.Run(path, func(t *testing.T) {
			var tok Tokenizer
			if strings.HasSuffix(path, ".model") {
				tok, err = LoadSentencePiece(filepath.Join(dir, path))
			} else {
				tok, err = Load(filepath.Join(dir, path))
			}
			if err != nil {
				t.Fatal(err)
			}
			// The generation started from BOS alone: encoding the text without BOS gives
			// the generated ids, with BOS the prompt followed by them.
			got, err := tok.Encode(string(text), false)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, golden.Generated) {
				t.Errorf("Encode:\n got %v\nwant %v", got, golden.Generated)
			}
			got, _ = tok.Encode(string(text), true)
			if !slices.Equal(got, append([]int{1}, golden.Generated...)) {
				t.Errorf("Encode with BOS starts %v", got[:min(3, len(got))])
			}
			if dec := tok.Decode(append([]int{1}, golden.Generated...)); dec != string(text) {
				t.Errorf("Decode:\n got %q\nwant %q", dec, text)
			}
			var sb strings.Builder
			d := NewDecoder(tok)
			for _, id := range append([]int{1}, golden.Generated...) {
				sb.WriteString(d.Next(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != string(text) {
				t.Errorf("streaming decode:\n got %q\nwant %q", sb.String(), text)
			}
		})
	}
}

func TestReadmeSamples(t *testing.T) {
	dir := testmodels.Dir(t)
	spm, err := LoadSentencePiece(filepath.Join(dir, "llama2-tokenizer/tokenizer.model"))
	if err != nil {
		t.Fatal(err)
	}
	hf, err := Load(filepath.Join(dir, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		ids  []int
	}{
		{"Hello world", []int{15043, 3186}},
		{" Hello world", []int{29871, 15043, 3186}},
		{"Once upon a time, there was a little girl named Lily.", []int{9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354, 29889}},
		{"", nil},
	} {
		for name, tok := range map[string]Tokenizer{"spm": spm, "hf": hf} {
			got, err := tok.Encode(tc.text, false)
			if err != nil || !slices.Equal(got, tc.ids) {
				t.Errorf("%s: Encode(%q) = %v, %v; want %v", name, tc.text, got, err, tc.ids)
			}
			got, _ = tok.Encode(tc.text, true)
			if !slices.Equal(got, append([]int{1}, tc.ids...)) {
				t.Errorf("%s: Encode(%q, BOS) = %v", name, tc.text, got)
			}
			if dec := tok.Decode(append([]int{1}, tc.ids...)); dec != tc.text {
				t.Errorf("%s: Decode = %q, want %q", name, dec, tc.text)
			}
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := testmodels.Dir(t)
	tl, err := Load(filepath.Join(dir, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if tl.BOS() != 1 || tl.EOS() != 2 || !slices.Equal(tl.EOSIDs(), []int{2}) || !AddBOS(tl) || tl.VocabSize() != 32000 {
		t.Errorf("TinyLlama: bos %d eos %d eosIDs %v addBOS %v vocab %d", tl.BOS(), tl.EOS(), tl.EOSIDs(), AddBOS(tl), tl.VocabSize())
	}
	if tl.Piece(15043) != "▁Hello" || tl.Piece(-1) != "" || tl.Piece(32000) != "" {
		t.Errorf("Piece: %q %q %q", tl.Piece(15043), tl.Piece(-1), tl.Piece(32000))
	}
	st, err := Load(filepath.Join(dir, "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	if st.BOS() != 1 || st.EOS() != 2 || !AddBOS(st) || st.VocabSize() != 512 {
		t.Errorf("stories260K: bos %d eos %d addBOS %v vocab %d", st.BOS(), st.EOS(), AddBOS(st), st.VocabSize())
	}

	// A Llama-3-style directory: BOS from the template, eos from the config, end-of-turn
	// ids from generation_config.json.
	tmp := t.TempDir()
	b, err := os.ReadFile(filepath.Join(testdata, "bytelevel_llama3.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmp, "tokenizer.json"), b, 0o644)
	os.WriteFile(filepath.Join(tmp, "tokenizer_config.json"), []byte(`{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}`), 0o644)
	os.WriteFile(filepath.Join(tmp, "generation_config.json"), []byte(`{"bos_token_id": 0, "eos_token_id": [1, 4]}`), 0o644)
	l3, err := Load(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if l3.BOS() != 0 || l3.EOS() != 4 || !slices.Equal(l3.EOSIDs(), []int{4, 1}) || !AddBOS(l3) {
		t.Errorf("llama3-style: bos %d eos %d eosIDs %v addBOS %v", l3.BOS(), l3.EOS(), l3.EOSIDs(), AddBOS(l3))
	}
	ids, err := l3.Encode("<|begin_of_text|>Hi<|eot_id|>", false)
	if err != nil || ids[0] != 0 || ids[len(ids)-1] != 4 {
		t.Errorf("special tokens in text: %v, %v", ids, err)
	}
	if got := l3.Decode(ids); got != "Hi" {
		t.Errorf("Decode leaves out special tokens: got %q", got)
	}

	// Errors name the file and the field.
	for _, tc := range []struct{ file, body, want string }{
		{"tokenizer.json", `{"model": {"type": "WordPiece", "vocab": {}}}`, "model.type"},
		{"tokenizer.json", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "NFKC"}}`, "normalizer"},
		{"tokenizer.json", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "BertPreTokenizer"}}`, "pre_tokenizer"},
		{"tokenizer.json", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`, "merges[0]"},
		{"tokenizer.json", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "WordPiece"}}`, "decoder"},
		{"tokenizer.json", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "post_processor": {"type": "Foo"}}`, "post_processor"},
		{"tokenizer.model", "\x0a\x03\x0a\x01a", "model_type"},
	} {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, tc.file), []byte(tc.body), 0o644)
		_, err := Load(d)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s %s: err = %v, want it to name %q", tc.file, tc.body, err, tc.want)
		}
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("empty dir: no error")
	}
}

// TestStreamingSplitsUTF8 decodes byte-fallback tokens one by one: nothing is printed
// until a character is complete.
func TestStreamingSplitsUTF8(t *testing.T) {
	tok, err := LoadSentencePiece(testmodels.Path(t, "llama2-tokenizer/tokenizer.model"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("🦙 ok 日本", false)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(tok)
	var parts []string
	for _, id := range ids {
		s := d.Next(id)
		if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
			t.Errorf("Next(%d) = %q: not whole characters", id, s)
		}
		parts = append(parts, s)
	}
	if got := strings.Join(parts, "") + d.Flush(); got != "🦙 ok 日本" {
		t.Errorf("streamed %q", got)
	}
	// An incomplete character at the end comes out as U+FFFD on Flush, as Decode does.
	cut := ids[:2] // ▁ and the first byte of 🦙
	d = NewDecoder(tok)
	got := d.Next(cut[0]) + d.Next(cut[1]) + d.Flush()
	if want := tok.Decode(cut); got != want {
		t.Errorf("truncated: streamed %q, Decode %q", got, want)
	}
}

func TestValidPrefix(t *testing.T) {
	for _, tc := range []struct {
		in            string
		perByte, subp string
	}{
		{"abc", "abc", "abc"},
		{"\xe4\xb8", "\uFFFD\uFFFD", "\uFFFD"},
		{"\xe4\xb8x", "\uFFFD\uFFFDx", "\uFFFDx"},
		{"\xff\xfe", "\uFFFD\uFFFD", "\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD", "\uFFFD\uFFFD\uFFFD"},
		{"\xf0\x9f\xa6\x99", "🦙", "🦙"},
	} {
		got, _ := validPrefix(nil, []byte(tc.in), true, true)
		if string(got) != tc.perByte {
			t.Errorf("perByte(%q) = %q, want %q", tc.in, got, tc.perByte)
		}
		got, _ = validPrefix(nil, []byte(tc.in), false, true)
		if string(got) != tc.subp {
			t.Errorf("subparts(%q) = %q, want %q", tc.in, got, tc.subp)
		}
	}
	if _, rest := validPrefix(nil, []byte("a\xf0\x9f"), true, false); string(rest) != "\xf0\x9f" {
		t.Errorf("rest = %q", rest)
	}
}

// TestWordMatcher checks the hand-written Llama-3, Qwen2 and GPT-2 splits on cases that
// exercise each alternative (the reference tests cover them against tokenizers too).
func TestWordMatcher(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		in      string
		want    []string
	}{
		{llama3Pattern, "Hello world", []string{"Hello", " world"}},
		{llama3Pattern, "I'M here", []string{"I", "'M", " here"}},
		{gpt2Pattern, "I'M here", []string{"I", "'", "M", " here"}},
		{llama3Pattern, "12345", []string{"123", "45"}},
		{qwen2Pattern, "12345", []string{"1", "2", "3", "4", "5"}},
		{qwen2Pattern, "I'M x2", []string{"I", "'M", " x", "2"}},
		{gpt2Pattern, "12345", []string{"12345"}},
		{llama3Pattern, "a  b", []string{"a", " ", " b"}},
		{llama3Pattern, "x \n\n y", []string{"x", " \n\n", " y"}},
		{llama3Pattern, "ok!!\n\nno", []string{"ok", "!!\n\n", "no"}},
		{llama3Pattern, "end   ", []string{"end", "   "}},
		{llama3Pattern, "\tword", []string{"\tword"}},
		{gpt2Pattern, "\tword", []string{"\t", "word"}},
	} {
		m, err := newMatcher(tc.pattern, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(wordMatcher); !ok {
			t.Fatalf("%q: got %T, want the hand-written matcher", tc.pattern, m)
		}
		got := splitBy(tc.in, m, "Isolated", false)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%.20s… %q: got %q, want %q", tc.pattern, tc.in, got, tc.want)
		}
	}
}

// TestDecoderPeek checks that Peek gives what Next then gives, and leaves
// the decoder as it was.
func TestDecoderPeek(t *testing.T) {
	tok, err := Load(filepath.Join(testmodels.Dir(t), "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("Once upon a time, caf\u00e9 \u2603", AddBOS(tok))
	if err != nil {
		t.Fatal(err)
	}
	peeking, plain := NewDecoder(tok), NewDecoder(tok)
	for _, id := range ids {
		for _, other := range []int{0, 5, id} {
			peeking.Peek(other)
		}
		want := peeking.Peek(id)
		if got, ref := peeking.Next(id), plain.Next(id); got != want || got != ref {
			t.Fatalf("token %d: Peek %q, Next %q, a decoder that never peeked %q", id, want, got, ref)
		}
	}
}
