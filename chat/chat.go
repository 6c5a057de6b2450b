// Package chat runs a loaded model for people: the completion of a prompt, or
// a conversation rendered with the model's chat template. Text is streamed as
// it is generated (never splitting a UTF-8 character), and generation ends at
// the model's end-of-sequence ids, a token limit, the end of the context or a
// stop string. A conversation keeps its history and reuses the key/value cache
// for the part of it the model has already read, so each turn prefills only
// the new tokens.
package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"lowbit/model"
	"lowbit/sched"
	"lowbit/tokenizer"
)

// Options control one generation.
type Options struct {
	// MaxTokens is the most tokens to generate (0: until the context is full).
	MaxTokens int
	// Sampler picks the tokens (the zero value is greedy).
	Sampler model.SamplerOptions
	// Stop ends generation at the first of these strings, which is left out
	// of the text.
	Stop []string
	// IgnoreEOS generates past the model's end-of-sequence ids, up to
	// MaxTokens (for benchmarks that want every request's full length).
	IgnoreEOS bool
	// OnLogprobs, when set, receives each generated token's log-probability
	// (see model.GenerateOptions) with its text, before the writer gets that
	// text.
	OnLogprobs func(TokenLogprobs)
	// TopLogprobs is how many of each step's most likely tokens OnLogprobs
	// receives.
	TopLogprobs int
}

// Logprob is a token's text and natural log-probability.
type Logprob struct {
	// Token is the text the token adds where it stands ("" for a token
	// holding only part of a character, which the next token completes).
	Token   string
	Logprob float64
}

// TokenLogprobs are a generated token's log-probability and the step's most
// likely tokens, most likely first.
type TokenLogprobs struct {
	Token   string
	Logprob float64
	Top     []Logprob
}

// Why a generation ended, in Result.Stop.
const (
	StopEOS       = model.StopEOS
	StopMaxTokens = model.StopMaxTokens
	StopContext   = model.StopContext
	StopString    = "stop_string"
)

// Result is one generation: its text, why it ended and its timings.
type Result struct {
	// Text is the generated text (without a stop string), as it follows the
	// prompt's text.
	Text string `json:"text"`
	// Stop is why generation ended: eos, max_tokens, context or stop_string.
	Stop string `json:"stop"`
	// Stats are the token counts and timings.
	Stats model.GenerateStats `json:"-"`
	// PromptTokens is the prompt's length in tokens; Stats.PromptTokens
	// counts only those prefilled after the prefix the cache held.
	PromptTokens int `json:"-"`
}

// TooLongError is a prompt (or a conversation's history) that does not fit
// the session's context; a chat can forget its history and go on.
type TooLongError struct {
	Tokens, Context int
	// Conversation: the tokens are a whole conversation, not one prompt.
	Conversation bool
}

// Error says how long the prompt is and what the context holds, leaving
// the advice to the caller (which knows its flags and commands).
func (e *TooLongError) Error() string {
	what := "prompt"
	if e.Conversation {
		what = "conversation"
	}
	return fmt.Sprintf("the %s is %d tokens but the context holds %d", what, e.Tokens, e.Context)
}

// Runner generates text with a session of its own (NewRunner), or with a
// scheduler that batches it with other generations (NewScheduled). A
// runner of its own session remembers which tokens the cache holds so that
// a following prompt sharing a prefix with them prefills only the rest
// (the scheduler does so for each of its slots); it is not safe for
// concurrent use. A scheduled runner is.
type Runner struct {
	s   *model.Session
	sc  *sched.Scheduler // nil: s is the runner's own
	tok tokenizer.Tokenizer
	fed []int // the tokens in the session's cache, in order
}

// NewRunner pairs a session with its model's tokenizer. A tokenizer whose
// vocabulary is larger than the model's would produce ids the model cannot
// embed, so it is refused.
func NewRunner(s *model.Session, tok tokenizer.Tokenizer) (*Runner, error) {
	if v := s.Model().Config.VocabSize; tok.VocabSize() > v {
		return nil, fmt.Errorf("chat: the tokenizer has %d tokens but the model's vocabulary is %d", tok.VocabSize(), v)
	}
	return &Runner{s: s, tok: tok}, nil
}

