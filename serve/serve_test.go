package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"lowbit/serve/servetest"
)

// tinyModel serves the fixture model as name.
func tinyModel(t testing.TB, name string, withTemplate bool, o servetest.Options) Model {
	r, tpl := servetest.Runner(t, withTemplate, o)
	return Model{Name: name, Runner: r, Template: tpl}
}

// testSlots are the sequences each test model generates at once.
const testSlots = 4

// newTestServer serves a chat model "tiny" and a plain one "plain", each
// generating testSlots requests at once.
func newTestServer(t testing.TB, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	return newTestServerWith(t, opts, servetest.Options{Slots: testSlots})
}

// newTestServerWith is newTestServer with the models' scheduling o.
func newTestServerWith(t testing.TB, opts Options, o servetest.Options) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New([]Model{tinyModel(t, "tiny", true, o), tinyModel(t, "plain", false, o)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t testing.TB, ts *httptest.Server, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// decodeStrict decodes r into v, refusing fields OpenAI's schema lacks.
func decodeStrict(t testing.TB, r io.Reader, v any) {
	t.Helper()
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %T: %v", v, err)
	}
}

// The response schemas the client side expects, mirroring OpenAI's
// published ones; pointers mark fields whose presence is checked.
type (
	wantUsage struct {
		PromptTokens     *int `json:"prompt_tokens"`
		CompletionTokens *int `json:"completion_tokens"`
		TotalTokens      *int `json:"total_tokens"`
	}
	wantChatCompletion struct {
		ID      *string `json:"id"`
		Object  *string `json:"object"`
		Created *int64  `json:"created"`
		Model   *string `json:"model"`
		Choices []struct {
			Index   *int `json:"index"`
			Message struct {
				Role    *string `json:"role"`
				Content *string `json:"content"`
				Refusal *string `json:"refusal"`
			} `json:"message"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage *wantUsage `json:"usage"`
	}
	wantChatChunk struct {
		ID      *string `json:"id"`
		Object  *string `json:"object"`
		Created *int64  `json:"created"`
		Model   *string `json:"model"`
		Choices []struct {
			Index *int `json:"index"`
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	wantTextCompletion struct {
		ID      *string `json:"id"`
		Object  *string `json:"object"`
		Created *int64  `json:"created"`
		Model   *string `json:"model"`
		Choices []struct {
			Text         *string         `json:"text"`
			Index        *int            `json:"index"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	wantError struct {
		Error struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
)

func checkUsage(t testing.TB, u *wantUsage, completion int) {
	t.Helper()
	if u == nil || u.PromptTokens == nil || u.CompletionTokens == nil || u.TotalTokens == nil {
		t.Fatalf("usage %+v: fields missing", u)
	}
	if *u.PromptTokens < 1 || *u.CompletionTokens != completion || *u.TotalTokens != *u.PromptTokens+*u.CompletionTokens {
		t.Errorf("usage %d + %d = %d: want %d completion tokens", *u.PromptTokens, *u.CompletionTokens, *u.TotalTokens, completion)
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	decodeStrict(t, resp.Body, &list)
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "tiny" || list.Data[1].ID != "plain" || list.Data[0].Object != "model" || list.Data[0].Created == 0 {
		t.Errorf("models %+v", list)
	}
	resp, err = http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health: %s", resp.Status)
	}
}

func TestChatCompletion(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	resp := post(t, ts, "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "the cat"}]}], "max_tokens": 5, "temperature": 0, "ignored": null}`)
	if resp.StatusCode != 400 {
		t.Fatalf("an unknown field: %s, want 400", resp.Status)
	}
	resp = post(t, ts, "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "the cat"}]}], "max_tokens": 5, "temperature": 0, "seed": 3, "stop": "zzz"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %s", resp.Status)
	}
	var c wantChatCompletion
	decodeStrict(t, resp.Body, &c)
	if c.ID == nil || !strings.HasPrefix(*c.ID, "chatcmpl-") || c.Object == nil || *c.Object != "chat.completion" || c.Created == nil || c.Model == nil || *c.Model != "tiny" || len(c.Choices) != 1 {
		t.Fatalf("completion %+v", c)
	}
	ch := c.Choices[0]
	if ch.Index == nil || ch.Message.Role == nil || *ch.Message.Role != "assistant" || ch.Message.Content == nil || string(ch.Logprobs) != "null" || ch.FinishReason == nil {
		t.Fatalf("choice %+v", ch)
	}
	if *ch.FinishReason != "length" && *ch.FinishReason != "stop" {
		t.Errorf("finish_reason %q", *ch.FinishReason)
	}
	if *ch.FinishReason == "length" {
		checkUsage(t, c.Usage, 5)
	}
}

// readSSE reads a stream's events up to [DONE], which must end it.
func readSSE(t testing.TB, body io.Reader) [][]byte {
	t.Helper()
	var events [][]byte
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("a line that is no event: %q", line)
		}
		if data == "[DONE]" {
			if sc.Scan() && sc.Text() != "" || sc.Scan() {
				t.Fatalf("more after [DONE]: %q", sc.Text())
			}
			return events
		}
		events = append(events, []byte(data))
	}
	t.Fatalf("the stream ended without [DONE] (%v)", sc.Err())
	return nil
}

func TestChatStream(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	for _, includeUsage := range []bool{false, true} {
		body := fmt.Sprintf(`{"model": "tiny", "messages": [{"role": "user", "content": "the cat"}], "max_completion_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": %v}}`, includeUsage)
		resp := post(t, ts, "/v1/chat/completions", body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %s, %s", resp.Status, resp.Header.Get("Content-Type"))
		}
		events := readSSE(t, resp.Body)
		var chunks []wantChatChunk
		for _, e := range events {
			var c wantChatChunk
			decodeStrict(t, bytes.NewReader(e), &c)
			if c.ID == nil || !strings.HasPrefix(*c.ID, "chatcmpl-") || c.Object == nil || *c.Object != "chat.completion.chunk" || c.Created == nil || c.Model == nil || *c.Model != "tiny" {
				t.Fatalf("chunk %s", e)
			}
			if *c.ID != *chunks0(chunks, c).ID {
				t.Errorf("chunk ids differ: %s", e)
			}
			if includeUsage != (c.Usage != nil) {
				t.Errorf("include_usage %v: chunk %s", includeUsage, e)
			}
			chunks = append(chunks, c)
		}
		if includeUsage {
			last := chunks[len(chunks)-1]
			var u wantUsage
			decodeStrict(t, bytes.NewReader(last.Usage), &u)
			if len(last.Choices) != 0 {
				t.Errorf("the usage chunk has choices")
			}
			checkUsage(t, &u, 6)
			chunks = chunks[:len(chunks)-1]
		}
		if len(chunks) < 2 || chunks[0].Choices[0].Delta.Role != "assistant" {
			t.Fatalf("the first chunk is not the assistant's: %s", events[0])
		}
		end := chunks[len(chunks)-1].Choices[0]
		if end.FinishReason == nil || *end.FinishReason != "length" || end.Delta.Content != nil {
			t.Errorf("the last chunk: %s", events[len(chunks)-1])
		}
		for _, c := range chunks[:len(chunks)-1] {
			if c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Content == nil || string(c.Choices[0].Logprobs) != "null" {
				t.Errorf("a middle chunk: %+v", c.Choices[0])
			}
		}
	}
}

func chunks0(chunks []wantChatChunk, c wantChatChunk) wantChatChunk {
	if len(chunks) == 0 {
		return c
	}
	return chunks[0]
}

// TestCompletion checks /v1/completions whole and streamed: the streamed
// text is the whole one (same seed), and the first token's space is kept.
func TestCompletion(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	const req = `{"model": "plain", "prompt": %s, "max_tokens": 8, "temperature": 0.9, "top_k": 20, "top_p": 0.9, "min_p": 0.01, "seed": 7, "presence_penalty": 0, "stream": %v}`
	resp := post(t, ts, "/v1/completions", fmt.Sprintf(req, `["the cat"]`, false))
	if resp.StatusCode != 200 {
		t.Fatalf("status %s", resp.Status)
	}
	var c wantTextCompletion
	decodeStrict(t, resp.Body, &c)
	if c.ID == nil || !strings.HasPrefix(*c.ID, "cmpl-") || *c.Object != "text_completion" || *c.Model != "plain" || len(c.Choices) != 1 || c.Choices[0].Text == nil || *c.Choices[0].FinishReason != "length" {
		t.Fatalf("completion %+v", c)
	}
	var u wantUsage
	decodeStrict(t, bytes.NewReader(c.Usage), &u)
	checkUsage(t, &u, 8)

	resp = post(t, ts, "/v1/completions", fmt.Sprintf(req, `"the cat"`, true))
	var text strings.Builder
	events := readSSE(t, resp.Body)
	for i, e := range events {
		var chunk wantTextCompletion
		decodeStrict(t, bytes.NewReader(e), &chunk)
		if *chunk.Object != "text_completion" || len(chunk.Choices) != 1 || chunk.Usage != nil {
			t.Fatalf("chunk %s", e)
		}
		if last := i == len(events)-1; last != (chunk.Choices[0].FinishReason != nil) {
			t.Errorf("chunk %d of %d: %s", i, len(events), e)
		}
		text.WriteString(*chunk.Choices[0].Text)
	}
	if text.String() != *c.Choices[0].Text {
		t.Errorf("streamed %q, whole %q", text.String(), *c.Choices[0].Text)
	}
}

// TestErrors: each malformed or refused request gets its status and an
// error in OpenAI's shape naming the field, and the server keeps serving.
func TestErrors(t *testing.T) {
	_, ts := newTestServer(t, Options{MaxBodyBytes: 4096})
	long := strings.Repeat("a ", 300)
	cases := []struct {
		name, path, body string
		status           int
		param, code      string
		says             string
	}{
		{"not JSON", "/v1/completions", `{"model": `, 400, "", "", "not valid JSON"},
		{"empty body", "/v1/completions", ``, 400, "", "", "empty"},
		{"two objects", "/v1/completions", `{"model": "plain", "prompt": "a"} {}`, 400, "", "", "more after"},
		{"unknown field", "/v1/completions", `{"model": "plain", "prompt": "a", "tools": []}`, 400, "tools", "", "unrecognized request argument supplied: tools"},
		{"wrong type", "/v1/completions", `{"model": "plain", "prompt": "a", "max_tokens": "5"}`, 400, "max_tokens", "", "want an integer"},
		{"prompt of tokens", "/v1/completions", `{"model": "plain", "prompt": [1, 2]}`, 400, "prompt", "", "a string or an array of strings"},
		{"two prompts", "/v1/completions", `{"model": "plain", "prompt": ["a", "b"]}`, 400, "prompt", "", "one prompt per request"},
		{"no prompt", "/v1/completions", `{"model": "plain"}`, 400, "prompt", "", "missing"},
		{"no model", "/v1/completions", `{"prompt": "a"}`, 400, "model", "", "missing"},
		{"unknown model", "/v1/completions", `{"model": "gpt-4", "prompt": "a"}`, 404, "model", "model_not_found", "tiny, plain"},
		{"temperature", "/v1/completions", `{"model": "plain", "prompt": "a", "temperature": 3}`, 400, "temperature", "", "0 (greedy) to 2"},
		{"top_p", "/v1/completions", `{"model": "plain", "prompt": "a", "top_p": 0}`, 400, "top_p", "", "more than 0"},
		{"max_tokens", "/v1/completions", `{"model": "plain", "prompt": "a", "max_tokens": 0}`, 400, "max_tokens", "", "1 or more"},
		{"stops", "/v1/completions", `{"model": "plain", "prompt": "a", "stop": ["a", "b", "c", "d", "e"]}`, 400, "stop", "", "at most 4"},
		{"repetition_penalty", "/v1/completions", `{"model": "plain", "prompt": "a", "repetition_penalty": 0}`, 400, "repetition_penalty", "", "more than 0"},
		{"presence", "/v1/completions", `{"model": "plain", "prompt": "a", "presence_penalty": 0.5}`, 400, "presence_penalty", "", "only 0"},
		{"frequency", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "frequency_penalty": 1}`, 400, "frequency_penalty", "", "only 0"},
		{"logprobs above 5", "/v1/completions", `{"model": "plain", "prompt": "a", "logprobs": 6}`, 400, "logprobs", "", "logprobs: 6: want 0 to 5"},
		{"logprobs below 0", "/v1/completions", `{"model": "plain", "prompt": "a", "logprobs": -1}`, 400, "logprobs", "", "logprobs: -1: want 0 to 5"},
		{"top_logprobs above 20", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21}`, 400, "top_logprobs", "", "top_logprobs: 21: want 0 to 20"},
		{"top_logprobs alone", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "top_logprobs": 2}`, 400, "top_logprobs", "", "only allowed with logprobs: true"},
		{"top_logprobs with logprobs false", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "logprobs": false, "top_logprobs": 0}`, 400, "top_logprobs", "", "only allowed with logprobs: true"},
		{"n", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "n": 2}`, 400, "n", "", "only 1"},
		{"stream_options alone", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "stream_options": {"include_usage": true}}`, 400, "stream_options", "", "stream: true"},
		{"role", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "tool", "content": "a"}]}`, 400, "messages[0].role", "", "want system"},
		{"image", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, 400, "messages.content", "", "text parts"},
		{"no messages", "/v1/chat/completions", `{"model": "tiny", "messages": []}`, 400, "messages", "", "at least one"},
		{"no template", "/v1/chat/completions", `{"model": "plain", "messages": [{"role": "user", "content": "a"}]}`, 400, "messages", "", "no chat template"},
		{"long prompt", "/v1/completions", `{"model": "plain", "prompt": "` + long + `"}`, 400, "prompt", "context_length_exceeded", "maximum context length is 256 tokens"},
		{"long chat", "/v1/chat/completions", `{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "` + long + `"}]}`, 400, "messages", "context_length_exceeded", "maximum context length"},
		{"body too large", "/v1/completions", `{"model": "plain", "prompt": "` + strings.Repeat("a", 5000) + `"}`, 413, "", "request_too_large", "4096 bytes"},
		{"unknown URL", "/v1/embeddings", `{}`, 404, "", "unknown_url", "POST /v1/embeddings"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := post(t, ts, c.path, c.body)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("status %s (%s), want %d", resp.Status, resp.Header.Get("Content-Type"), c.status)
			}
			var e wantError
			decodeStrict(t, resp.Body, &e)
			if e.Error.Message == nil || e.Error.Type == nil || !strings.Contains(*e.Error.Message, c.says) {
				t.Fatalf("error %+v: want a message saying %q", e.Error, c.says)
			}
			if got := deref(e.Error.Param); got != c.param {
				t.Errorf("param %q, want %q (%s)", got, c.param, *e.Error.Message)
			}
			if got := deref(e.Error.Code); got != c.code {
				t.Errorf("code %q, want %q", got, c.code)
			}
		})
	}
	// Still serving.
	if resp := post(t, ts, "/v1/completions", `{"model": "plain", "prompt": "the", "max_tokens": 2}`); resp.StatusCode != 200 {
		t.Errorf("after the errors: %s", resp.Status)
	}
}

// waitFor polls cond until it holds (a queue changes as requests arrive
// and leave, which the test cannot observe otherwise).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// load is how many requests the model's scheduler runs and holds waiting.
func load(s *Server, name string) (running, waiting int) {
	return s.models[name].Runner.Scheduler().Load()
}

// TestQueue: with the slot taken and the queue full, one more request is
// answered 503 with Retry-After; a queued client that leaves frees its
// place at once, and the queue still serves.
func TestQueue(t *testing.T) {
	var steps sync.Mutex // held: the model's steps wait
	s, err := New([]Model{tinyModel(t, "tiny", true, servetest.Options{}), tinyModel(t, "plain", false, servetest.Options{Slots: 1, Queue: 2, Lock: &steps})}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	steps.Lock()
	const body = `{"model": "plain", "prompt": "the", "max_tokens": 2}`
	var wg sync.WaitGroup
	answered := func() {
		if resp := post(t, ts, "/v1/completions", body); resp.StatusCode != 200 {
			t.Errorf("queued request: %s", resp.Status)
		}
	}
	wg.Go(answered)
	waitFor(t, "the first to take the slot", func() bool { r, _ := load(s, "plain"); return r == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
		_, err := http.DefaultClient.Do(req)
		left <- err
	}()
	waitFor(t, "the second to queue", func() bool { _, w := load(s, "plain"); return w == 1 })
	wg.Go(answered)
	waitFor(t, "the third to queue", func() bool { _, w := load(s, "plain"); return w == 2 })

	resp := post(t, ts, "/v1/completions", body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("queue full: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	var e wantError
	decodeStrict(t, resp.Body, &e)
	if deref(e.Error.Code) != "queue_full" {
		t.Errorf("queue full: %+v", e.Error)
	}
	// The other model's queue is its own.
	if resp := post(t, ts, "/v1/completions", `{"model": "tiny", "prompt": "the", "max_tokens": 2}`); resp.StatusCode != 200 {
		t.Errorf("the other model while this one's queue is full: %s", resp.Status)
	}

	cancel()
	<-left
	waitFor(t, "the client that left to free its place", func() bool { _, w := load(s, "plain"); return w == 1 })
	wg.Go(answered)
	waitFor(t, "the fourth to queue", func() bool { _, w := load(s, "plain"); return w == 2 })
	steps.Unlock()
	wg.Wait()
	waitFor(t, "the queue to empty", func() bool { r, w := load(s, "plain"); return r == 0 && w == 0 })
}

// TestParallelSameText: requests generated together, with fixed seeds,
// get the text each gets alone.
func TestParallelSameText(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	body := func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf(`{"model": "tiny", "messages": [{"role": "user", "content": "the dog %d saw %s"}], "max_tokens": %d, "temperature": 0.9, "seed": %d}`, i, strings.Repeat("a cat ", i), 8+i, i)
		}
		return fmt.Sprintf(`{"model": "tiny", "prompt": "the girl %d %s", "max_tokens": %d, "temperature": %d, "seed": %d}`, i, strings.Repeat("ran home ", i), 20-i, i%3, i)
	}
	text := func(i int) string {
		path := "/v1/completions"
		if i%2 == 0 {
			path = "/v1/chat/completions"
		}
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body(i)))
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("request %d: %s %s", i, resp.Status, b)
		}
		var v struct {
			Choices []struct {
				Text    string
				Message struct{ Content string }
			}
		}
		if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) != 1 {
			t.Errorf("request %d: %s", i, b)
			return ""
		}
		return v.Choices[0].Text + v.Choices[0].Message.Content
	}
	const n = 12
	alone := make([]string, n)
	for i := range n {
		alone[i] = text(i)
	}
	together := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { together[i] = text(i) })
	}
	wg.Wait()
	for i := range n {
		if together[i] != alone[i] {
			t.Errorf("request %d: %q together, %q alone", i, together[i], alone[i])
		}
	}
}

func TestConcurrentClients(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			stream := i%2 == 0
			resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model": "tiny", "messages": [{"role": "user", "content": "the dog %d"}], "max_tokens": 3, "stream": %v}`, i, stream)))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("client %d: %s", i, resp.Status)
				return
			}
			if stream {
				if len(readSSE(t, resp.Body)) < 2 {
					t.Errorf("client %d: a short stream", i)
				}
				return
			}
			var c wantChatCompletion
			decodeStrict(t, resp.Body, &c)
			if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil {
				t.Errorf("client %d: %+v", i, c)
			}
		})
	}
	wg.Wait()
}

