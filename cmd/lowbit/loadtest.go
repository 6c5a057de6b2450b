package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"lowbit/serve/loadgen"
)

// loadtestFlags are lowbit loadtest's options.
type loadtestFlags struct {
	model       string
	apiKey      string
	requests    int
	concurrency int
	promptWords int
	wordsMax    int
	maxTokens   int
	ignoreEOS   bool
	asJSON      bool
}

func newLoadtestCmd() *cobra.Command {
	var f loadtestFlags
	cmd := &cobra.Command{
		Use:   "loadtest <url>",
		Short: "Measure an OpenAI-compatible server under concurrent streams",
		Long: `loadtest sends -n streamed completions, -c at a time, to the server at <url> (lowbit
serve, or any OpenAI-compatible server), each of --prompt-words random words asking for
--max-tokens tokens (--prompt-words-max: lengths drawn from the two), and reports as vLLM's
serving benchmark does: request and token throughput, time to first token (TTFT), time per
output token after it (TPOT), inter-token latency (ITL) and end-to-end latency, as mean,
median, p90 and p99, and the worst of each: the longest TTFT is the longest any request
waited, which shows a starved one. Token counts are the server's
(stream_options.include_usage).`,
		Example: `  lowbit loadtest http://127.0.0.1:8080 -n 200 -c 16 --prompt-words 128 --max-tokens 64
  lowbit loadtest http://127.0.0.1:8080 -n 256 -c 64 --prompt-words 128 --prompt-words-max 1024 --max-tokens 256 --ignore-eos
  lowbit loadtest http://127.0.0.1:8080 --model demo --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.apiKey == "" {
				f.apiKey = os.Getenv(apiKeyEnv)
			}
			rep, err := loadgen.Run(cmd.Context(), loadgen.Options{URL: args[0], Model: f.model, APIKey: f.apiKey,
				Requests: f.requests, Concurrency: f.concurrency, PromptWords: f.promptWords, PromptWordsMax: f.wordsMax,
				MaxTokens: f.maxTokens, IgnoreEOS: f.ignoreEOS})
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			printLoadReport(cmd, rep)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model id (default: the first the server lists)")
	fl.StringVar(&f.apiKey, "api-key", "", "bearer token (default $"+apiKeyEnv+")")
	fl.IntVarP(&f.requests, "requests", "n", 100, "requests to send in all")
	fl.IntVarP(&f.concurrency, "concurrency", "c", 8, "requests in flight at once")
	fl.IntVar(&f.promptWords, "prompt-words", 64, "words in each prompt (the least, with --prompt-words-max)")
	fl.IntVar(&f.wordsMax, "prompt-words-max", 0, "the most words in a prompt: lengths drawn from --prompt-words to this")
	fl.IntVar(&f.maxTokens, "max-tokens", 64, "max_tokens of each request")
	fl.BoolVar(&f.ignoreEOS, "ignore-eos", false, "ask for all --max-tokens tokens (ignore_eos, as vLLM's benchmark; lowbit serve, vLLM and llama-server take it)")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	return cmd
}

// printLoadReport prints a report as vLLM's benchmark_serving does.
func printLoadReport(cmd *cobra.Command, r *loadgen.Report) {
	w := cmd.OutOrStdout()
	row := func(name string, format string, v any) { fmt.Fprintf(w, "%-36s "+format+"\n", name+":", v) }
	fmt.Fprintf(w, "============ Serving Benchmark Result ============\n")
	row("Model", "%s", r.Model)
	row("Successful requests", "%d", r.Completed)
	row("Failed requests", "%d", r.Failed)
	row("Concurrency", "%d", r.Concurrency)
	row("Benchmark duration (s)", "%.2f", r.DurationSec)
	row("Total input tokens", "%d", r.PromptTokens)
	row("Total generated tokens", "%d", r.CompletionTokens)
	row("Request throughput (req/s)", "%.2f", r.RequestsPerSec)
	row("Output token throughput (tok/s)", "%.2f", r.OutputTokensSec)
	row("Total token throughput (tok/s)", "%.2f", r.TotalTokensSec)
	for _, l := range []struct {
		title, short string
		lat          loadgen.Latency
	}{{"Time to First Token", "TTFT", r.TTFT}, {"Time per Output Token (excl. 1st token)", "TPOT", r.TPOT},
		{"Inter-token Latency", "ITL", r.ITL}, {"End-to-end Latency", "E2EL", r.E2E}} {
		fmt.Fprintf(w, "%s\n", centered(l.title))
		row("Mean "+l.short+" (ms)", "%.2f", l.lat.Mean)
		row("Median "+l.short+" (ms)", "%.2f", l.lat.Median)
		row("P90 "+l.short+" (ms)", "%.2f", l.lat.P90)
		row("P99 "+l.short+" (ms)", "%.2f", l.lat.P99)
		row("Max "+l.short+" (ms)", "%.2f", l.lat.Max)
	}
	fmt.Fprintf(w, "==================================================\n")
	for _, e := range r.Errors {
		fmt.Fprintf(cmd.ErrOrStderr(), "lowbit: a failed request: %s\n", e)
	}
}

// centered is a section title in the report's dashes.
func centered(title string) string {
	const width = 50
	pad := max(width-len(title)-2, 0)
	left := pad / 2
	return strings.Repeat("-", left) + " " + title + " " + strings.Repeat("-", pad-left)
}
