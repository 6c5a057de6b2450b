package serve

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"lowbit/chat"
	"lowbit/tokenizer"
)

// generation is one request's generation, answered whole or streamed.
type generation struct {
	s        *Server
	rec      *record
	model    string
	sampling sampling
	shape    shape
	param    string // the field holding the prompt, for errors about it
	run      func(ctx context.Context, w io.Writer) (chat.Result, error)
	// logprobs, when the request asks for them, are every token's (all)
	// and those whose text no chunk has carried yet (pending); offset is
	// where the next token's text begins, in characters from the prompt's
	// start, as the legacy endpoint's text_offset counts.
	logprobs     bool
	all, pending []tokenLogprob
	offset       int
}

// tokenLogprob is a token's log-probabilities and where its text begins.
type tokenLogprob struct {
	chat.TokenLogprobs
	offset int
}

// withLogprobs asks the runner for the log-probabilities of each token
// and top of the most likely at each step; offset is the prompt's length.
func (g *generation) withLogprobs(opts *chat.Options, top, offset int) {
	g.logprobs, g.offset = true, offset
	g.all = []tokenLogprob{}
	opts.TopLogprobs = top
	opts.OnLogprobs = func(lp chat.TokenLogprobs) {
		t := tokenLogprob{lp, g.offset}
		g.offset += utf8.RuneCountInString(lp.Token)
		g.all = append(g.all, t)
		g.pending = append(g.pending, t)
	}
}

// takePending are the logprobs for the next chunk (nil when not asked for).
func (g *generation) takePending() []tokenLogprob {
	if !g.logprobs {
		return nil
	}
	p := g.pending
	g.pending = nil
	if p == nil {
		p = []tokenLogprob{}
	}
	return p
}

// shape builds one endpoint's response objects.
type shape interface {
	idPrefix() string
	// whole and chunk carry the logprobs lps unless nil.
	whole(id string, created int64, model string, res chat.Result, lps []tokenLogprob, u usage) any
	// chunk carries text; first is the stream's first chunk.
	chunk(id string, created int64, model, text string, lps []tokenLogprob, first bool) any
	// last carries the finish reason.
	last(id string, created int64, model, finish string) any
	// usage is the final chunk of a stream that asked for usage.
	usage(id string, created int64, model string, u usage) any
	// withUsageNull marks a chunk's usage null (it is present in every chunk
	// of a stream that asked for usage).
	withUsageNull(chunk any) any
}

func (g *generation) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := g.shape.idPrefix() + rand.Text()
	created := time.Now().Unix()
	var out *sse
	var stream io.Writer
	if g.sampling.streaming() {
		out = &sse{w: w, rc: http.NewResponseController(w)}
		out.onStart = func() error {
			c := g.shape.chunk(id, created, g.model, "", nil, true)
			if c == nil {
				return nil
			}
			return out.send(g.nullUsage(c))
		}
		stream = &chunkWriter{out: out, chunk: func(text string) any {
			return g.nullUsage(g.shape.chunk(id, created, g.model, text, g.takePending(), false))
		}}
	}
	res, err := g.run(ctx, stream)
	if err != nil {
		if ctx.Err() != nil {
			return // the client left, or the server stopped: nobody reads an answer
		}
		e := g.errorOf(err)
		if out != nil && out.started {
			// The status is sent: the error goes in the stream, as vLLM does.
			out.send(e.body())
			return
		}
		writeError(w, e)
		return
	}
	u := usage{PromptTokens: res.PromptTokens, CompletionTokens: res.Stats.GeneratedTokens}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	g.rec.in, g.rec.out = u.PromptTokens, u.CompletionTokens
	g.rec.timed(res.Stats)
	if out == nil {
		var lps []tokenLogprob
		if g.logprobs {
			lps = g.all
		}
		writeJSON(w, http.StatusOK, g.shape.whole(id, created, g.model, res, lps, u))
		return
	}
	if err := out.start(); err != nil {
		return
	}
	// Tokens whose text never came (held back at a stop string, or empty)
	// still had their logprobs reported: a last chunk without text carries them.
	if len(g.pending) > 0 && out.send(g.nullUsage(g.shape.chunk(id, created, g.model, "", g.takePending(), false))) != nil {
		return
	}
	if out.send(g.nullUsage(g.shape.last(id, created, g.model, finishReason(res.Stop)))) != nil {
		return
	}
	if g.sampling.includeUsage() && out.send(g.shape.usage(id, created, g.model, u)) != nil {
		return
	}
	out.done()
}

func (g *generation) nullUsage(c any) any {
	if g.sampling.includeUsage() {
		return g.shape.withUsageNull(c)
	}
	return c
}

// errorOf turns a generation's error into the API's answer.
func (g *generation) errorOf(err error) *apiError {
	var tooLong *chat.TooLongError
	var tplErr *tokenizer.TemplateError
	var busy *chat.BusyError
	switch {
	case errors.As(err, &busy):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "queue_full", retryAfter: 1, message: busy.Error()}
	case errors.As(err, &tooLong):
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: g.param, code: "context_length_exceeded",
			message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your %s resulted in %d tokens.", tooLong.Context, g.param, tooLong.Tokens)}
	case errors.As(err, &tplErr):
		return invalid(g.param, "the model's chat template refused the messages: "+tplErr.Error())
	}
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", message: err.Error()}
}