func TestAPIKeyAndLog(t *testing.T) {
	var log syncBuffer
	_, ts := newTestServer(t, Options{APIKey: "sekrit", Log: &log})
	cases := []struct {
		path, auth string
		status     int
	}{
		{"/v1/models", "", 401},
		{"/v1/models", "Bearer wrong", 401},
		{"/v1/models", "sekrit", 401},
		{"/v1/models", "Bearer sekrit", 200},
		{"/health", "", 200},
	}
	for _, c := range cases {
		req, _ := http.NewRequest("GET", ts.URL+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s with %q: %s, want %d", c.path, c.auth, resp.Status, c.status)
		}
	}
	req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", strings.NewReader(`{"model": "plain", "prompt": "the", "max_tokens": 3, "temperature": 0}`))
	req.Header.Set("Authorization", "Bearer sekrit")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != len(cases)+1 || !strings.HasPrefix(lines[0], "lowbit: GET /v1/models 401 - in=0 out=0 ") ||
		!strings.HasPrefix(lines[len(lines)-1], "lowbit: POST /v1/completions 200 plain in=") || !strings.Contains(lines[len(lines)-1], " out=3 ") {
		t.Errorf("log:\n%s", log.String())
	}
}

func TestJSONLog(t *testing.T) {
	var log syncBuffer
	_, ts := newTestServer(t, Options{Log: &log, JSONLog: true})
	post(t, ts, "/v1/completions", `{"model": "plain", "prompt": "the", "max_tokens": 2, "temperature": 0}`).Body.Close()
	var e logEntry
	decodeStrict(t, strings.NewReader(log.String()), &e)
	if e.Method != "POST" || e.Path != "/v1/completions" || e.Status != 200 || e.Model != "plain" || e.CompletionTokens != 2 || e.PromptTokens < 1 || e.Time == "" {
		t.Errorf("log entry %+v", e)
	}
}

