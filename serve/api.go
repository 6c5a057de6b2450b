package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"

	"lowbit/chat"
	"lowbit/model"
	"lowbit/tokenizer"
)

// The request bodies, as OpenAI's API reference names their fields. A field
// outside them is refused (as OpenAI refuses an unrecognized argument) so
// that a request never means more than the server does.

// chatRequest is POST /v1/chat/completions' body.
type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	Logprobs    *bool         `json:"logprobs"`
	TopLogprobs *int          `json:"top_logprobs"`
	sampling
}

// completionRequest is POST /v1/completions' body.
type completionRequest struct {
	Model    string      `json:"model"`
	Prompt   *stringList `json:"prompt"`
	Logprobs *int        `json:"logprobs"`
	Echo     *bool       `json:"echo"`
	Suffix   *string     `json:"suffix"`
	BestOf   *int        `json:"best_of"`
	sampling
}

func (r *chatRequest) modelName() string       { return r.Model }
func (r *completionRequest) modelName() string { return r.Model }

// sampling are the fields both endpoints share.
type sampling struct {
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	TopK                *int               `json:"top_k"`
	MinP                *float64           `json:"min_p"`
	Stop                *stringList        `json:"stop"`
	Seed                *int64             `json:"seed"`
	Stream              *bool              `json:"stream"`
	StreamOptions       *streamOptions     `json:"stream_options"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	N                   *int               `json:"n"`
	User                *string            `json:"user"`
	LogitBias           map[string]float64 `json:"logit_bias"`
	// vLLM's and llama-server's extensions: the sampler's repetition
	// penalty, and generation past the end-of-sequence ids (benchmarks).
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	IgnoreEOS         *bool    `json:"ignore_eos"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one message of a chat request; Name is accepted and, as
// the templates have no place for it, not rendered.
type chatMessage struct {
	Role    string       `json:"role"`
	Content *chatContent `json:"content"`
	Name    *string      `json:"name"`
}

// chatContent is a message's content: a string, or an array of text parts.
type chatContent string

func (c *chatContent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = chatContent(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&parts); err != nil {
		return typeError(b, c)
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return typeError(b, c)
		}
		sb.WriteString(p.Text)
	}
	*c = chatContent(sb.String())
	return nil
}

// stringList is a string or an array of strings (stop, prompt).
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = stringList{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return typeError(b, l)
	}
	*l = ss
	return nil
}

// typeError is the error of a value b that v's type does not take; the
// decoder adds the field's name to it.
func typeError(b []byte, v any) error {
	return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: reflect.TypeOf(v).Elem()}
}

// jsonValueKind names the JSON type of the value b.
func jsonValueKind(b []byte) string {
	switch b = bytes.TrimSpace(b); {
	case len(b) == 0:
		return "value"
	case b[0] == '"':
		return "string"
	case b[0] == '[':
		return "array"
	case b[0] == '{':
		return "object"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	case b[0] == 'n':
		return "null"
	}
	return "number"
}

// The responses, as OpenAI's API reference shapes them.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     *chatLogprobs    `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
}

type assistantMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	// Usage is null in every chunk but the last, which has no choices,
	// when the request asked for it (stream_options.include_usage); absent
	// otherwise.
	Usage any `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int           `json:"index"`
	Delta        delta         `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   any          `json:"usage,omitempty"`
}

type textChoice struct {
	Text         string        `json:"text"`
	Index        int           `json:"index"`
	Logprobs     *textLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// chatLogprobs are a chat choice's token log-probabilities.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	chatLogprob
	TopLogprobs []chatLogprob `json:"top_logprobs"`
}

type chatLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// textLogprobs are a completion choice's token log-probabilities, in the
// legacy endpoint's parallel arrays.
type textLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// Bounds of the requests' logprobs fields, as OpenAI's.
const (
	maxTopLogprobs        = 20
	maxCompletionLogprobs = 5
)

// logprobFloor stands for an impossible token's -Inf, which JSON cannot
// carry, as OpenAI's -9999.
const logprobFloor = -9999

