package tokenizer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"lowbit/gguf"
	"lowbit/internal/testmodels"
)

// TestGGUFLlamaCppVocabs encodes llama.cpp's tokenizer test strings with the
// vocabulary-only GGUF files of llama.cpp's tests and wants the ids of its
// .out files (what llama.cpp's test-tokenizer-0 checks).
func TestGGUFLlamaCppVocabs(t *testing.T) {
	dir := filepath.Join(sharedTokenizers(t), "llamacpp")
	for _, name := range []string{"llama-spm", "phi-3", "gpt-2"} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, "ggml-vocab-"+name+".gguf")
			if _, err := os.Stat(p); err != nil {
				t.Skipf("skipping: %s is not present", p)
			}
			tok, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			checkIDs(t, tok, llamaCppCases(t, p+".inp", p+".out"))
		})
	}
}

// TestGGUFStoriesTokenizer: the tokenizer llama.cpp's converter wrote into
// stories260K-f32.gguf gives the ids of the HF directory it was converted
// from, with the same BOS, EOS and add_bos. Except on runs of spaces:
// tok512.model removes extra whitespace, which GGUF has no key for and
// llama.cpp never does for a SentencePiece vocabulary; there the GGUF
// tokenizer keeps every space (Decode gives the text back).
func TestGGUFStoriesTokenizer(t *testing.T) {
	g, err := Load(testmodels.GGUF(t, "stories260K-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	hf, err := Load(testmodels.Path(t, "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	if g.VocabSize() != hf.VocabSize() || g.BOS() != hf.BOS() || g.EOS() != hf.EOS() || AddBOS(g) != AddBOS(hf) ||
		!slices.Equal(g.EOSIDs(), hf.EOSIDs()) {
		t.Fatalf("gguf: vocab %d bos %d eos %d add_bos %v eos ids %v; hf: %d %d %d %v %v",
			g.VocabSize(), g.BOS(), g.EOS(), AddBOS(g), g.EOSIDs(), hf.VocabSize(), hf.BOS(), hf.EOS(), AddBOS(hf), hf.EOSIDs())
	}
	texts := []string{"Once upon a time", "Once upon a time, there was a little girl named Lily.", "", " ", "  two  spaces ", "Hello\nworld\n\n", "日本語 🦙", "\xff"}
	inp := filepath.Join(filepath.Dir(testmodels.Dir(t)), "tokenizers", "llamacpp", "ggml-vocab-llama-spm.gguf.inp")
	if b, err := os.ReadFile(inp); err == nil {
		texts = append(texts, strings.Split(string(b), "\n__ggml_vocab_test__\n")...)
	} else {
		t.Logf("%s is not present; only this test's own sentences", inp)
	}
	same := 0
	for _, s := range texts {
		if strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") || strings.Contains(s, "  ") {
			ids, err := g.Encode(s, false)
			if err != nil {
				t.Fatal(err)
			}
			if d := g.Decode(ids); d != s {
				t.Errorf("Decode(Encode(%q)) = %q", s, d)
			}
			continue
		}
		same++
		for _, bos := range []bool{false, true} {
			want, err := hf.Encode(s, bos)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Encode(s, bos)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Encode(%q, %v): gguf %v, hf %v", s, bos, got, want)
			}
			if d, w := g.Decode(got), hf.Decode(want); d != w {
				t.Errorf("Decode(%v): gguf %q, hf %q", got, d, w)
			}
		}
	}
	t.Logf("%d of %d texts compared with the HF tokenizer; the others have runs of spaces", same, len(texts))
}

// ggufKV is one metadata entry of a test's vocabulary: a key and a Go
// value gguf.ValueOf takes.
type ggufKV struct {
	Key string
	Val any
}

// ggufTok is metadata of a tiny vocabulary and the tokenizer GGUF it makes.
type ggufTok []ggufKV