// NewScheduled generates through sc, whose generations run together, so
// that many callers (a server's requests) may use the runner at once.
func NewScheduled(sc *sched.Scheduler, tok tokenizer.Tokenizer) (*Runner, error) {
	r, err := NewRunner(sc.Session(), tok)
	if err != nil {
		return nil, err
	}
	r.sc = sc
	return r, nil
}

// Context is the most tokens a generation's prompt and output hold.
func (r *Runner) Context() int { return r.s.Context() }

// Scheduler is the scheduler a scheduled runner generates through (nil
// for a runner of its own session).
func (r *Runner) Scheduler() *sched.Scheduler { return r.sc }

// Tokenizer is the runner's tokenizer.
func (r *Runner) Tokenizer() tokenizer.Tokenizer { return r.tok }

// Complete continues text (after BOS when the model's configuration asks for
// it), writing the generated text to w as it comes (w may be nil). The
// text is exactly the continuation: text + Result.Text reads as the model
// wrote it, the first token's leading space included, as llama.cpp returns
// a completion.
func (r *Runner) Complete(ctx context.Context, text string, opts Options, w io.Writer) (Result, error) {
	ids, err := r.tok.Encode(text, tokenizer.AddBOS(r.tok))
	if err != nil {
		return Result{}, fmt.Errorf("chat: encoding the prompt: %w", err)
	}
	return r.Generate(ctx, ids, opts, w)
}

// Generate continues the token sequence ids. Where ids begins with tokens the
// session already holds, only the rest is prefilled.
func (r *Runner) Generate(ctx context.Context, ids []int, opts Options, w io.Writer) (Result, error) {
	if len(ids) == 0 {
		return Result{}, fmt.Errorf("chat: the prompt is empty")
	}
	for _, id := range ids {
		if id < 0 || id >= r.s.Model().Config.VocabSize {
			return Result{}, fmt.Errorf("chat: token id %d is outside the model's vocabulary of %d", id, r.s.Model().Config.VocabSize)
		}
	}
	if len(ids) > r.s.Context() {
		return Result{}, &TooLongError{Tokens: len(ids), Context: r.s.Context()}
	}
	sampler, err := model.NewSampler(opts.Sampler)
	if err != nil {
		return Result{}, fmt.Errorf("chat: %w", err)
	}
	out := newStream(r.tok, ids, opts.Stop, w)
	gen := model.GenerateOptions{
		MaxTokens: opts.MaxTokens,
		Sampler:   sampler,
		StopIDs:   eosIDs(r.tok),
		OnToken:   out.token,
	}
	if opts.IgnoreEOS {
		gen.StopIDs = nil
	}
	if opts.OnLogprobs != nil {
		out.onLogprobs = opts.OnLogprobs
		gen.OnLogprobs = func(lp model.TokenLogprobs) { out.logprobs = &lp }
		gen.TopLogprobs = opts.TopLogprobs
	}
	var st model.GenerateStats
	if r.sc != nil {
		st, err = r.sc.Generate(ctx, ids, gen)
		if errors.Is(err, sched.ErrQueueFull) {
			return Result{}, &BusyError{Queue: r.sc.Options().Queue}
		}
	} else {
		st, err = r.generate(ctx, ids, gen)
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Stop: st.Stop, Stats: st, PromptTokens: len(ids)}
	if out.stopped {
		res.Stop = StopString
	} else if err := out.flush(); err != nil {
		return Result{}, err
	}
	if out.err != nil {
		return Result{}, fmt.Errorf("chat: writing the output: %w", out.err)
	}
	res.Text = out.text.String()
	return res, nil
}

// generate runs ids on the runner's own session, prefilling only what
// its cache does not hold.
func (r *Runner) generate(ctx context.Context, ids []int, gen model.GenerateOptions) (model.GenerateStats, error) {
	// Keep the cached prefix; at least one token must run to give logits.
	keep := commonPrefix(r.fed, ids)
	if keep == len(ids) {
		keep--
	}
	if r.s.Pos() != len(r.fed) { // the session was used elsewhere: trust nothing
		r.s.Reset()
		r.fed, keep = nil, 0
	}
	r.s.Truncate(keep)
	r.fed = r.fed[:keep]
	st, err := model.Generate(ctx, r.s, ids[keep:], gen)
	// The session holds the prompt and the generated tokens but (unless
	// generation ended at EOS) the last one, which Generate does not feed.
	all := append(slices.Clone(ids), st.Tokens...)
	if n := r.s.Pos(); n <= len(all) {
		r.fed = all[:n]
	} else {
		r.s.Reset()
		r.fed = nil
	}
	return st, err
}

