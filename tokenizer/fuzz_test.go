package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"lowbit/internal/testmodels"
)

func FuzzLoadHFJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"model": null}`, `{"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`,
		`{"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}, "added_tokens": [{"id": 5, "content": "<x>", "special": true, "lstrip": true, "rstrip": true}]}`,
		`{"model": {"vocab": {"<unk>": 0, "a": 1}, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}, "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}`,
		`{"model": {"vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed"}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "a"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"a": {"ids": [0]}}}}`,
		`{"model": {"vocab": {"a": -1}}}`,
		`{"added_tokens": [{"id": 4, "content": "<|eot_id|>", "special": true}], "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "` + strings.ReplaceAll(llama3Pattern, `\`, `\\`) + `"}, "behavior": "Isolated"}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "ignore_merges": true, "vocab": {"H": 0, "i": 1, "Hi": 2, "Ġ": 3, "ĠHi": 5}, "merges": [["H", "i"], ["Ġ", "Hi"]]}}`, `{"model": {"vocab": {"a": 99999999999}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseHFJSON(b)
		if err != nil {
			return
		}
		fuzzEncode(t, m)
	})
}

func FuzzSentencePieceModel(f *testing.F) {
	b, err := os.ReadFile(filepath.Join(testdata, "spm_nodummy.model"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte{})
	f.Add([]byte("\x0a\x0b\x0a\x05<unk>\x18\x02\x12\x02\x18\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseSentencePiece(b)
		if err != nil {
			return
		}
		for _, s := range []string{"", "Hello world", "  a  b  ", "日本🦙", "\xff"} {
			ids, err := m.Encode(s, true)
			if err != nil {
				t.Fatalf("Encode(%q): %v", s, err)
			}
			for _, id := range ids {
				if id < 0 || id >= m.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d outside the vocab", s, id)
				}
			}
			if out := m.Decode(ids); !utf8.ValidString(out) {
				t.Fatalf("Decode gave invalid UTF-8 %q", out)
			}
		}
		m.Decode([]int{-1, 0, 1 << 30})
	})
}

// FuzzEncodeDecode checks Decode(Encode(s)) == s on the lossless tokenizers (byte-level
// BPE, and SentencePiece without whitespace normalization on text that does not contain
// ▁ or special-token text), and that streaming decode equals Decode.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", "Hello world", " lead", "trail ", "a\n\n b\t", "日本語 🦙 ok", "I'M 12345", "<|eot_id|>x", "e\u0301"} {
		f.Add(s)
	}
	toks := map[string]Tokenizer{}
	for _, name := range []string{"bytelevel_llama3.json", "bytelevel_gpt2.json"} {
		t, err := LoadHFJSON(filepath.Join(testdata, name))
		if err != nil {
			f.Fatal(err)
		}
		toks[name] = t
	}
	sp, err := LoadSentencePiece(filepath.Join(testdata, "spm_nodummy.model"))
	if err != nil {
		f.Fatal(err)
	}
	toks["spm_nodummy"] = sp
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for name, tok := range toks {
			ids, err := tok.Encode(s, false)
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", name, s, err)
			}
			dec := tok.Decode(ids)
			lossless := !strings.Contains(s, "\u2581") && !strings.Contains(s, "<|") && !strings.Contains(s, "<start_of_turn>") && !strings.Contains(s, "<end_of_turn>")
			if lossless && dec != s {
				t.Fatalf("%s: Decode(Encode(%q)) = %q (ids %v)", name, s, dec, ids)
			}
			d := NewDecoder(tok)
			var sb strings.Builder
			for _, id := range ids {
				sb.WriteString(d.Next(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != dec {
				t.Fatalf("%s: streaming %q != Decode %q", name, sb.String(), dec)
			}
		}
	})
}

// FuzzChatTemplate renders any template over any message within small limits: it must end,
// without a crash, in text no longer than the output limit or in an error, and soon.
func FuzzChatTemplate(f *testing.F) {
	var ref struct {
		Templates map[string]string `json:"templates"`
	}
	readJSON(f, filepath.Join(testdata, "chat.json"), &ref)
	for _, src := range ref.Templates {
		f.Add(src, "Hello {{ x }} 'quoted' \u00e9", true)
	}
	for _, tc := range hostileTemplates() {
		if len(tc.src) < 10000 {
			f.Add(tc.src, "hi", false)
		}
	}
	limits := TemplateLimits{Output: 16 << 10, Memory: 256 << 10, Iterations: 10000, Depth: 50, Time: 100 * time.Millisecond}
	f.Fuzz(func(t *testing.T, src, content string, generate bool) {
		c, err := NewChatTemplate(src, "<s>", "</s>")
		if err != nil {
			return
		}
		c.Limits = limits
		msgs := []Message{{Role: "system", Content: content}, {Role: "user", Content: content}, {Role: "assistant", Content: "ok"}}
		start := time.Now()
		out, err := c.Render(msgs, generate)
		// Checks between steps of the engine stop it soon after the time limit.
		if took := time.Since(start); took > 20*limits.Time {
			t.Fatalf("rendering took %v (limit %v), err %v", took, limits.Time, err)
		}
		if err == nil && len(out) > limits.Output {
			t.Fatalf("output of %d bytes, more than the %d limit", len(out), limits.Output)
		}
	})
}

func BenchmarkEncodeAlice(b *testing.B) {
	text, err := os.ReadFile(testmodels.Path(b, "eval-text/alice_in_wonderland_pg11.txt"))
	if err != nil {
		b.Fatal(err)
	}
	dir := testmodels.Dir(b)
	for _, tc := range []struct {
		name string
		load func() (Tokenizer, error)
	}{
		{"llama2-spm", func() (Tokenizer, error) {
			return LoadSentencePiece(filepath.Join(dir, "llama2-tokenizer/tokenizer.model"))
		}},
		{"tinyllama-json", func() (Tokenizer, error) {
			return LoadHFJSON(filepath.Join(dir, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0/tokenizer.json"))
		}},
		{"bytelevel-llama3", func() (Tokenizer, error) { return LoadHFJSON(filepath.Join(testdata, "bytelevel_llama3.json")) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tok, err := tc.load()
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, err := tok.Encode(string(text), false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