// sse writes server-sent events. The status and headers go out with the
// first event, so that an error found before any text is still answered
// with its own status.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	onStart func() error
}

func (s *sse) start() error {
	if s.started {
		return nil
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	return s.onStart()
}

// send writes one event holding v as JSON.
func (s *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := s.start(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// done ends the stream as OpenAI does.
func (s *sse) done() {
	io.WriteString(s.w, "data: [DONE]\n\n")
	s.rc.Flush()
}

// chunkWriter sends each piece of text the runner writes as one chunk.
type chunkWriter struct {
	out   *sse
	chunk func(text string) any
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.out.send(c.chunk(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// chatShape builds chat.completion and chat.completion.chunk objects.
type chatShape struct{}

func (chatShape) idPrefix() string { return "chatcmpl-" }

func (chatShape) whole(id string, created int64, model string, res chat.Result, lps []tokenLogprob, u usage) any {
	return chatCompletion{ID: id, Object: "chat.completion", Created: created, Model: model, Usage: u,
		Choices: []chatChoice{{Message: assistantMessage{Role: "assistant", Content: res.Text}, Logprobs: chatLogprobsOf(lps), FinishReason: finishReason(res.Stop)}}}
}

func (chatShape) chunk(id string, created int64, model, text string, lps []tokenLogprob, first bool) any {
	d := delta{Content: &text}
	if first {
		d.Role = "assistant"
	}
	return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chunkChoice{{Delta: d, Logprobs: chatLogprobsOf(lps)}}}
}

// chatLogprobsOf shapes lps as a chat choice's logprobs (nil: none asked for).
func chatLogprobsOf(lps []tokenLogprob) *chatLogprobs {
	if lps == nil {
		return nil
	}
	c := &chatLogprobs{Content: make([]chatTokenLogprob, len(lps))}
	for i, lp := range lps {
		top := make([]chatLogprob, len(lp.Top))
		for j, t := range lp.Top {
			top[j] = chatLogprobOf(t)
		}
		c.Content[i] = chatTokenLogprob{chatLogprobOf(chat.Logprob{Token: lp.Token, Logprob: lp.Logprob}), top}
	}
	return c
}

func chatLogprobOf(lp chat.Logprob) chatLogprob {
	b := make([]int, len(lp.Token))
	for i := range len(lp.Token) {
		b[i] = int(lp.Token[i])
	}
	return chatLogprob{Token: lp.Token, Logprob: jsonLogprob(lp.Logprob), Bytes: b}
}

func (chatShape) last(id string, created int64, model, finish string) any {
	return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chunkChoice{{FinishReason: &finish}}}
}

func (chatShape) usage(id string, created int64, model string, u usage) any {
	return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chunkChoice{}, Usage: u}
}

func (chatShape) withUsageNull(c any) any {
	cc := c.(chatChunk)
	cc.Usage = jsonNull
	return cc
}

// textShape builds text_completion objects, whole and streamed.
type textShape struct{}

func (textShape) idPrefix() string { return "cmpl-" }

func (textShape) whole(id string, created int64, model string, res chat.Result, lps []tokenLogprob, u usage) any {
	finish := finishReason(res.Stop)
	return textCompletion{ID: id, Object: "text_completion", Created: created, Model: model, Usage: u,
		Choices: []textChoice{{Text: res.Text, Logprobs: textLogprobsOf(lps), FinishReason: &finish}}}
}

func (textShape) chunk(id string, created int64, model, text string, lps []tokenLogprob, first bool) any {
	if first {
		return nil // a completion's stream begins with its text
	}
	return textCompletion{ID: id, Object: "text_completion", Created: created, Model: model, Choices: []textChoice{{Text: text, Logprobs: textLogprobsOf(lps)}}}
}

// textLogprobsOf shapes lps as a completion choice's logprobs (nil: none
// asked for). Each step's top tokens include the chosen one, as OpenAI's
// do; of tokens with the same text the likelier stands.
func textLogprobsOf(lps []tokenLogprob) *textLogprobs {
	if lps == nil {
		return nil
	}
	t := &textLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, lp := range lps {
		top := map[string]float64{}
		for _, c := range append(slices.Clone(lp.Top), chat.Logprob{Token: lp.Token, Logprob: lp.Logprob}) {
			if _, ok := top[c.Token]; !ok {
				top[c.Token] = jsonLogprob(c.Logprob)
			}
		}
		t.Tokens = append(t.Tokens, lp.Token)
		t.TokenLogprobs = append(t.TokenLogprobs, jsonLogprob(lp.Logprob))
		t.TopLogprobs = append(t.TopLogprobs, top)
		t.TextOffset = append(t.TextOffset, lp.offset)
	}
	return t
}

func (textShape) last(id string, created int64, model, finish string) any {
	return textCompletion{ID: id, Object: "text_completion", Created: created, Model: model, Choices: []textChoice{{FinishReason: &finish}}}
}

func (textShape) usage(id string, created int64, model string, u usage) any {
	return textCompletion{ID: id, Object: "text_completion", Created: created, Model: model, Choices: []textChoice{}, Usage: u}
}

func (textShape) withUsageNull(c any) any {
	tc := c.(textCompletion)
	tc.Usage = jsonNull
	return tc
}