// BusyError refuses a generation when the scheduler's queue is full; the
// caller may retry later.
type BusyError struct{ Queue int }

func (e *BusyError) Error() string {
	return fmt.Sprintf("the server is busy: %d requests are already waiting; retry later", e.Queue)
}

// eosIDs are the ids that end generation: the tokenizer's end-of-sequence
// and end-of-turn ids.
func eosIDs(t tokenizer.Tokenizer) []int {
	ids := t.EOSIDs()
	if e := t.EOS(); e >= 0 && !slices.Contains(ids, e) {
		ids = append(ids, e)
	}
	return ids
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// stream turns generated tokens into text for the writer, holding back text
// that may be the start of a stop string until it is known not to be.
type stream struct {
	dec     *tokenizer.Decoder
	stops   []string
	w       io.Writer
	text    strings.Builder // all text so far, up to a stop string
	sent    int             // bytes of text written to w
	stopped bool
	err     error
	// logprobs are the next token's, to pass to onLogprobs with its text.
	logprobs   *model.TokenLogprobs
	onLogprobs func(TokenLogprobs)
}

// newStream decodes the tokens generated after prompt. The decoder reads the
// prompt first (its text is dropped), so the generated text is what follows
// the prompt's text in the decoding of the whole sequence: the first token
// keeps its leading space, which a decoder starting afresh strips as the
// start of a text (SentencePiece, HF Strip and Metaspace decoders).
func newStream(t tokenizer.Tokenizer, prompt []int, stops []string, w io.Writer) *stream {
	var nonEmpty []string
	for _, s := range stops {
		if s != "" {
			nonEmpty = append(nonEmpty, s)
		}
	}
	dec := tokenizer.NewDecoder(t)
	for _, id := range prompt {
		dec.Next(id)
	}
	dec.Flush()
	return &stream{dec: dec, stops: nonEmpty, w: w}
}

// token takes one generated id; false ends generation at a stop string.
func (s *stream) token(id int) bool {
	if lp := s.logprobs; lp != nil {
		top := make([]Logprob, len(lp.Top))
		for i, c := range lp.Top {
			top[i] = Logprob{Token: s.dec.Peek(c.ID), Logprob: c.Logprob}
		}
		s.logprobs = nil
		piece := s.dec.Next(id)
		s.onLogprobs(TokenLogprobs{Token: piece, Logprob: lp.Logprob, Top: top})
		s.add(piece, false)
		return !s.stopped && s.err == nil
	}
	s.add(s.dec.Next(id), false)
	return !s.stopped && s.err == nil
}

// flush ends the stream, writing what was held back.
func (s *stream) flush() error {
	s.add(s.dec.Flush(), true)
	return s.err
}

func (s *stream) add(piece string, final bool) {
	if s.stopped {
		return
	}
	// A stop string can begin at most its length minus one bytes before the new piece.
	from := s.text.Len()
	for _, stop := range s.stops {
		from = min(from, max(0, s.text.Len()-len(stop)+1))
	}
	s.text.WriteString(piece)
	all := s.text.String()
	cut := -1
	for _, stop := range s.stops {
		if i := strings.Index(all[from:], stop); i >= 0 && (cut < 0 || from+i < cut) {
			cut = from + i
		}
	}
	ready := len(all)
	if cut >= 0 {
		s.stopped = true
		ready = cut
		s.text.Reset()
		s.text.WriteString(all[:cut])
	} else if !final {
		ready -= heldBack(all, s.stops)
	}
	if ready > s.sent {
		if s.w != nil && s.err == nil {
			_, s.err = io.WriteString(s.w, all[s.sent:ready])
		}
		s.sent = ready
	}
}

// heldBack is the length of the longest end of text that is a proper prefix
// of a stop string.
func heldBack(text string, stops []string) int {
	best := 0
	for _, stop := range stops {
		for n := min(len(stop)-1, len(text)); n > best; n-- {
			if strings.HasSuffix(text, stop[:n]) {
				best = n
				break
			}
		}
	}
	return best
}
