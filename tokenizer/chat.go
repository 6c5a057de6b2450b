package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatTemplate is a model's Jinja chat template, rendered the way transformers'
// apply_chat_template renders it (trim_blocks, lstrip_blocks, raise_exception, tojson).
type ChatTemplate struct {
	// Source is the template text.
	Source string
	// BOS and EOS are the bos_token and eos_token strings the template sees.
	BOS, EOS string
	tpl      *exec.Template
}

// LoadChatTemplate reads the chat template of the model in dir: chat_template.jinja if
// present, else tokenizer_config.json's chat_template. It returns nil, nil when the model
// has none, and an error when the template does not parse.
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	cfg, err := readTokenizerConfig(dir)
	if err != nil {
		return nil, err
	}
	src := ""
	path := filepath.Join(dir, "chat_template.jinja")
	if b, err := os.ReadFile(path); err == nil {
		src = string(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	} else {
		path = filepath.Join(dir, "tokenizer_config.json")
		if src, err = cfg.chatTemplate(); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: chat_template: %w", path, err)
		}
	}
	if src == "" {
		return nil, nil
	}
	c, err := NewChatTemplate(src, cfg.tokenString("bos_token"), cfg.tokenString("eos_token"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return c, nil
}

// NewChatTemplate compiles a Jinja chat template.
func NewChatTemplate(src, bos, eos string) (c *ChatTemplate, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("chat template does not parse: %v", r)
		}
	}()
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	cfg.KeepTrailingNewline = false
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("strftime_now", func(format string) string { return strftime(time.Now(), format) })
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := filters.Replace("tojson", filterToJSON); err != nil {
		return nil, err
	}
	env := &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
	tpl, err := exec.NewTemplate("chat_template", cfg, onlyLoader{src}, env)
	if err != nil {
		return nil, fmt.Errorf("chat template does not parse: %w", err)
	}
	return &ChatTemplate{Source: src, BOS: bos, EOS: eos, tpl: tpl}, nil
}

// TemplateError is an error the template raised itself (raise_exception), e.g. for a
// conversation whose roles do not alternate.
type TemplateError struct{ Msg string }

func (e *TemplateError) Error() string { return "chat template: " + e.Msg }

// Render formats msgs into the prompt text; addGenerationPrompt appends the start of the
// assistant's turn.
func (c *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template failed: %v", r)
		}
	}()
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	var raised *TemplateError // gonja flattens errors to text, so keep the template's own
	data := exec.NewContext(map[string]any{
		"messages":              list,
		"bos_token":             c.BOS,
		"eos_token":             c.EOS,
		"add_generation_prompt": addGenerationPrompt,
		"raise_exception": func(msg string) (string, error) {
			raised = &TemplateError{Msg: msg}
			return "", raised
		},
	})
	s, err := c.tpl.ExecuteToString(data)
	if err != nil {
		if raised != nil {
			return "", raised
		}
		return "", fmt.Errorf("chat template failed: %w", err)
	}
	return s, nil
}

// onlyLoader serves the template itself and nothing else: templates cannot include files.
type onlyLoader struct{ src string }

func (l onlyLoader) Read(path string) (io.Reader, error) {
	if path != "chat_template" {
		return nil, fmt.Errorf("chat template may not load %q", path)
	}
	return strings.NewReader(l.src), nil
}

func (l onlyLoader) Resolve(path string) (string, error) { return path, nil }

func (l onlyLoader) Inherit(string) (loaders.Loader, error) { return l, nil }

// filterToJSON is Python's json.dumps as transformers registers it: ensure_ascii=False,
// ", " and ": " separators, optional indent; message keys keep role, content first.
func filterToJSON(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := 0
	if v, ok := params.KwArgs["indent"]; ok && v.IsInteger() {
		indent = v.Integer()
	}
	var buf bytes.Buffer
	if err := writePyJSON(&buf, in.Interface(), indent, 0); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(buf.String())
}

func writePyJSON(w *bytes.Buffer, v any, indent, depth int) error {
	if depth > 100 {
		return errors.New("nested too deeply")
	}
	nl := func(d int) {
		if indent > 0 {
			w.WriteByte('\n')
			w.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	sep := ", "
	if indent > 0 {
		sep = ","
	}
	switch x := v.(type) {
	case *exec.Value:
		return writePyJSON(w, x.Interface(), indent, depth)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		rank := func(k string) int {
			switch k {
			case "role":
				return 0
			case "content":
				return 1
			}
			return 2
		}
		sort.Slice(keys, func(i, j int) bool {
			if rank(keys[i]) != rank(keys[j]) {
				return rank(keys[i]) < rank(keys[j])
			}
			return keys[i] < keys[j]
		})
		if len(keys) == 0 {
			w.WriteString("{}")
			return nil
		}
		w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.WriteString(sep)
			}
			nl(depth + 1)
			writeJSONString(w, k)
			w.WriteString(": ")
			if err := writePyJSON(w, x[k], indent, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		w.WriteByte('}')
	case []any:
		if len(x) == 0 {
			w.WriteString("[]")
			return nil
		}
		w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				w.WriteString(sep)
			}
			nl(depth + 1)
			if err := writePyJSON(w, e, indent, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		w.WriteByte(']')
	case string:
		writeJSONString(w, x)
	case nil:
		w.WriteString("null")
	case bool:
		if x {
			w.WriteString("true")
		} else {
			w.WriteString("false")
		}
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return err
		}
		w.Write(b)
	}
	return nil
}

func writeJSONString(w *bytes.Buffer, s string) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	w.Truncate(w.Len() - 1)
}

// strftime formats t with the C directives chat templates use (%d %b %Y and friends).
func strftime(t time.Time, f string) string {
	r := strings.NewReplacer("%Y", "2006", "%m", "01", "%d", "02", "%H", "15", "%M", "04",
		"%S", "05", "%b", "Jan", "%B", "January", "%a", "Mon", "%A", "Monday", "%y", "06", "%%", "%")
	return t.Format(r.Replace(f))
}