func (k ggufTok) bytes(t testing.TB) []byte {
	kvs := make([]gguf.KV, len(k))
	for i, kv := range k {
		v, err := gguf.ValueOf(kv.Val)
		if err != nil {
			t.Fatal(err)
		}
		kvs[i] = gguf.KV{Key: kv.Key, Value: v}
	}
	b, err := gguf.Marshal(kvs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// set replaces (or adds) key; a nil v removes it.
func (k ggufTok) set(key string, v any) ggufTok {
	out := slices.DeleteFunc(slices.Clone(k), func(kv ggufKV) bool { return kv.Key == key })
	if v != nil {
		out = append(out, ggufKV{Key: key, Val: v})
	}
	return out
}

// tinySPM is a SentencePiece vocabulary with every byte piece: <unk>, <s>,
// </s>, the bytes, then pieces of "hello world" and a user-defined <sep>.
func tinySPM() ggufTok {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	for _, p := range []string{"▁", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "llo", "hello", "▁hello", "▁w", "or", "▁wor", "▁world", "<sep>"} {
		tokens = append(tokens, p)
		types = append(types, 1)
	}
	types[len(types)-1] = 4
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i)
	}
	return ggufTok{
		{Key: "general.architecture", Val: "llama"},
		{Key: ggufModelKey, Val: "llama"},
		{Key: ggufTokensKey, Val: tokens},
		{Key: ggufScoresKey, Val: scores},
		{Key: ggufTypesKey, Val: types},
		{Key: ggufBOSKey, Val: uint32(1)},
		{Key: ggufEOSKey, Val: uint32(2)},
	}
}

// tinyBPE is a byte-level BPE vocabulary (GPT-2's pre-tokenizer): every byte
// in GPT-2's alphabet, a few merges, and the control tokens <|endoftext|> and
// <|eot_id|>.
func tinyBPE() ggufTok {
	b2u, _ := bytesToUnicode()
	var tokens []string
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(b2u[b]))
	}
	merges := []string{"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or"}
	for _, m := range merges {
		tokens = append(tokens, strings.ReplaceAll(m, " ", ""))
	}
	tokens = append(tokens, "<|endoftext|>", "<|eot_id|>")
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = 1
	}
	types[len(types)-1], types[len(types)-2] = 3, 3
	return ggufTok{
		{Key: ggufModelKey, Val: "gpt2"},
		{Key: ggufPreKey, Val: "gpt-2"},
		{Key: ggufTokensKey, Val: tokens},
		{Key: ggufTypesKey, Val: types},
		{Key: ggufMergesKey, Val: merges},
		{Key: ggufBOSKey, Val: uint32(len(tokens) - 2)},
		{Key: ggufEOSKey, Val: uint32(len(tokens) - 2)},
	}
}

