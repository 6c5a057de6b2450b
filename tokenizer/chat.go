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
	"github.com/nikolalohinski/gonja/v2/parser"

	"lowbit/gguf"
	"lowbit/internal/safefile"
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
	// Limits bounds every Render; its zero fields take the defaults.
	Limits TemplateLimits
	path   string // the template's file, for errors; "" when not known
	tpl    *exec.Template
}

// TemplateLimits bounds one rendering of a chat template, so that a hostile template ends in
// an error naming the limit instead of exhausting memory, the stack or time. A zero field
// takes its default.
type TemplateLimits struct {
	// Output bounds the rendered text, and any one string or list the template builds.
	// Default: 1 MiB, or 4 times the messages' size if more.
	Output int
	// Memory bounds the bytes of all the strings and lists the template builds, garbage
	// included. Default: 64 MiB, or 16 times Output if more.
	Memory int
	// Iterations bounds the loop iterations. Default: 100,000.
	Iterations int
	// Depth bounds the nesting of blocks, expressions, values and macro calls. Default: 200.
	// Parsing always uses the default.
	Depth int
	// Time bounds the rendering's wall-clock time. Default: 10s.
	Time time.Duration
}

// Default limits, far above what real templates need: they render about the messages' size,
// build a few times it in all, nest a dozen levels, loop a few times over the messages and
// take milliseconds. A loop iteration costs gonja microseconds, so 100,000 of them end a
// runaway loop in a fraction of a second. The clock is the backstop behind the others, set
// where a long real conversation on a loaded machine never reaches it.
const (
	defaultOutput     = 1 << 20
	outputPerMessage  = 4  // times the messages' size, when more than defaultOutput
	messageOverhead   = 64 // what a message weighs besides its text, as gonja counts values
	defaultMemory     = 64 << 20
	memoryPerOutput   = 16 // times Output, when more than defaultMemory
	defaultIterations = 100_000
	defaultDepth      = 200
	defaultTime       = 10 * time.Second
	// maxTemplateSize bounds a template's source: real ones are a few KB.
	maxTemplateSize = 1 << 20
)

// limits returns l's bounds for rendering msgs, defaults filled in.
func (l TemplateLimits) limits(msgs []Message) exec.Limits {
	out := exec.Limits{Output: l.Output, Memory: l.Memory, Iterations: l.Iterations, Depth: l.Depth, Time: l.Time}
	if out.Output <= 0 {
		size := 0
		for _, m := range msgs {
			size += len(m.Role) + len(m.Content) + messageOverhead
		}
		out.Output = max(defaultOutput, outputPerMessage*size)
	}
	if out.Memory <= 0 {
		out.Memory = max(defaultMemory, memoryPerOutput*out.Output)
	}
	if out.Iterations <= 0 {
		out.Iterations = defaultIterations
	}
	if out.Depth <= 0 {
		out.Depth = defaultDepth
	}
	if out.Time <= 0 {
		out.Time = defaultTime
	}
	return out
}

// LoadChatTemplate reads the chat template of the model in dir: chat_template.jinja if
// present, else tokenizer_config.json's chat_template. It returns nil, nil when the model
// has none, and an error when the template does not parse. A GGUF file (a path ending
// in .gguf) in place of dir gives its tokenizer.chat_template.
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	if gguf.IsFile(dir) {
		return ggufChatTemplate(dir)
	}
	cfg, err := readTokenizerConfig(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "chat_template.jinja")
	b, err := safefile.ReadFile(path, maxTemplateSize)
	src := string(b)
	if errors.Is(err, os.ErrNotExist) {
		path = filepath.Join(dir, "tokenizer_config.json")
		if src, err = cfg.chatTemplate(); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: chat_template: %w", path, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if src == "" {
		return nil, nil
	}
	c, err := NewChatTemplate(src, cfg.tokenString("bos_token"), cfg.tokenString("eos_token"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	c.path = path
	return c, nil
}

// NewChatTemplate compiles a Jinja chat template.
func NewChatTemplate(src, bos, eos string) (c *ChatTemplate, err error) {
	if len(src) > maxTemplateSize {
		return nil, fmt.Errorf("chat template larger than %d MiB", maxTemplateSize>>20)
	}
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("chat template does not parse: %s", clip(fmt.Sprint(r)))
		}
	}()
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	cfg.KeepTrailingNewline = false
	cfg.MaxNesting = defaultDepth
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
		ControlStructures: controlStructures(),
		Methods:           builtins.Methods,
	}
	tpl, err := exec.NewTemplate("chat_template", cfg, onlyLoader{src}, env)
	if err != nil {
		return nil, fmt.Errorf("chat template does not parse: %s", clip(err.Error()))
	}
	return &ChatTemplate{Source: src, BOS: bos, EOS: eos, tpl: tpl}, nil
}

