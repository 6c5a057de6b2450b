package chat

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"lowbit/tokenizer"
)

// ErrNoTemplate is returned by NewConversation for a model without a chat
// template; such a model can still complete plain text.
var ErrNoTemplate = errors.New("chat: the model has no chat template")

// Conversation is a chat with a model: each turn renders the whole history
// with the model's chat template, and the runner prefills only the tokens
// its cache does not hold yet.
type Conversation struct {
	r      *Runner
	tpl    *tokenizer.ChatTemplate
	system string
	msgs   []tokenizer.Message
}

// NewConversation starts a chat; system, when not empty, is the system
// message of every turn.
func NewConversation(r *Runner, tpl *tokenizer.ChatTemplate, system string) (*Conversation, error) {
	if tpl == nil {
		return nil, ErrNoTemplate
	}
	c := &Conversation{r: r, tpl: tpl, system: system}
	c.Reset()
	return c, nil
}

// SetSystem replaces the system message ("": none) and forgets the
// history, which was written under the old one.
func (c *Conversation) SetSystem(system string) {
	c.system = system
	c.Reset()
}

// Reset forgets the history (the system message stays).
func (c *Conversation) Reset() {
	c.msgs = nil
	if c.system != "" {
		c.msgs = []tokenizer.Message{{Role: "system", Content: c.system}}
	}
}

// Messages is the history so far.
func (c *Conversation) Messages() []tokenizer.Message { return slices.Clone(c.msgs) }

// Send adds the user's message, generates the assistant's reply (written to
// w as it comes, without the white space a reply may begin with) and adds it
// to the history. On error, a cancelled ctx included, the history is as
// before the call: a reply cut short is not kept (as Ollama drops it), and
// neither is the message it answered, so that the roles still alternate as
// many templates demand.
func (c *Conversation) Send(ctx context.Context, user string, opts Options, w io.Writer) (Result, error) {
	msgs := append(slices.Clone(c.msgs), tokenizer.Message{Role: "user", Content: user})
	res, err := c.r.Reply(ctx, c.tpl, msgs, opts, w)
	if err != nil {
		return Result{}, err
	}
	c.msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: strings.TrimSpace(res.Text)})
	return res, nil
}

// Reply generates the assistant's next message after msgs, a whole
// conversation rendered with tpl: the text is written to w as it comes and
// returned, both without the white space it may begin with. It keeps no
// history, so a server can answer each request's messages as they are
// given (the cache still spares the prefix they share with the last ones).
func (r *Runner) Reply(ctx context.Context, tpl *tokenizer.ChatTemplate, msgs []tokenizer.Message, opts Options, w io.Writer) (Result, error) {
	if tpl == nil {
		return Result{}, ErrNoTemplate
	}
	prompt, err := tpl.Render(msgs, true)
	if err != nil {
		return Result{}, err
	}
	ids, err := tokenizer.EncodeRendered(r.tok, prompt)
	if err != nil {
		return Result{}, err
	}
	if len(ids) > r.Context() {
		return Result{}, &TooLongError{Tokens: len(ids), Context: r.Context(), Conversation: true}
	}
	var out io.Writer
	if w != nil {
		out = &trimLeft{w: w}
	}
	res, err := r.Generate(ctx, ids, opts, out)
	if err != nil {
		return Result{}, err
	}
	res.Text = strings.TrimLeftFunc(res.Text, unicode.IsSpace)
	return res, nil
}

// trimLeft writes what it is given without the white space it begins with:
// a reply often starts with the space or newline that follows the
// template's assistant header, which the history does not keep either.
// Writes are whole UTF-8 characters (the stream never splits one).
type trimLeft struct {
	w       io.Writer
	started bool
}

func (t *trimLeft) Write(p []byte) (int, error) {
	if t.started {
		return t.w.Write(p)
	}
	rest := p
	for len(rest) > 0 {
		r, n := utf8.DecodeRune(rest)
		if !unicode.IsSpace(r) {
			t.started = true
			break
		}
		rest = rest[n:]
	}
	if len(rest) == 0 {
		return len(p), nil
	}
	if _, err := t.w.Write(rest); err != nil {
		return 0, err
	}
	return len(p), nil
}