func readGGUF(t testing.TB, b []byte) *gguf.File {
	t.Helper()
	f, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGGUFTiny builds tokenizers of small vocabularies and checks what the
// keys say: ids, special ids, add_bos, add_eos, the space prefix.
func TestGGUFTiny(t *testing.T) {
	spm, bpe := tinySPM(), tinyBPE()
	nBPE := 256 + 7 + 2
	for _, tc := range []struct {
		name    string
		kvs     ggufTok
		text    string
		special bool
		want    []int
		bos     int
		addBOS  bool
		eosIDs  []int
	}{
		{"spm", spm, "hello wor", false, []int{271, 274}, 1, true, []int{2}},
		{"spm bos", spm, "hello wor", true, []int{1, 271, 274}, 1, true, []int{2}},
		// No ▁ in front, so "hello" is not "▁hello".
		{"spm no space prefix", spm.set(ggufAddSpaceKey, false), "hello", false, []int{270}, 1, true, []int{2}},
		// A character that no piece covers falls back to its bytes' pieces.
		{"spm bytes", spm, "hé", true, []int{1, 259, 260, 3 + 0xC3, 3 + 0xA9}, 1, true, []int{2}},
		{"spm user-defined", spm, "hello<sep>", false, []int{271, 276}, 1, true, []int{2}},
		{"spm no add_bos", spm.set(ggufAddBOSKey, false), "hello", false, []int{271}, 1, false, []int{2}},
		{"spm add_eos", spm.set(ggufAddEOSKey, true), "hello", true, []int{1, 271, 2}, 1, true, []int{2}},
		{"spm eot", spm.set(ggufEOTKey, uint32(0)), "", false, nil, 1, true, []int{2, 0}},
		{"spm defaults", spm.set(ggufBOSKey, nil).set(ggufEOSKey, nil).set(ggufTypesKey, nil).set(ggufScoresKey, nil), "", true, []int{1}, 1, true, []int{2}},
		{"bpe", bpe, "hello world", false, []int{259, 262, 'l', 'd'}, nBPE - 2, false, []int{nBPE - 2, nBPE - 1}},
		{"bpe special in text", bpe, "hello<|endoftext|>", false, []int{259, nBPE - 2}, nBPE - 2, false, []int{nBPE - 2, nBPE - 1}},
		{"bpe add_bos", bpe.set(ggufAddBOSKey, true), "hello", true, []int{nBPE - 2, 259}, nBPE - 2, true, []int{nBPE - 2, nBPE - 1}},
		// Llama 3's pattern: digits in threes, and BOS by default.
		{"bpe llama3", bpe.set(ggufPreKey, "llama-bpe"), "hello 123456", true, []int{nBPE - 2, 259, ' ', '1', '2', '3', '4', '5', '6'}, nBPE - 2, true, []int{nBPE - 2, nBPE - 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := LoadGGUF(readGGUF(t, tc.kvs.bytes(t)))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tok.Encode(tc.text, tc.special)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q, %v) = %v, want %v", tc.text, tc.special, got, tc.want)
			}
			if tok.BOS() != tc.bos || AddBOS(tok) != tc.addBOS || !slices.Equal(tok.EOSIDs(), tc.eosIDs) {
				t.Errorf("bos %d add_bos %v eos ids %v, want %d %v %v", tok.BOS(), AddBOS(tok), tok.EOSIDs(), tc.bos, tc.addBOS, tc.eosIDs)
			}
			if dec := tok.Decode(got); !tc.special && dec != tc.text && !strings.Contains(tc.text, "<") {
				t.Errorf("Decode(%v) = %q, want %q", got, dec, tc.text)
			}
		})
	}
}

// TestGGUFChatTemplate: LoadChatTemplate of a GGUF path gives
// tokenizer.chat_template with the BOS and EOS texts; none without the key.
func TestGGUFChatTemplate(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, k ggufTok) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, k.bytes(t), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("with.gguf", tinySPM().set(ggufTemplateKey, "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"))
	c, err := LoadChatTemplate(p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Render([]Message{{Role: "user", Content: "hi"}}, false)
	if err != nil || out != "<s>hi</s>" {
		t.Errorf("Render = %q, %v; want <s>hi</s>", out, err)
	}
	if c, err := LoadChatTemplate(write("without.gguf", tinySPM())); c != nil || err != nil {
		t.Errorf("no template: %v, %v", c, err)
	}
	if _, err := LoadChatTemplate(write("bad.gguf", tinySPM().set(ggufTemplateKey, "{% for %}"))); err == nil || !strings.Contains(err.Error(), ggufTemplateKey) {
		t.Errorf("a template that does not parse: %v", err)
	}
}