// controlStructures are gonja's, less those that load other templates: a chat template has
// none to load, and loading itself would recurse without end.
func controlStructures() *exec.ControlStructureSet {
	set := map[string]parser.ControlStructureParser{}
	for _, name := range []string{"autoescape", "block", "break", "call", "continue", "do", "filter", "for",
		"if", "macro", "raw", "set", "trans", "with"} {
		if p, ok := builtins.ControlStructures.Get(name); ok {
			set[name] = p
		}
	}
	return exec.NewControlStructureSet(set)
}

// TemplateError is an error the template raised itself (raise_exception), e.g. for a
// conversation whose roles do not alternate.
type TemplateError struct {
	Msg  string
	Path string // the template's file; "" when not known
}

func (e *TemplateError) Error() string { return templateName(e.Path) + ": " + clip(e.Msg) }

// templateName names a template in errors: by its file when known.
func templateName(path string) string {
	if path == "" {
		return "chat template"
	}
	return "chat template " + path
}

// Render formats msgs into the prompt text; addGenerationPrompt appends the start of the
// assistant's turn. It renders within c.Limits: past one, it returns an error naming it.
func (c *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%s failed: %s", templateName(c.path), clip(fmt.Sprint(r)))
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
			raised = &TemplateError{Msg: msg, Path: c.path}
			return "", raised
		},
	})
	var b strings.Builder
	err = c.tpl.ExecuteLimited(&b, data, c.Limits.limits(msgs))
	var limit *exec.LimitError
	switch {
	case errors.As(err, &limit):
		return "", fmt.Errorf("%s: %w", templateName(c.path), limit)
	case err != nil && raised != nil:
		return "", raised
	case err != nil:
		return "", fmt.Errorf("%s failed: %s", templateName(c.path), clip(err.Error()))
	}
	return b.String(), nil
}

// clip shortens an engine's error message, which quotes values and nests a clause per
// level and so may run to megabytes for a hostile template.
func clip(msg string) string {
	const most = 1000
	if len(msg) <= most {
		return msg
	}
	return strings.ToValidUTF8(msg[:most/2], "") + " ... " + strings.ToValidUTF8(msg[len(msg)-most/2:], "")
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
	if err := writePyJSON(&buf, in.Interface(), indent, 0, params.Budget); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(buf.String())
}

// writePyJSON writes v to w; the indents, which grow with indent and depth, are checked
// against budget before they are written.
func writePyJSON(w *bytes.Buffer, v any, indent, depth int, budget *exec.Budget) error {
	if depth > 100 {
		return errors.New("nested too deeply")
	}
	nl := func(d int) error {
		if indent <= 0 {
			return nil
		}
		if err := budget.Write(w, exec.AddSizes(1, exec.MulSizes(indent, d))); err != nil {
			return err
		}
		w.WriteByte('\n')
		w.WriteString(strings.Repeat(" ", indent*d))
		return nil
	}
	sep := ", "
	if indent > 0 {
		sep = ","
	}
	switch x := v.(type) {
	case *exec.Value:
		return writePyJSON(w, x.Interface(), indent, depth, budget)
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
			if err := nl(depth + 1); err != nil {
				return err
			}
			writeJSONString(w, k)
			w.WriteString(": ")
			if err := writePyJSON(w, x[k], indent, depth+1, budget); err != nil {
				return err
			}
		}
		if err := nl(depth); err != nil {
			return err
		}
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
			if err := nl(depth + 1); err != nil {
				return err
			}
			if err := writePyJSON(w, e, indent, depth+1, budget); err != nil {
				return err
			}
		}
		if err := nl(depth); err != nil {
			return err
		}
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

// EncodeRendered tokenizes a rendered chat prompt as transformers does
// (apply_chat_template: no special tokens added, the template writes them):
// the BOS and EOS strings the template wrote become their ids. Tokenizers
// that read special tokens in text (tokenizer.json) do this themselves; for
// the others (SentencePiece) the text is split at those strings.
func EncodeRendered(t Tokenizer, text string) ([]int, error) {
	var specials []string
	ids := map[string]int{}
	for _, id := range []int{t.BOS(), t.EOS()} {
		if p := t.Piece(id); p != "" {
			if got, err := t.Encode(p, false); err == nil && len(got) == 1 && got[0] == id {
				continue // the tokenizer reads it in text by itself
			}
			specials = append(specials, p)
			ids[p] = id
		}
	}
	var out []int
	for text != "" {
		at, which := len(text), ""
		for _, s := range specials {
			if i := strings.Index(text, s); i >= 0 && i < at {
				at, which = i, s
			}
		}
		if at > 0 {
			got, err := t.Encode(text[:at], false)
			if err != nil {
				return nil, fmt.Errorf("chat: encoding the rendered template: %w", err)
			}
			out = append(out, got...)
		}
		if which == "" {
			break
		}
		out = append(out, ids[which])
		text = text[at+len(which):]
	}
	return out, nil
}
