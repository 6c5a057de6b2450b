// Package loadgen measures an OpenAI-compatible server under load as vLLM's
// serving benchmark does: concurrent streamed completions of given prompt
// and output lengths, reporting throughput, time to first token, time per
// output token and inter-token latency percentiles.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options describe a run.
type Options struct {
	// URL is the server's base address (http://host:port).
	URL string
	// Model is the model id to ask for ("": the first GET /v1/models lists).
	Model string
	// APIKey is sent as a bearer token when set.
	APIKey string
	// Requests is how many requests to send in all.
	Requests int
	// Concurrency is how many are in flight at once.
	Concurrency int
	// PromptWords is each prompt's length in words (random common words, a
	// different prompt each request so that no server cache answers it;
	// each word is one token in the usual tokenizers, after the first).
	PromptWords int
	// PromptWordsMax, when above PromptWords, makes each prompt's length
	// drawn evenly from PromptWords to PromptWordsMax (the same lengths
	// every run).
	PromptWordsMax int
	// MaxTokens is each request's max_tokens (decoding is greedy, as in
	// vLLM's benchmark, so that a run repeats).
	MaxTokens int
	// IgnoreEOS asks the server to generate all MaxTokens tokens
	// (ignore_eos, an extension of vLLM's, llama-server's and lowbit's).
	IgnoreEOS bool
	// Client sends the requests (nil: http.DefaultClient).
	Client *http.Client
}

