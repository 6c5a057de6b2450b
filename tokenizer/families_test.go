package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/fixture"
)

// TestFamilyChatFormats loads each family fixture's tokenizer and chat
// template: a rendered conversation encodes every special token of the
// family's format as its one id, and the EOS ids are the turn-ending
// tokens config.json names.
func TestFamilyChatFormats(t *testing.T) {
	for _, spec := range fixture.Families() {
		t.Run(strings.TrimSuffix(spec.Arch, "ForCausalLM"), func(t *testing.T) {
			dir := t.TempDir()
			if err := spec.Write(dir); err != nil {
				t.Fatal(err)
			}
			tok, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			tpl, err := LoadChatTemplate(dir)
			if err != nil || tpl == nil {
				t.Fatalf("chat template: %v", err)
			}
			text, err := tpl.Render([]Message{{Role: "user", Content: "hi there"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "and you"}}, true)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := tok.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			var added struct {
				Added []struct {
					ID      int    `json:"id"`
					Content string `json:"content"`
				} `json:"added_tokens"`
			}
			raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &added); err != nil {
				t.Fatal(err)
			}
			for _, a := range added.Added {
				if a.ID > 2 && strings.Contains(text, a.Content) && !slices.Contains(ids, a.ID) {
					t.Errorf("%s in %q is not encoded as its id %d: %v", a.Content, text, a.ID, ids)
				}
			}
			var cfg struct {
				EOS []int `json:"eos_token_id"`
			}
			raw, err = os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			for _, e := range cfg.EOS {
				if !slices.Contains(tok.EOSIDs(), e) {
					t.Errorf("EOS ids %v lack config.json's %d", tok.EOSIDs(), e)
				}
			}
		})
	}
}