// syncBuffer is a buffer the server's handlers may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeShutdown: when its context ends, Serve stops accepting, cancels
// a request still waiting after the grace period and returns nil.
func TestServeShutdown(t *testing.T) {
	var steps sync.Mutex // held: the model's steps wait
	s, err := New([]Model{tinyModel(t, "tiny", false, servetest.Options{Lock: &steps})}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 50*time.Millisecond) }()
	url := "http://" + ln.Addr().String() + "/v1/completions"
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"model": "tiny", "prompt": "the", "max_tokens": 2}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("before the stop: %v %v", resp, err)
	}
	resp.Body.Close()

	steps.Lock() // the next request waits past the grace period
	stuck := make(chan error, 1)
	go func() {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"model": "tiny", "prompt": "the", "max_tokens": 2}`))
		if err == nil {
			resp.Body.Close()
		}
		stuck <- err
	}()
	waitFor(t, "the request to take the slot", func() bool { r, _ := load(s, "tiny"); return r == 1 })
	stop()
	// After the grace period the connection is closed; the generation
	// leaves its slot at the next step.
	if err := <-stuck; err == nil {
		t.Errorf("the request cancelled by the stop got an answer")
	}
	steps.Unlock()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := http.Post(url, "application/json", strings.NewReader(`{}`)); err == nil {
		t.Errorf("still accepting after the stop")
	}
}

// TestLogprobs checks logprobs on both endpoints: one per token, at most 0,
// the asked-for count of top tokens most likely first with the greedy
// choice first, and the same whole and streamed.
func TestLogprobs(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	type logprob struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	type content []struct {
		logprob
		TopLogprobs []logprob `json:"top_logprobs"`
	}
	const chatReq = `{"model": "tiny", "messages": [{"role": "user", "content": "the cat"}], "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 3, "stream": %v}`
	var whole wantChatCompletion
	decodeStrict(t, post(t, ts, "/v1/chat/completions", fmt.Sprintf(chatReq, false)).Body, &whole)
	var got struct{ Content content }
	if err := json.Unmarshal(whole.Choices[0].Logprobs, &got); err != nil {
		t.Fatalf("logprobs %s: %v", whole.Choices[0].Logprobs, err)
	}
	var streamed content
	for _, e := range readSSE(t, post(t, ts, "/v1/chat/completions", fmt.Sprintf(chatReq, true)).Body) {
		var c wantChatChunk
		decodeStrict(t, bytes.NewReader(e), &c)
		var part struct{ Content content }
		if lp := c.Choices[0].Logprobs; string(lp) != "null" && json.Unmarshal(lp, &part) != nil {
			t.Fatalf("chunk logprobs %s", lp)
		}
		streamed = append(streamed, part.Content...)
	}
	if len(got.Content) != 6 || fmt.Sprint(got.Content) != fmt.Sprint(streamed) {
		t.Fatalf("whole %+v, streamed %+v", got.Content, streamed)
	}
	for i, c := range got.Content {
		if c.Logprob > 0 || string(toBytes(c.Bytes)) != c.Token || len(c.TopLogprobs) != 3 || c.TopLogprobs[0].Token != c.Token || c.TopLogprobs[0].Logprob != c.Logprob {
			t.Errorf("token %d: %+v", i, c)
		}
		for j := 1; j < len(c.TopLogprobs); j++ {
			if c.TopLogprobs[j].Logprob > c.TopLogprobs[j-1].Logprob {
				t.Errorf("token %d: top_logprobs out of order: %+v", i, c.TopLogprobs)
			}
		}
	}

	const textReq = `{"model": "plain", "prompt": "the cat", "max_tokens": 5, "temperature": 0, "logprobs": 2, "stream": %v}`
	type textLogprobs struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	var c wantTextCompletion
	decodeStrict(t, post(t, ts, "/v1/completions", fmt.Sprintf(textReq, false)).Body, &c)
	var lp textLogprobs
	if err := json.Unmarshal(c.Choices[0].Logprobs, &lp); err != nil {
		t.Fatalf("logprobs %s: %v", c.Choices[0].Logprobs, err)
	}
	var streamedText textLogprobs
	for _, e := range readSSE(t, post(t, ts, "/v1/completions", fmt.Sprintf(textReq, true)).Body) {
		var chunk wantTextCompletion
		decodeStrict(t, bytes.NewReader(e), &chunk)
		var part textLogprobs
		if l := chunk.Choices[0].Logprobs; string(l) != "null" && json.Unmarshal(l, &part) != nil {
			t.Fatalf("chunk logprobs %s", l)
		}
		streamedText.Tokens = append(streamedText.Tokens, part.Tokens...)
		streamedText.TokenLogprobs = append(streamedText.TokenLogprobs, part.TokenLogprobs...)
		streamedText.TopLogprobs = append(streamedText.TopLogprobs, part.TopLogprobs...)
		streamedText.TextOffset = append(streamedText.TextOffset, part.TextOffset...)
	}
	if len(lp.Tokens) != 5 || fmt.Sprint(lp) != fmt.Sprint(streamedText) || strings.Join(lp.Tokens, "") != *c.Choices[0].Text {
		t.Fatalf("whole %+v, streamed %+v, text %q", lp, streamedText, *c.Choices[0].Text)
	}
	offset := len("the cat")
	for i, tok := range lp.Tokens {
		top := lp.TopLogprobs[i]
		if lp.TokenLogprobs[i] > 0 || lp.TextOffset[i] != offset || len(top) < 1 || len(top) > 3 || top[tok] != lp.TokenLogprobs[i] {
			t.Errorf("token %d %q: logprob %v offset %d top %v", i, tok, lp.TokenLogprobs[i], lp.TextOffset[i], top)
		}
		offset += len(tok)
	}
}

func toBytes(b []int) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

// TestIgnoreEOS: with ignore_eos (vLLM's and llama-server's extension) a
// request generates its max_tokens whatever the model says; with a
// repetition_penalty it is sampled with it.
func TestIgnoreEOS(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	for _, body := range []string{
		`{"model": "plain", "prompt": "the", "max_tokens": 60, "temperature": 0, "ignore_eos": true}`,
		`{"model": "plain", "prompt": "the", "max_tokens": 60, "temperature": 0.8, "seed": 3, "repetition_penalty": 1.2, "ignore_eos": true}`,
	} {
		resp := post(t, ts, "/v1/completions", body)
		var c struct{ Usage usage }
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 || c.Usage.CompletionTokens != 60 {
			t.Errorf("%s: %s, %d tokens (%v)", body, resp.Status, c.Usage.CompletionTokens, err)
		}
	}
}
