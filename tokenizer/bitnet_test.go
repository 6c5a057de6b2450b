package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// bitnet2B4TTemplate is the chat_template of microsoft/bitnet-b1.58-2B-4T's
// tokenizer_config.json as a public project quotes it (the file itself
// could not be read here, no network): "Role: content<|eot_id|>" turns
// (role capitalized, content trimmed; filters bind tighter than +) and
// "Assistant: " to reply; BOS comes from the tokenizer, not the template.
const bitnet2B4TTemplate = `{% for message in messages %}{{ message['role'] | capitalize + ': ' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}`

// TestBitNet2B4TDirectory loads a directory shaped like BitNet-2B-4T's: a
// byte-level BPE tokenizer.json (Llama-3 style), bos <|begin_of_text|>,
// eos <|eot_id|>, generation_config eos ids, and its chat template, and
// renders and encodes a conversation.
func TestBitNet2B4TDirectory(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(testdata, "bytelevel_llama3.json"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, _ := json.Marshal(bitnet2B4TTemplate)
	cfg := `{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": ` + string(tmpl) + `}`
	for name, body := range map[string][]byte{
		"tokenizer.json":         b,
		"tokenizer_config.json":  []byte(cfg),
		"generation_config.json": []byte(`{"bos_token_id": 0, "eos_token_id": [1, 4]}`),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != 0 || tok.EOS() != 4 || !slices.Contains(tok.EOSIDs(), 4) || !slices.Contains(tok.EOSIDs(), 1) {
		t.Errorf("bos %d eos %d eos ids %v", tok.BOS(), tok.EOS(), tok.EOSIDs())
	}
	ct, err := LoadChatTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render([]Message{{Role: "system", Content: "Be brief. "}, {Role: "user", Content: " Hi there"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "System: Be brief.<|eot_id|>User: Hi there<|eot_id|>Assistant: "
	if got != want {
		t.Fatalf("rendered %q, want %q", got, want)
	}
	ids, err := tok.Encode(got, AddBOS(tok))
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != 0 || slices.Index(ids, 4) < 0 {
		t.Errorf("special tokens not taken as single ids: %v", ids)
	}
	if dec := tok.Decode(ids); dec != "System: Be brief.User: Hi thereAssistant: " {
		t.Errorf("decode %q", dec)
	}
}