func jsonLogprob(v float64) float64 {
	if !(v > logprobFloor) {
		return logprobFloor
	}
	return v
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// jsonNull is a field present with the value null.
var jsonNull = json.RawMessage("null")

// maxStops is as many stop strings as OpenAI takes.
const maxStops = 4

// defaultCompletionTokens is OpenAI's max_tokens default of the
// completions endpoint; a chat's reply runs until the end of the context.
const defaultCompletionTokens = 16

// options turns the sampling fields into the runner's options (defaults as
// OpenAI's: temperature 1, top_p 1). seed is the seed when none is given.
// A field the sampler cannot honour is refused by name, never approximated.
func (s sampling) options(defaultMax int, seed uint64) (chat.Options, *apiError) {
	o := chat.Options{MaxTokens: defaultMax, Sampler: model.SamplerOptions{Temperature: 1, RepeatPenalty: 1, Seed: seed}}
	bad := func(param, format string, args ...any) (chat.Options, *apiError) {
		return chat.Options{}, invalid(param, param+": "+fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", s.MaxTokens}, {"max_completion_tokens", s.MaxCompletionTokens}} {
		if f.v != nil {
			if *f.v < 1 {
				return bad(f.name, "%d: want 1 or more", *f.v)
			}
			o.MaxTokens = *f.v
		}
	}
	if v := s.Temperature; v != nil {
		if !(*v >= 0 && *v <= 2) {
			return bad("temperature", "%v: want 0 (greedy) to 2", *v)
		}
		o.Sampler.Temperature = float32(*v)
	}
	if v := s.TopP; v != nil {
		if !(*v > 0 && *v <= 1) {
			return bad("top_p", "%v: want more than 0, up to 1", *v)
		}
		o.Sampler.TopP = float32(*v)
	}
	if v := s.TopK; v != nil {
		if *v < -1 {
			return bad("top_k", "%d: want -1 or 0 (all tokens) or more", *v)
		}
		o.Sampler.TopK = max(*v, 0)
	}
	if v := s.MinP; v != nil {
		if !(*v >= 0 && *v <= 1) {
			return bad("min_p", "%v: want 0 to 1", *v)
		}
		o.Sampler.MinP = float32(*v)
	}
	if s.Stop != nil {
		if len(*s.Stop) > maxStops {
			return bad("stop", "%d strings: want at most %d", len(*s.Stop), maxStops)
		}
		o.Stop = *s.Stop
	}
	if s.Seed != nil {
		o.Sampler.Seed = uint64(*s.Seed)
	}
	if v := s.RepetitionPenalty; v != nil {
		if !(*v > 0 && *v <= 10) {
			return bad("repetition_penalty", "%v: want more than 0, up to 10 (1: none)", *v)
		}
		o.Sampler.RepeatPenalty = float32(*v)
	}
	o.IgnoreEOS = s.IgnoreEOS != nil && *s.IgnoreEOS
	// The sampler's repetition penalty divides logits; OpenAI's penalties
	// subtract from them, so neither maps onto it.
	for _, f := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", s.PresencePenalty}, {"frequency_penalty", s.FrequencyPenalty}} {
		if f.v != nil && *f.v != 0 {
			return bad(f.name, "%v: lowbit's sampler has no such penalty; only 0 is supported", *f.v)
		}
	}
	if s.N != nil && *s.N != 1 {
		return bad("n", "%d: only 1 choice per request is supported", *s.N)
	}
	for _, b := range s.LogitBias {
		if b != 0 || math.IsNaN(b) {
			return bad("logit_bias", "not supported (only an empty map)")
		}
	}
	if s.StreamOptions != nil && !s.streaming() {
		return bad("stream_options", "only allowed with stream: true")
	}
	return o, nil
}

func (s sampling) streaming() bool { return s.Stream != nil && *s.Stream }

func (s sampling) includeUsage() bool { return s.StreamOptions != nil && s.StreamOptions.IncludeUsage }

// check refuses what the chat endpoint cannot do and returns the messages.
func (r *chatRequest) check() ([]tokenizer.Message, *apiError) {
	if v := r.TopLogprobs; v != nil {
		if *v < 0 || *v > maxTopLogprobs {
			return nil, invalid("top_logprobs", fmt.Sprintf("top_logprobs: %d: want 0 to %d", *v, maxTopLogprobs))
		}
		if !r.logprobs() {
			return nil, invalid("top_logprobs", "top_logprobs: only allowed with logprobs: true")
		}
	}
	if len(r.Messages) == 0 {
		return nil, invalid("messages", "messages: want at least one message")
	}
	msgs := make([]tokenizer.Message, len(r.Messages))
	for i, m := range r.Messages {
		role := m.Role
		switch role {
		case "developer": // OpenAI's newer name for the system message
			role = "system"
		case "system", "user", "assistant":
		default:
			return nil, invalid(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("messages[%d].role: %q: want system, developer, user or assistant", i, m.Role))
		}
		if m.Content == nil {
			return nil, invalid(fmt.Sprintf("messages[%d].content", i), fmt.Sprintf("messages[%d].content: missing", i))
		}
		msgs[i] = tokenizer.Message{Role: role, Content: string(*m.Content)}
	}
	return msgs, nil
}

func (r *chatRequest) logprobs() bool { return r.Logprobs != nil && *r.Logprobs }

// check refuses what the completions endpoint cannot do and returns the prompt.
func (r *completionRequest) check() (string, *apiError) {
	switch {
	case r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > maxCompletionLogprobs):
		return "", invalid("logprobs", fmt.Sprintf("logprobs: %d: want 0 to %d", *r.Logprobs, maxCompletionLogprobs))
	case r.Echo != nil && *r.Echo:
		return "", invalid("echo", "echo: not supported")
	case r.Suffix != nil && *r.Suffix != "":
		return "", invalid("suffix", "suffix: not supported")
	case r.BestOf != nil && *r.BestOf != 1:
		return "", invalid("best_of", "best_of: only 1 is supported")
	case r.Prompt == nil:
		return "", invalid("prompt", "prompt: missing")
	case len(*r.Prompt) != 1:
		return "", invalid("prompt", fmt.Sprintf("prompt: an array of %d strings: one prompt per request is supported", len(*r.Prompt)))
	case (*r.Prompt)[0] == "":
		return "", invalid("prompt", "prompt: empty")
	}
	return (*r.Prompt)[0], nil
}

// finishReason is OpenAI's name for why generation ended.
func finishReason(stop string) string {
	if stop == chat.StopMaxTokens || stop == chat.StopContext {
		return "length"
	}
	return "stop"
}
