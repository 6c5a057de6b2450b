package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/testmodels"
)

func TestTinyLlamaChatTemplate(t *testing.T) {
	dir := testmodels.Path(t, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0")
	c, err := LoadChatTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		t.Fatal("no chat template")
	}
	msgs := []Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "Hi!"},
		{Role: "assistant", Content: "Hello, how can I help?"},
		{Role: "user", Content: "Tell me a joke."},
	}
	// Written by hand from the template: each turn is "<|role|>\n" + content + eos_token,
	// and every {% ... %} line leaves nothing behind (trim_blocks/lstrip_blocks), so the
	// "\n" between the expression and its closing tag is what separates turns.
	want := "<|system|>\nYou are a helpful assistant.</s>\n" +
		"<|user|>\nHi!</s>\n" +
		"<|assistant|>\nHello, how can I help?</s>\n" +
		"<|user|>\nTell me a joke.</s>\n"
	for _, gen := range []bool{false, true} {
		got, err := c.Render(msgs, gen)
		if err != nil {
			t.Fatal(err)
		}
		w := want
		if gen {
			w += "<|assistant|>\n"
		}
		if got != w {
			t.Errorf("Render(gen=%v) =\n%q\nwant\n%q", gen, got, w)
		}
	}
}

// TestChatTemplatesReference compares with jinja2 set up as transformers sets it up.
func TestChatTemplatesReference(t *testing.T) {
	var ref struct {
		Templates     map[string]string    `json:"templates"`
		Conversations map[string][]Message `json:"conversations"`
		Cases         []struct {
			Template     string `json:"template"`
			Conversation string `json:"conversation"`
			GenPrompt    bool   `json:"add_generation_prompt"`
			BOS          string `json:"bos_token"`
			EOS          string `json:"eos_token"`
			Output       *string
			Error        *string
		} `json:"cases"`
		Transformers map[string]string `json:"transformers_tinyllama"`
	}
	readJSON(t, filepath.Join(testdata, "chat.json"), &ref)
	for _, tc := range ref.Cases {
		name := tc.Template + "/" + tc.Conversation
		c, err := NewChatTemplate(ref.Templates[tc.Template], tc.BOS, tc.EOS)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got, err := c.Render(ref.Conversations[tc.Conversation], tc.GenPrompt)
		switch {
		case tc.Error != nil:
			var te *TemplateError
			if !errors.As(err, &te) || te.Msg != *tc.Error {
				t.Errorf("%s: err = %v, want TemplateError %q", name, err, *tc.Error)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.Template == "features":
			// Known gonja differences from jinja2: none prints as "" (not "None") and
			// % takes the sign of the dividend (-7 % 3 is -1, not 2).
			want := strings.Replace(*tc.Output, "x1None 3 3 2", "x1 3 3 -1", 1)
			if got != want {
				t.Errorf("%s (gen=%v):\n got %q\nwant %q", name, tc.GenPrompt, got, want)
			}
		case got != *tc.Output:
			t.Errorf("%s (gen=%v):\n got %q\nwant %q", name, tc.GenPrompt, got, *tc.Output)
		}
	}
	// transformers' own apply_chat_template agrees with the jinja2 set-up above.
	for _, tc := range ref.Cases {
		if tc.Template == "tinyllama" && tc.Conversation == "two_turn" && tc.GenPrompt {
			if *tc.Output != ref.Transformers["two_turn"] {
				t.Errorf("jinja2 and transformers differ: %q vs %q", *tc.Output, ref.Transformers["two_turn"])
			}
		}
	}
}

func TestChatTemplateErrors(t *testing.T) {
	for _, src := range []string{"{% for m in messages %}", "{{ 1 + }}", "{% endif %}", "{% include 'x' %}"} {
		c, err := NewChatTemplate(src, "<s>", "</s>")
		if err == nil {
			_, err = c.Render([]Message{{Role: "user", Content: "x"}}, true)
		}
		if err == nil {
			t.Errorf("%q: no error", src)
		}
	}
	// No template: nil, nil.
	dir := t.TempDir()
	if c, err := LoadChatTemplate(dir); c != nil || err != nil {
		t.Errorf("empty dir: %v, %v", c, err)
	}
	// chat_template.jinja wins over tokenizer_config.json.
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "config", "bos_token": {"content": "<s>"}, "eos_token": "</s>"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ bos_token }}file{{ eos_token }}"), 0o644)
	c, err := LoadChatTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Render(nil, false); err != nil || got != "<s>file</s>" {
		t.Errorf("Render = %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": 3}`), 0o644)
	os.Remove(filepath.Join(dir, "chat_template.jinja"))
	if _, err := LoadChatTemplate(dir); err == nil || !strings.Contains(err.Error(), "chat_template") {
		t.Errorf("bad chat_template: err = %v", err)
	}
}
