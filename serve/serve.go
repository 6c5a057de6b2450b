// Package serve answers OpenAI's HTTP API (chat completions, completions,
// models) with lowbit's runners, so that existing clients and tools can use
// a local model. Each model's runner is scheduled (package sched): its
// requests are generated together, as many at once as it has cache slots,
// while the others wait in a bounded queue, first come first served; a
// client that goes away leaves the queue, or its slot, at once.
package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"lowbit/chat"
	"lowbit/tokenizer"
)

// Model is one model the server answers for.
type Model struct {
	// Name is the model's id in the API (what the command line called it).
	Name string
	// Runner generates with the model's session, through a scheduler
	// (chat.NewScheduled), which takes the requests of many clients at once.
	Runner *chat.Runner
	// Template is the model's chat template (nil: the model only completes).
	Template *tokenizer.ChatTemplate
}

// Options configure a Server; zero fields take the defaults. (How many
// requests a model generates at once and how many may wait are its
// scheduler's settings; one more than wait is answered 503 with
// Retry-After.)
type Options struct {
	// MaxBodyBytes caps a request body (413 above it). Default 8 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the reading of a request's body. Default 60s.
	BodyTimeout time.Duration
	// APIKey, when set, is the bearer token every request but /health needs.
	APIKey string
	// Log receives one line per request (nil: none).
	Log io.Writer
	// JSONLog writes the lines as JSON objects.
	JSONLog bool
}

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultBodyTimeout  = 60 * time.Second
)

// Server answers the API for its models. Its handler is safe for
// concurrent use.
type Server struct {
	models  map[string]*Model
	order   []string
	opts    Options
	created int64
	keyHash [sha256.Size]byte
	logMu   sync.Mutex
}

// New returns a server for models, whose names must be distinct.
func New(models []Model, opts Options) (*Server, error) {
	if len(models) == 0 {
		return nil, errors.New("serve: no model to serve")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	s := &Server{models: map[string]*Model{}, opts: opts, created: time.Now().Unix()}
	for i := range models {
		m := &models[i]
		if m.Name == "" || m.Runner == nil {
			return nil, fmt.Errorf("serve: model %d has no name or no runner", i)
		}
		if m.Runner.Scheduler() == nil {
			return nil, fmt.Errorf("serve: the model %s's runner is not scheduled (chat.NewScheduled): it cannot take concurrent requests", m.Name)
		}
		if _, dup := s.models[m.Name]; dup {
			return nil, fmt.Errorf("serve: the model %s is given twice", m.Name)
		}
		s.models[m.Name] = m
		s.order = append(s.order, m.Name)
	}
	s.keyHash = sha256.Sum256([]byte(opts.APIKey))
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.logged(func(w http.ResponseWriter, r *http.Request, _ *record) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("GET /v1/models", s.logged(s.authorized(s.listModels)))
	mux.HandleFunc("POST /v1/chat/completions", s.logged(s.authorized(s.generate(s.chatCompletions))))
	mux.HandleFunc("POST /v1/completions", s.logged(s.authorized(s.generate(s.completions))))
	mux.HandleFunc("/", s.logged(func(w http.ResponseWriter, r *http.Request, _ *record) {
		writeError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "unknown_url",
			message: fmt.Sprintf("unknown URL: %s %s (the API is GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /health)", r.Method, r.URL.Path)})
	}))
	return mux
}

// authorized checks the bearer token in constant time (the hashes are
// compared, so the key's length does not show either).
func (s *Server) authorized(h handler) handler {
	if s.opts.APIKey == "" {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, rec *record) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(token))
		if !ok || subtle.ConstantTimeCompare(got[:], s.keyHash[:]) != 1 {
			writeError(w, &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
				message: "a missing or incorrect API key: send the server's key as Authorization: Bearer <key>"})
			return
		}
		h(w, r, rec)
	}
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request, _ *record) {
	list := modelList{Object: "list", Data: []modelCard{}}
	for _, name := range s.order {
		list.Data = append(list.Data, modelCard{ID: name, Object: "model", Created: s.created, OwnedBy: "lowbit"})
	}
	writeJSON(w, http.StatusOK, list)
}

// decode reads the body into v, refusing unknown fields and trailing data.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	defer rc.SetReadDeadline(time.Time{})
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return invalid("", "the body is empty: want a JSON object")
		}
		return decodeError(err, s.opts.MaxBodyBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return decodeError(err, s.opts.MaxBodyBytes)
		}
		return invalid("", "the body has more after its JSON object")
	}
	return nil
}

func (s *Server) model(name string) (*Model, *apiError) {
	if name == "" {
		return nil, invalid("model", "model: missing; GET /v1/models lists them")
	}
	m, ok := s.models[name]
	if !ok {
		return nil, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			message: fmt.Sprintf("the model %q does not exist: this server has %s", name, strings.Join(s.order, ", "))}
	}
	return m, nil
}

// generate answers an endpoint's generation, or its refusal.
func (s *Server) generate(parse func(w http.ResponseWriter, r *http.Request, rec *record) (*generation, *apiError)) handler {
	return func(w http.ResponseWriter, r *http.Request, rec *record) {
		g, e := parse(w, r, rec)
		if e != nil {
			writeError(w, e)
			return
		}
		g.serve(w, r)
	}
}

// request reads the body into req and finds the model it names.
func (s *Server) request(w http.ResponseWriter, r *http.Request, req interface{ modelName() string }, rec *record) (*Model, *apiError) {
	if e := s.decode(w, r, req); e != nil {
		return nil, e
	}
	m, e := s.model(req.modelName())
	if e == nil {
		rec.model = m.Name
	}
	return m, e
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, rec *record) (*generation, *apiError) {
	var req chatRequest
	m, e := s.request(w, r, &req, rec)
	if e != nil {
		return nil, e
	}
	msgs, e := req.check()
	if e != nil {
		return nil, e
	}
	if m.Template == nil {
		return nil, invalid("messages", fmt.Sprintf("the model %s has no chat template, so it cannot chat: use /v1/completions with a prompt", m.Name))
	}
	opts, e := req.options(0, randomSeed())
	if e != nil {
		return nil, e
	}
	g := &generation{s: s, rec: rec, model: m.Name, sampling: req.sampling, shape: chatShape{}, param: "messages"}
	if req.logprobs() {
		g.withLogprobs(&opts, deref(req.TopLogprobs), 0)
	}
	g.run = func(ctx context.Context, out io.Writer) (chat.Result, error) {
		return m.Runner.Reply(ctx, m.Template, msgs, opts, out)
	}
	return g, nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, rec *record) (*generation, *apiError) {
	var req completionRequest
	m, e := s.request(w, r, &req, rec)
	if e != nil {
		return nil, e
	}
	prompt, e := req.check()
	if e != nil {
		return nil, e
	}
	opts, e := req.options(defaultCompletionTokens, randomSeed())
	if e != nil {
		return nil, e
	}
	g := &generation{s: s, rec: rec, model: m.Name, sampling: req.sampling, shape: textShape{}, param: "prompt"}
	if req.Logprobs != nil {
		g.withLogprobs(&opts, *req.Logprobs, utf8.RuneCountInString(prompt))
	}
	g.run = func(ctx context.Context, out io.Writer) (chat.Result, error) {
		return m.Runner.Complete(ctx, prompt, opts, out)
	}
	return g, nil
}

// deref is *v, or the zero value where v is nil (a field left out).
func deref[T any](v *T) T {
	var zero T
	if v == nil {
		return zero
	}
	return *v
}

// randomSeed seeds a request that gives none.
func randomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}
