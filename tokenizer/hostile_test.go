package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/hostile"
)

// TestLoadRefusesHostileFiles: a file of a tokenizer directory that is a
// device, a FIFO, a directory or over its size limit ends in an error naming
// it, at once (a FIFO would block a plain read forever, /dev/zero never end).
func TestLoadRefusesHostileFiles(t *testing.T) {
	tokJSON, err := os.ReadFile(filepath.Join(testdata, "bytelevel_llama3.json"))
	if err != nil {
		t.Fatal(err)
	}
	devZero, fifo, dir := hostile.DevZero, hostile.FIFO, hostile.Dir
	tooLarge := func(t testing.TB, p string) { hostile.Oversized(t, p, maxConfigSize+1) }
	tests := []struct {
		file string
		make func(t testing.TB, path string)
		want string
	}{
		{"tokenizer.json", devZero, "not a regular file (character device)"},
		{"tokenizer.json", fifo, "not a regular file (named pipe)"},
		{"tokenizer.model", devZero, "not a regular file (character device)"},
		{"tokenizer.model", fifo, "not a regular file (named pipe)"},
		{"tokenizer_config.json", devZero, "not a regular file (character device)"},
		{"tokenizer_config.json", tooLarge, "file too large: 16777217 bytes is over the 16 MiB limit"},
		{"special_tokens_map.json", fifo, "not a regular file (named pipe)"},
		{"generation_config.json", dir, "not a regular file (directory)"},
		{"generation_config.json", devZero, "not a regular file (character device)"},
		{"vocab.json", fifo, "not a regular file (named pipe)"},
		{"vocab.json", func(t testing.TB, p string) { hostile.Oversized(t, p, maxVocabJSONSize+1) }, "file too large: 67108865 bytes is over the 64 MiB limit"},
		{"merges.txt", devZero, "not a regular file (character device)"},
		{"merges.txt", func(t testing.TB, p string) { hostile.Oversized(t, p, maxMergesTextSize+1) }, "file too large: 67108865 bytes is over the 64 MiB limit"},
	}
	// Each of vocab.json and merges.txt is read only beside the other.
	partner := map[string]string{"vocab.json": "merges.txt", "merges.txt": "vocab.json"}
	for _, tc := range tests {
		t.Run(tc.file+" "+tc.want, func(t *testing.T) {
			d := t.TempDir()
			if p, ok := partner[tc.file]; ok {
				if err := os.WriteFile(filepath.Join(d, p), []byte("{}"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if !strings.HasPrefix(tc.file, "tokenizer.") {
				if err := os.WriteFile(filepath.Join(d, "tokenizer.json"), tokJSON, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(d, tc.file)
			tc.make(t, path)
			_, err := Load(d)
			if err == nil || !strings.Contains(err.Error(), path+": "+tc.want) {
				t.Fatalf("err = %v, want %q", err, path+": "+tc.want)
			}
		})
	}
}

// TestChatTemplateRefusesHostileFiles: chat_template.jinja is read as
// carefully as the tokenizer's files.
func TestChatTemplateRefusesHostileFiles(t *testing.T) {
	tooLarge := func(t testing.TB, p string) { hostile.Oversized(t, p, maxTemplateSize+1) }
	for _, tc := range []struct {
		make func(t testing.TB, path string)
		want string
	}{
		{hostile.DevZero, "not a regular file (character device)"},
		{hostile.FIFO, "not a regular file (named pipe)"},
		{hostile.Dir, "not a regular file (directory)"},
		{tooLarge, "file too large: 1048577 bytes is over the 1 MiB limit"},
	} {
		d := t.TempDir()
		path := filepath.Join(d, "chat_template.jinja")
		tc.make(t, path)
		_, err := LoadChatTemplate(d)
		if err == nil || !strings.Contains(err.Error(), path+": "+tc.want) {
			t.Errorf("err = %v, want %q", err, path+": "+tc.want)
		}
	}
}

func FuzzTokenizerConfig(f *testing.F) {
	f.Add("tokenizer_config.json", []byte(`{"add_bos_token": true, "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "chat_template": "{{ bos_token }}"}`))
	f.Add("special_tokens_map.json", []byte(`{"bos_token": null, "eos_token": {"content": "<|eot_id|>"}}`))
	f.Add("tokenizer_config.json", []byte(`{"chat_template": [{"name": "default", "template": "x"}, {"name": "tool_use", "template": "y"}]}`))
	f.Add("tokenizer_config.json", []byte(`{"eos_token": 3}`))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		c := &tokenizerConfig{tokens: map[string]string{}}
		if err := c.merge(name, b); err != nil {
			return
		}
		for k := range c.tokens {
			if k != "bos_token" && k != "eos_token" || c.tokens[k] == "" {
				t.Fatalf("accepted config gives token %q = %q", k, c.tokens[k])
			}
		}
		_, _ = c.chatTemplate() // an error is fine; a panic is not
	})
}

func FuzzGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}`))
	f.Add([]byte(`{"bos_token_id": 1, "eos_token_id": 2}`))
	f.Add([]byte(`{"bos_token_id": -1, "eos_token_id": null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseGenerationConfig(b)
		if err != nil {
			return
		}
		for _, id := range append(g.bos, g.eos...) {
			if id < 0 {
				t.Fatalf("accepted config gives id %d", id)
			}
		}
	})
}