// Latency is a distribution of durations, in milliseconds.
type Latency struct {
	Mean   float64 `json:"mean_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	// Max is the worst: for TTFT the longest any request waited (a
	// starved request shows here), for ITL the longest a stream stalled.
	Max float64 `json:"max_ms"`
}

// Report is a run's result, as vLLM's benchmark prints it.
type Report struct {
	Model            string  `json:"model"`
	Requests         int     `json:"requests"`
	Concurrency      int     `json:"concurrency"`
	Completed        int     `json:"completed"`
	Failed           int     `json:"failed"`
	DurationSec      float64 `json:"duration_s"`
	PromptTokens     int     `json:"total_input_tokens"`
	CompletionTokens int     `json:"total_output_tokens"`
	RequestsPerSec   float64 `json:"request_throughput"`
	OutputTokensSec  float64 `json:"output_throughput"`
	TotalTokensSec   float64 `json:"total_token_throughput"`
	// TTFT is the time to the first text; TPOT the time per output token
	// after it; ITL the time between streamed chunks; E2E a whole request.
	TTFT Latency `json:"ttft"`
	TPOT Latency `json:"tpot"`
	ITL  Latency `json:"itl"`
	E2E  Latency `json:"e2el"`
	// Errors are the first few failures' messages.
	Errors []string `json:"errors,omitempty"`
}

// maxErrorsKept bounds the failures a report quotes.
const maxErrorsKept = 5

// one is one request's measurements.
type one struct {
	err              error
	ttft, e2e        time.Duration
	itl              []time.Duration
	prompt, complete int
}

// Run sends the requests and reports; a failed request is counted, not
// fatal. It stops early when ctx ends.
func Run(ctx context.Context, o Options) (*Report, error) {
	switch {
	case o.URL == "":
		return nil, errors.New("loadgen: no URL")
	case o.Requests < 1 || o.Concurrency < 1 || o.PromptWords < 1 || o.MaxTokens < 1:
		return nil, fmt.Errorf("loadgen: requests %d, concurrency %d, prompt words %d, max tokens %d: want 1 or more of each",
			o.Requests, o.Concurrency, o.PromptWords, o.MaxTokens)
	case o.PromptWordsMax != 0 && o.PromptWordsMax < o.PromptWords:
		return nil, fmt.Errorf("loadgen: prompt words from %d to %d: the most is below the least", o.PromptWords, o.PromptWordsMax)
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	o.URL = strings.TrimSuffix(o.URL, "/")
	if o.Model == "" {
		m, err := firstModel(ctx, o)
		if err != nil {
			return nil, err
		}
		o.Model = m
	}
	results := make([]one, o.Requests)
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(o.Concurrency, o.Requests) {
		wg.Go(func() {
			for i := range next {
				results[i] = request(ctx, o, i)
			}
		})
	}
	for i := range o.Requests {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return report(o, results, time.Since(start)), nil
}

func report(o Options, results []one, took time.Duration) *Report {
	r := &Report{Model: o.Model, Requests: o.Requests, Concurrency: o.Concurrency, DurationSec: took.Seconds()}
	var ttft, tpot, itl, e2e []time.Duration
	for _, res := range results {
		if res.err != nil {
			r.Failed++
			if len(r.Errors) < maxErrorsKept {
				r.Errors = append(r.Errors, res.err.Error())
			}
			continue
		}
		r.Completed++
		r.PromptTokens += res.prompt
		r.CompletionTokens += res.complete
		ttft = append(ttft, res.ttft)
		e2e = append(e2e, res.e2e)
		itl = append(itl, res.itl...)
		if res.complete > 1 {
			tpot = append(tpot, (res.e2e-res.ttft)/time.Duration(res.complete-1))
		}
	}
	if s := took.Seconds(); s > 0 {
		r.RequestsPerSec = float64(r.Completed) / s
		r.OutputTokensSec = float64(r.CompletionTokens) / s
		r.TotalTokensSec = float64(r.PromptTokens+r.CompletionTokens) / s
	}
	r.TTFT, r.TPOT, r.ITL, r.E2E = latency(ttft), latency(tpot), latency(itl), latency(e2e)
	return r
}

// latency summarizes durations (percentiles by linear interpolation, as numpy's).
func latency(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	ms := make([]float64, len(d))
	sum := 0.0
	for i, x := range d {
		ms[i] = float64(x.Microseconds()) / 1000
		sum += ms[i]
	}
	slices.Sort(ms)
	return Latency{Mean: sum / float64(len(ms)), Median: percentile(ms, 50), P90: percentile(ms, 90), P99: percentile(ms, 99), Max: ms[len(ms)-1]}
}

func percentile(sorted []float64, p float64) float64 {
	at := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(at))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(at-float64(lo))
}

// words make the prompts.
var words = strings.Fields("the a cat dog sat on mat and ran to house tree little big girl boy saw was with it he she they went home day sun")

// prompt is request seed's prompt: lo words, or from lo to hi.
func prompt(lo, hi int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 0x6c6f6164))
	n := lo
	if hi > lo {
		n += r.IntN(hi - lo + 1)
	}
	w := make([]string, n)
	for i := range w {
		w[i] = words[r.IntN(len(words))]
	}
	return strings.Join(w, " ")
}

// request sends one streamed completion and times its chunks.
func request(ctx context.Context, o Options, i int) one {
	req := map[string]any{
		"model": o.Model, "prompt": prompt(o.PromptWords, o.PromptWordsMax, uint64(i)), "max_tokens": o.MaxTokens, "temperature": 0,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	}
	if o.IgnoreEOS {
		req["ignore_eos"] = true
	}
	body, _ := json.Marshal(req)
	start := time.Now()
	resp, err := send(ctx, o, "POST", "/v1/completions", body)
	if err != nil {
		return one{err: err}
	}
	defer resp.Body.Close()
	var res one
	last := start
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return one{err: fmt.Errorf("request %d: a chunk that is not JSON: %w", i, err)}
		}
		if chunk.Error != nil {
			return one{err: fmt.Errorf("request %d: %s", i, chunk.Error.Message)}
		}
		if chunk.Usage != nil {
			res.prompt, res.complete = chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens
		}
		if len(chunk.Choices) == 1 && chunk.Choices[0].Text != "" {
			now := time.Now()
			if res.ttft == 0 {
				res.ttft = now.Sub(start)
			} else {
				res.itl = append(res.itl, now.Sub(last))
			}
			last = now
		}
	}
	if err := sc.Err(); err != nil {
		return one{err: fmt.Errorf("request %d: reading the stream: %w", i, err)}
	}
	if !done {
		return one{err: fmt.Errorf("request %d: the stream ended without [DONE]", i)}
	}
	res.e2e = time.Since(start)
	if res.ttft == 0 { // no text at all: the first token came with the end
		res.ttft = res.e2e
	}
	return res
}

// send makes a request and returns the response when its status is 200.
func send(ctx context.Context, o Options, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, o.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	return resp, nil
}

// firstModel asks the server for its models and returns the first.
func firstModel(ctx context.Context, o Options) (string, error) {
	resp, err := send(ctx, o, "GET", "/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("loadgen: listing the models: %w", err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("loadgen: GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 {
		return "", errors.New("loadgen: GET /v1/models lists no model")
	}
	return list.Data[0].ID, nil
}
