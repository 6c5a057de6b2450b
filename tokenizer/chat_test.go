package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"

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

// hostileTemplates are templates that would exhaust memory, the stack or time without limits,
// each with the error it must end in under smallLimits.
func hostileTemplates() []struct{ name, src, want string } {
	nest := func(open, inner, close string, n int) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	return []struct{ name, src, want string }{
		{"string repetition", "{{ 'a' * 100000000000 }}", "a value of 100,000,000,000 bytes exceeds 4 KiB output limit"},
		{"repetition by a computed power", "{{ 'a' * (10 ** 12)|int }}", "exceeds 4 KiB output limit"},
		{"doubling a namespace string", "{% set ns = namespace(s='a') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "exceeds 4 KiB output limit"},
		{"doubling a string", "{% set s = 'a' %}" + strings.Repeat("{% set s = s + s %}", 40), "exceeds 4 KiB output limit"},
		{"doubling a list", "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "a value exceeds 4 KiB output limit"},
		{"nesting a list in itself", "{% set l = [1] %}" + strings.Repeat("{% set l = [l, l] %}", 60), "a value exceeds 4 KiB output limit"},
		{"appending a list to itself", "{% set l = [1] %}" + strings.Repeat("{% do l.append(l) %}", 60), "a value exceeds 4 KiB output limit"},
		{"a namespace holding itself", "{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}", "a value cannot contain itself"},
		{"a message holding the messages", "{% set m = messages[0] %}{% set m['all'] = messages %}{{ messages }}", "a value cannot contain itself"},
		{"range materialized", "{{ range(1000000000000)|list|length }}", "a value of 8,000,000,000,000 bytes exceeds 4 KiB output limit"},
		{"join with a long separator", "{{ range(500)|join('x' * 1000) }}", "exceeds 4 KiB output limit"},
		{"str.join", "{% set l = range(100)|map('string')|list %}{% set x = 'x' * 1000 %}{{ x.join(l) }}", "exceeds 4 KiB output limit"},
		{"center filter", "{{ 'a'|center(1000000000000) }}", "a value of 1,000,000,000,000 bytes exceeds 4 KiB output limit"},
		{"str.center", "{{ 'a'.center(1000000000000, ' ') }}", "a value of 1,000,000,000,000 bytes exceeds 4 KiB output limit"},
		{"str.ljust", "{{ 'a'.ljust(1000000000000, '-') }}", "exceeds 4 KiB output limit"},
		{"str.rjust", "{{ 'a'.rjust(1000000000000, '-') }}", "exceeds 4 KiB output limit"},
		{"str.zfill", "{{ '1'.zfill(1000000000000) }}", "exceeds 4 KiB output limit"},
		{"printf width", "{{ '%1000000d'|format(1) }}", "exceeds 4 KiB output limit"},
		{"printf repeated", "{{ ('%999999d' * 1000)|format(" + strings.Repeat("1,", 999) + "1) }}", "exceeds 4 KiB output limit"},
		{"str.format width", "{{ '{:>1000000000000}'.format('x') }}", "exceeds 4 KiB output limit"},
		{"str.format precision", "{{ '{:.1000000000f}'.format(1.5) }}", "exceeds 4 KiB output limit"},
		{"str.format repeated", "{% set f = '{0}' * 1000 %}{{ f.format('x' * 1000) }}", "exceeds 4 KiB output limit"},
		{"str.format nested", "{{ '{0:{1:{2}}}'.format(1, 2, 3) }}", "Max string recursion exceeded"},
		{"indent", "{{ ('a\n' * 1000)|indent(100) }}", "exceeds 4 KiB output limit"},
		{"indent width", "{{ 'a'|indent(1000000000000) }}", "exceeds 4 KiB output limit"},
		{"replace", "{{ ('a' * 1000)|replace('a', 'bbbbbbbbbb') }}", "exceeds 4 KiB output limit"},
		{"str.replace", "{% set s = 'a' * 100 %}{{ s.replace('a', 'b' * 1000, -1) }}", "exceeds 4 KiB output limit"},
		{"str.expandtabs", "{% set s = 'a\t' * 100 %}{{ s.expandtabs('', 100000) }}", "exceeds 4 KiB output limit"},
		{"batch fill", "{{ [1]|batch(1000000000000, 0) }}", "exceeds 4 KiB output limit"},
		{"slice count", "{{ [1]|slice(1000000000000) }}", "exceeds 4 KiB output limit"},
		{"lipsum", "{{ lipsum(1000000000) }}", "exceeds 4 KiB output limit"},
		{"tojson indent", "{{ messages|tojson(indent=1000000000000) }}", "output exceeds 4 KiB limit"},
		{"output", "{% for i in range(500) %}0123456789{% endfor %}", "output exceeds 4 KiB limit"},
		{"filter block", "{% filter upper %}{% for i in range(500) %}0123456789{% endfor %}{% endfilter %}", "output exceeds 4 KiB limit"},
		{"set block", "{% set x %}{% for i in range(500) %}0123456789{% endfor %}{% endset %}", "output exceeds 4 KiB limit"},
		{"loop.cycle", "{% for i in range(500) %}{{ loop.cycle('0123456789', '9876543210') }}{% endfor %}", "output exceeds 4 KiB limit"},
		{"many values", "{% for i in range(500) %}{% set x = 'y' * 1000 %}{% endfor %}", "values built exceed 64 KiB limit"},
		{"loop", "{% for c in 'x' * 2000 %}{% endfor %}", "loop iterations exceed 1,000"},
		{"nested loops", "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "loop iterations exceed 1,000"},
		{"recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nesting deeper than 50"},
		{"recursive call block", "{% macro m() %}{% call m() %}{% endcall %}{% endmacro %}{{ m() }}", "nesting deeper than 50"},
		{"recursive loop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", "nesting deeper than 50"},
		{"recursive block", "{% block a %}{{ self.a() }}{% endblock %}", "nesting deeper than 50"},
		{"nested list literal", "{{ " + nest("[", "1", "]", 100) + " }}", "nesting deeper than 50"},
		{"nested dict literal", "{{ " + nest("{'a': ", "1", "}", 100) + " }}", "nesting deeper than 50"},
		{"nested parentheses", "{{ " + nest("(", "1", ")", 100000) + " }}", "nesting deeper than 200"},
		{"nested blocks", nest("{% if true %}", "x", "{% endif %}", 1000), "nesting deeper than 200"},
		{"operator chain", "{{ 1" + strings.Repeat(" + 1", 1000) + " }}", "nesting deeper than 200"},
		{"getter chain", "{{ a" + strings.Repeat(".b", 1000) + " }}", "nesting deeper than 200"},
		{"include itself", "{% include 'chat_template' %}", "ControlStructure 'include' not found"},
		{"extend itself", "{% extends 'chat_template' %}", "ControlStructure 'extends' not found"},
		{"source size", strings.Repeat("x", 1<<20+1), "chat template larger than 1 MiB"},
	}
}

// smallLimits keep the hostile templates quick.
func smallLimits() TemplateLimits {
	return TemplateLimits{Output: 4 << 10, Memory: 64 << 10, Iterations: 1000, Depth: 50, Time: time.Minute}
}

func TestChatTemplateLimits(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, tc := range hostileTemplates() {
		c, err := NewChatTemplate(tc.src, "<s>", "</s>")
		if err == nil {
			c.Limits = smallLimits()
			_, err = c.Render(msgs, true)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && len(err.Error()) > 2000 {
			t.Errorf("%s: error of %d bytes", tc.name, len(err.Error()))
		}
	}
}

// TestChatTemplateTimeLimit renders a macro that calls itself twice, 2^40 calls deep in all.
func TestChatTemplateTimeLimit(t *testing.T) {
	c, err := NewChatTemplate("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c.Limits.Time = 50 * time.Millisecond
	if _, err := c.Render(nil, false); err == nil || err.Error() != "chat template: rendering took longer than 50ms" {
		t.Errorf("err = %v", err)
	}
}

// TestChatTemplateBoundedNeighbours renders what looks hostile but is bounded in gonja.
func TestChatTemplateBoundedNeighbours(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"{{ [1] * 10 ** 9 }}", "0.0"}, // gonja does not repeat lists
		{"{{ 10 ** 10 ** 10 }}", "1e+100"},
		{"{% set s = 'a' %}{% for i in range(100) %}{% set s = s ~ s %}{% endfor %}{{ s }}", "a"}, // a loop's set stays in the loop
		{"{{ ('9' * 5000)|int }}", "0"}, // more digits than Python's int() takes
		{"{{ ('a ' * 3)|wordwrap(1000000000) }}", "a a a"},
		{"{{ ('a' * 3)|trim('b' * 100000 ~ 'é') }}", "aaa"},
	} {
		c, err := NewChatTemplate(tc.src, "<s>", "</s>")
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		got, err := c.Render(nil, true)
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}

// TestChatTemplateDefaultLimits renders the cases of the issue under the default limits: each
// ends in its error at once, having built little. The clock, tested apart, is set long so
// that a loaded machine does not stop them first.
func TestChatTemplateDefaultLimits(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"{{ 'a' * 100000000000 }}", "chat template: a value of 100,000,000,000 bytes exceeds 1 MiB output limit"},
		{"{% set ns = namespace(s='a') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", "exceeds 1 MiB output limit"},
		{"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "chat template: nesting deeper than 200"},
		{"{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}", "nesting deeper than 200"},
		{"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "chat template: loop iterations exceed 100,000"},
		// An error many levels deep, each quoting its expression: a large literal.
		{"{{ " + strings.Repeat("(", 150) + "nofunc() ~ '" + strings.Repeat("A", 1<<19) + "'" + strings.Repeat(" ~ 1)", 150) + " }}", "nofunc is not callable"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, err := NewChatTemplate(tc.src, "<s>", "</s>")
		if err == nil {
			c.Limits.Time = time.Minute
			_, err = c.Render([]Message{{Role: "user", Content: "hi"}}, true)
		}
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60s: err = %v, want %q", tc.src, err, tc.want)
		}
		if built := after.TotalAlloc - before.TotalAlloc; built > 512<<20 {
			t.Errorf("%.60s: allocated %d MiB", tc.src, built>>20)
		}
	}
}

func TestChatTemplateLimitErrorsNameTheFile(t *testing.T) {
	hostile := "{{ 'a' * 100000000000 }}"
	config, err := json.Marshal(map[string]any{"chat_template": hostile})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []struct{ name, content string }{
		{"chat_template.jinja", hostile},
		{"tokenizer_config.json", string(config)},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, file.name)
		if err := os.WriteFile(path, []byte(file.content), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadChatTemplate(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Render(nil, false)
		want := "chat template " + path + ": a value of 100,000,000,000 bytes exceeds 1 MiB output limit"
		if err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", file.name, err, want)
		}
	}
}

// TestSharedChatTemplatesWithinLimits renders the real templates of shared/tokenizers (those
// gonja parses) over a long conversation: none comes near a default limit.
func TestSharedChatTemplatesWithinLimits(t *testing.T) {
	root := filepath.Join(filepath.Dir(testmodels.Dir(t)), "tokenizers")
	msgs := []Message{{Role: "system", Content: "Be brief."}}
	for i := range 150 {
		msgs = append(msgs, Message{Role: "user", Content: strings.Repeat("question ", 100+i)},
			Message{Role: "assistant", Content: strings.Repeat("<think>x</think> answer ", 50+i)})
	}
	msgs = append(msgs, Message{Role: "user", Content: "last"})
	found := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".jinja" && d.Name() != "tokenizer_config.json") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if d.Name() == "tokenizer_config.json" {
			var cfg struct {
				ChatTemplate string `json:"chat_template"`
			}
			if json.Unmarshal(src, &cfg) != nil || cfg.ChatTemplate == "" {
				return nil
			}
			src = []byte(cfg.ChatTemplate)
		}
		c, err := NewChatTemplate(string(src), "<s>", "</s>")
		if err != nil {
			t.Logf("%s: %v", path, err) // gonja cannot parse every template
			return nil
		}
		found++
		// Half or a quarter of the defaults: real templates stay well inside them (the clock
		// aside: a loaded machine must not make this test fail).
		l := TemplateLimits{}.limits(msgs)
		c.Limits = TemplateLimits{Output: l.Output / 2, Memory: l.Memory / 4, Iterations: l.Iterations / 4, Depth: l.Depth / 4, Time: time.Minute}
		var limit *exec.LimitError
		if _, err := c.Render(msgs, true); errors.As(err, &limit) {
			t.Errorf("%s: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Skipf("no chat templates under %s", root)
	}
}
