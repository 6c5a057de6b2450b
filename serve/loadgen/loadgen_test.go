package loadgen

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"lowbit/serve"
	"lowbit/serve/servetest"
)

func TestRun(t *testing.T) {
	r, tpl := servetest.Runner(t, false, servetest.Options{Slots: 4})
	s, err := serve.New([]serve.Model{{Name: "tiny", Runner: r, Template: tpl}}, serve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	rep, err := Run(context.Background(), Options{URL: ts.URL + "/", Requests: 12, Concurrency: 4, PromptWords: 8, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Model != "tiny" || rep.Completed != 12 || rep.Failed != 0 || rep.CompletionTokens > 12*4 || rep.CompletionTokens < 12 || rep.PromptTokens < 12*8 {
		t.Errorf("report %+v", rep)
	}
	if rep.TTFT.Median <= 0 || rep.E2E.P99 < rep.E2E.Median || rep.TTFT.P99 > rep.E2E.P99 || rep.OutputTokensSec <= 0 {
		t.Errorf("latencies %+v", rep)
	}

	// Prompts of 4 to 40 words, every request its full length.
	rep, err = Run(context.Background(), Options{URL: ts.URL, Requests: 12, Concurrency: 6, PromptWords: 4, PromptWordsMax: 40, MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 12 || rep.CompletionTokens != 12*5 || rep.PromptTokens < 12*4 || rep.TTFT.Max < rep.TTFT.P99 || rep.ITL.Max < rep.ITL.P99 {
		t.Errorf("prompts of 4 to 40 words, ignoring EOS: %+v", rep)
	}
	lengths := map[int]bool{}
	for i := range 12 {
		lengths[len(strings.Fields(prompt(4, 40, uint64(i))))] = true
	}
	if len(lengths) < 6 {
		t.Errorf("12 prompts of 4 to 40 words have %d lengths", len(lengths))
	}
	if _, err := Run(context.Background(), Options{URL: ts.URL, Requests: 1, Concurrency: 1, PromptWords: 5, PromptWordsMax: 4, MaxTokens: 1}); err == nil {
		t.Errorf("prompt words from 5 to 4: no error")
	}

	rep, err = Run(context.Background(), Options{URL: ts.URL, Model: "nope", Requests: 2, Concurrency: 2, PromptWords: 1, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 2 || len(rep.Errors) != 2 || !strings.Contains(rep.Errors[0], "404") {
		t.Errorf("an unknown model: %+v", rep)
	}
	if _, err := Run(context.Background(), Options{URL: ts.URL, Requests: 0, Concurrency: 1, PromptWords: 1, MaxTokens: 1}); err == nil {
		t.Errorf("0 requests: no error")
	}
}

func TestPercentile(t *testing.T) {
	cases := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{[]float64{5}, 99, 5},
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{0, 10}, 90, 9},
		{[]float64{1, 2, 3}, 100, 3},
	}
	for _, c := range cases {
		if got := percentile(c.sorted, c.p); got != c.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.sorted, c.p, got, c.want)
		}
	}
}
