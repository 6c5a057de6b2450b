package serve

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// FuzzRequest feeds bodies to both endpoints' parsing: any body is
// either refused with a 4xx naming what is wrong, or gives options the
// sampler takes.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model": "m", "prompt": "a", "max_tokens": 3, "stop": ["x"], "temperature": 0.5, "top_p": 0.9, "top_k": -1, "seed": -4}`,
		`{"model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}]}], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"model": "m", "prompt": ["a"], "logit_bias": {"1": 0}, "n": 1, "user": "u", "echo": false}`,
		`{"prompt": [1, 2], "messages": "x"}`, `[]`, `{"model": 1}`, `{} {}`, ``,
	} {
		f.Add([]byte(seed))
	}
	s := &Server{opts: Options{MaxBodyBytes: 1 << 16, BodyTimeout: DefaultBodyTimeout}}
	f.Fuzz(func(t *testing.T, body []byte) {
		parse := []func() *apiError{
			func() *apiError {
				var req chatRequest
				return parseRequest(t, s, "/v1/chat/completions", body, &req, &req.sampling, func() *apiError { _, e := req.check(); return e })
			},
			func() *apiError {
				var req completionRequest
				return parseRequest(t, s, "/v1/completions", body, &req, &req.sampling, func() *apiError { _, e := req.check(); return e })
			},
		}
		for _, p := range parse {
			if e := p(); e != nil && (e.status < 400 || e.status > 499 || e.message == "") {
				t.Errorf("%q: status %d %q", body, e.status, e.message)
			}
		}
	})
}

// parseRequest decodes body into req, checks it and its sampling fields.
func parseRequest(t *testing.T, s *Server, path string, body []byte, req any, smp *sampling, check func() *apiError) *apiError {
	if e := s.decode(httptest.NewRecorder(), httptest.NewRequest("POST", path, bytes.NewReader(body)), req); e != nil {
		return e
	}
	if e := check(); e != nil {
		return e
	}
	o, e := smp.options(defaultCompletionTokens, 1)
	if e != nil {
		return e
	}
	sp := o.Sampler
	if o.MaxTokens < 0 || !(sp.Temperature >= 0 && sp.Temperature <= 2) || sp.TopK < 0 || !(sp.TopP >= 0 && sp.TopP <= 1) || !(sp.MinP >= 0 && sp.MinP <= 1) || len(o.Stop) > maxStops {
		t.Errorf("options out of range: %+v", o)
	}
	return nil
}
