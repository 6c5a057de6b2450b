package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

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
// w as it comes) and adds it to the history. On error the history is as
// before the call.
func (c *Conversation) Send(ctx context.Context, user string, opts Options, w io.Writer) (Result, error) {
	msgs := append(slices.Clone(c.msgs), tokenizer.Message{Role: "user", Content: user})
	prompt, err := c.tpl.Render(msgs, true)
	if err != nil {
		return Result{}, err
	}
	ids, err := encodeRendered(c.r.tok, prompt)
	if err != nil {
		return Result{}, err
	}
	if len(ids) > c.r.s.Context() {
		return Result{}, fmt.Errorf("chat: the conversation is %d tokens but the context holds %d: /reset it or raise --ctx", len(ids), c.r.s.Context())
	}
	res, err := c.r.Generate(ctx, ids, opts, w)
	if err != nil {
		return Result{}, err
	}
	c.msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: strings.TrimSpace(res.Text)})
	return res, nil
}

// encodeRendered tokenizes a rendered chat prompt as transformers does
// (apply_chat_template: no special tokens added, the template writes them):
// the BOS and EOS strings the template wrote become their ids. Tokenizers
// that read special tokens in text (tokenizer.json) do this themselves; for
// the others (SentencePiece) the text is split at those strings.
func encodeRendered(t tokenizer.Tokenizer, text string) ([]int, error) {
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
