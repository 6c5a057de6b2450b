package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"lowbit/model"
)

// handler is an endpoint; it fills in the record the request's log line reads.
type handler func(w http.ResponseWriter, r *http.Request, rec *record)

// record is what a request's log line says besides the method and path.
type record struct {
	model   string
	in, out int // tokens
	// The generation's latencies: the wait for a slot, the time to the
	// first token (the wait included), the mean and the longest time
	// between two tokens.
	queue, ttft, itl, itlMax time.Duration
}

// timed records a generation's latencies.
func (r *record) timed(st model.GenerateStats) {
	r.queue, r.ttft, r.itlMax = st.Queued, st.Queued+st.PromptDuration, st.MaxGap
	if st.GeneratedTokens > 1 {
		r.itl = st.GenDuration / time.Duration(st.GeneratedTokens-1)
	}
}

// statusWriter remembers the status a handler sent.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flush, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusClientGone is logged for a request whose client left before an
// answer was sent (nginx's 499).
const statusClientGone = 499

// logEntry is one request's log line as JSON.
type logEntry struct {
	Time             string  `json:"time"`
	Method           string  `json:"method"`
	Path             string  `json:"path"`
	Status           int     `json:"status"`
	Model            string  `json:"model,omitempty"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	Millis           float64 `json:"ms"`
	// The generation's latencies (absent for other requests).
	QueueMillis  *float64 `json:"queue_ms,omitempty"`
	TTFTMillis   *float64 `json:"ttft_ms,omitempty"`
	ITLMillis    *float64 `json:"itl_ms,omitempty"`
	ITLMaxMillis *float64 `json:"itl_max_ms,omitempty"`
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logged runs h and writes its request's line.
func (s *Server) logged(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var rec record
		h(sw, r, &rec)
		if s.opts.Log == nil {
			return
		}
		e := logEntry{Time: start.UTC().Format(time.RFC3339Nano), Method: r.Method, Path: r.URL.EscapedPath(), Status: sw.status,
			Model: rec.model, PromptTokens: rec.in, CompletionTokens: rec.out, Millis: millis(time.Since(start))}
		if e.Status == 0 {
			e.Status = statusClientGone
		}
		timed := rec.ttft > 0
		if timed {
			q, ttft, itl, itlMax := millis(rec.queue), millis(rec.ttft), millis(rec.itl), millis(rec.itlMax)
			e.QueueMillis, e.TTFTMillis, e.ITLMillis, e.ITLMaxMillis = &q, &ttft, &itl, &itlMax
		}
		var line []byte
		switch {
		case s.opts.JSONLog:
			line, _ = json.Marshal(e)
			line = append(line, '\n')
		case timed:
			line = fmt.Appendf(nil, "lowbit: %s %s %d %s in=%d out=%d %.1fms queue=%.1fms ttft=%.1fms itl=%.1fms itl_max=%.1fms\n", e.Method, e.Path, e.Status, orDash(e.Model),
				e.PromptTokens, e.CompletionTokens, e.Millis, *e.QueueMillis, *e.TTFTMillis, *e.ITLMillis, *e.ITLMaxMillis)
		default:
			line = fmt.Appendf(nil, "lowbit: %s %s %d %s in=%d out=%d %.1fms\n", e.Method, e.Path, e.Status, orDash(e.Model), e.PromptTokens, e.CompletionTokens, e.Millis)
		}
		s.logMu.Lock()
		defer s.logMu.Unlock()
		s.opts.Log.Write(line)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