// TestGGUFRefused: each malformed or unsupported vocabulary is refused with
// an error that names its key.
func TestGGUFRefused(t *testing.T) {
	spm, bpe := tinySPM(), tinyBPE()
	for _, tc := range []struct {
		name, key string
		kvs       ggufTok
	}{
		{"no model", ggufModelKey, spm.set(ggufModelKey, nil)},
		{"bert", ggufModelKey, spm.set(ggufModelKey, "bert")},
		{"model not a string", ggufModelKey, spm.set(ggufModelKey, uint32(1))},
		{"no tokens", ggufTokensKey, spm.set(ggufTokensKey, nil)},
		{"empty tokens", ggufTokensKey, spm.set(ggufTokensKey, []string{})},
		{"tokens not strings", ggufTokensKey, spm.set(ggufTokensKey, []int32{1, 2})},
		{"short scores", ggufScoresKey, spm.set(ggufScoresKey, []float32{1})},
		{"scores not floats", ggufScoresKey, spm.set(ggufScoresKey, []string{"a"})},
		{"short types", ggufTypesKey, spm.set(ggufTypesKey, []int32{1, 1})},
		{"type 7", ggufTypesKey, spm.set(ggufTypesKey, slices.Repeat([]int32{7}, 277))},
		{"bad byte piece", ggufTypesKey, spm.set(ggufTypesKey, slices.Repeat([]int32{6}, 277))},
		{"bos out of range", ggufBOSKey, spm.set(ggufBOSKey, uint32(277))},
		{"eos negative", ggufEOSKey, spm.set(ggufEOSKey, int32(-1))},
		{"eot out of range", ggufEOTKey, spm.set(ggufEOTKey, uint32(1<<30))},
		{"eom not an int", ggufEOMKey, spm.set(ggufEOMKey, "2")},
		{"unk out of range", ggufUnkKey, spm.set(ggufUnkKey, uint32(999))},
		{"add_bos not a bool", ggufAddBOSKey, spm.set(ggufAddBOSKey, uint32(1))},
		{"add_eos not a bool", ggufAddEOSKey, spm.set(ggufAddEOSKey, "yes")},
		{"add_space_prefix not a bool", ggufAddSpaceKey, spm.set(ggufAddSpaceKey, int32(0))},
		{"no pre", ggufPreKey, bpe.set(ggufPreKey, nil)},
		{"default pre", ggufPreKey, bpe.set(ggufPreKey, "default")},
		{"other pre", ggufPreKey, bpe.set(ggufPreKey, "deepseek-coder")},
		{"no merges", ggufMergesKey, bpe.set(ggufMergesKey, nil)},
		{"merge of one token", ggufMergesKey, bpe.set(ggufMergesKey, []string{"he"})},
		{"merge outside the vocab", ggufMergesKey, bpe.set(ggufMergesKey, []string{"x y"})},
		{"bpe bos out of range", ggufBOSKey, bpe.set(ggufBOSKey, uint32(265))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := LoadGGUF(readGGUF(t, tc.kvs.bytes(t)))
			if err == nil {
				t.Fatalf("accepted (vocab %d)", tok.VocabSize())
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error %q does not name %s", err, tc.key)
			}
		})
	}
}

// FuzzGGUFTokenizer feeds mutated GGUF files to LoadGGUF: whatever the
// reader accepts ends in an error or a tokenizer whose ids are in its
// vocabulary and whose text is valid UTF-8, never a panic.
func FuzzGGUFTokenizer(f *testing.F) {
	spm, bpe := tinySPM(), tinyBPE()
	for _, k := range []ggufTok{
		spm, bpe, spm.set(ggufAddEOSKey, true).set(ggufEOTKey, uint32(0)), spm.set(ggufAddSpaceKey, false),
		bpe.set(ggufPreKey, "llama-bpe").set(ggufAddBOSKey, true), bpe.set(ggufPreKey, "qwen2"), spm.set(ggufTypesKey, nil).set(ggufScoresKey, nil),
		{{Key: ggufModelKey, Val: "llama"}, {Key: ggufTokensKey, Val: []string{"a", "b", "ab"}}},
		{{Key: ggufModelKey, Val: "gpt2"}, {Key: ggufPreKey, Val: "gpt-2"}, {Key: ggufTokensKey, Val: []string{"a", "b", "ab"}}, {Key: ggufMergesKey, Val: []string{"a b"}}},
	} {
		f.Add(k.bytes(f))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		tok, err := LoadGGUF(file)
		if err != nil {
			return
		}
		for _, id := range append(tok.EOSIDs(), tok.BOS(), tok.EOS()) {
			if id < -1 || id >= tok.VocabSize() {
				t.Fatalf("special id %d outside the vocab (%d)", id, tok.VocabSize())
			}
		}
		for _, s := range []string{"", "hello world", " a  b\n", "日本🦙 123456", "<sep>a<|eot_id|>", "\xff"} {
			ids, err := tok.Encode(s, true)
			if err != nil {
				continue
			}
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d outside the vocab (%d)", s, id, tok.VocabSize())
				}
			}
			if out := tok.Decode(ids); !utf8.ValidString(out) {
				t.Fatalf("Decode gave invalid UTF-8 %q", out)
			}
		}
		tok.Decode([]int{-1, 0, 1 << 30})
	})
}
