package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"lowbit/chat"
	"lowbit/convert"
	"lowbit/gguf"
	"lowbit/model"
	"lowbit/store"
	"lowbit/tokenizer"
)

// runFlags are lowbit run's options.
type runFlags struct {
	maxTokens int
	sampling  samplingFlags
	seed      int64
	stops     []string
	system    string
	file      string
	ctxLen    int
	kvCache   kvCacheFlag
	device    string
	stats     bool
	asJSON    bool
	offline   bool
	revision  string
	quiet     bool
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run <model> [prompt...]",
		Short: "Generate text with a model: complete a prompt, or chat",
		Long: `run loads a model (a lowbit directory, an HF directory in F32/F16/BF16, or an alias
or repo id fetched through the HF cache) and generates text on the GPU when one is
found, else on the CPU.

With a prompt (the words after the model, joined by spaces, or -f FILE) it completes
the prompt as plain text. On a terminal the prompt is printed before the streamed
completion, as llama.cpp's llama-cli does; when stdout is not a terminal only the
completion is printed (then a newline), so that the prompt followed by the output is
the text as the model continued it. --json prints one object with the prompt and the
completion apart.

Without a prompt it chats in the model's chat template. On a terminal, lines are
edited with Left/Right, Home/End and Ctrl-A/E/U/W, and Up/Down recall earlier ones;
a line ending in \ goes on on the next, and """ opens and closes a block of lines;
/help lists the commands (/reset, /system, /exit). Ctrl-C stops a reply (which is not
kept, as in Ollama, nor is the message it answered) or clears the line; Ctrl-D, /exit
(/bye) or Ctrl-C twice on an empty line ends the chat. Piped stdin is read whole as one message, or, for a model
without a chat template, as the prompt to complete.`,
		Example: `  lowbit run ./tinyllama-q4 Once upon a time
  lowbit run ./tinyllama-q4 -f story.txt -n 256 --temp 0.7 --top-p 0.9 --seed 1 --stats
  lowbit run ./tinyllama-q4
  echo "Write a haiku about the sea." | lowbit run ./tinyllama-q4 --system "You are a poet."`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Mistakes in the flags or the prompt are reported before a
			// model is fetched or loaded.
			if _, _, err := generationOptions(f); err != nil {
				return err
			}
			in, err := readInput(cmd, args[1:], f.file)
			if err != nil {
				return err
			}
			if in.complete && f.system != "" {
				return errors.New("--system applies to a chat, and a prompt is completed as plain text: leave the prompt out to chat, or write the instructions into the prompt")
			}
			return runModel(cmd, args, f, in)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.maxTokens, "n-predict", "n", 256, "most tokens to generate (0: until the context is full)")
	f.sampling.register(fl, 0.8, "temperature (0: greedy)")
	fl.Int64Var(&f.seed, "seed", -1, "sampling seed (-1: random, printed with --stats)")
	fl.StringArrayVar(&f.stops, "stop", nil, `stop at this string (repeatable; \n and \t are understood)`)
	fl.StringVar(&f.system, "system", "", "system message of a chat (refused with a prompt to complete)")
	fl.StringVarP(&f.file, "file", "f", "", "read the prompt from this file (-: stdin); one final newline is dropped")
	fl.IntVar(&f.ctxLen, "ctx", 0, "context length in tokens (default: the model's, at most 4096)")
	fl.Var(&f.kvCache, "kv-cache", kvCacheUsage)
	fl.StringVar(&f.device, "device", "auto", "where to run: cuda, cpu or auto")
	fl.BoolVar(&f.stats, "stats", false, "print timings and memory to stderr, as llama.cpp does")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object with the prompt, the text and the statistics")
	fl.BoolVar(&f.offline, "offline", false, "use the HF cache only (also HF_HUB_OFFLINE=1)")
	fl.StringVar(&f.revision, "revision", "", "Hub revision of a repo id (default main)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bars")
	return cmd
}

// maxPromptBytes bounds a prompt read from a file or stdin: far more than
// any context holds, and not an unbounded allocation.
const maxPromptBytes = 16 << 20

// runInput is what run was asked for: a prompt to complete, a chat on a
// terminal, or piped stdin.
type runInput struct {
	// prompt is the prompt to complete, or the piped stdin.
	prompt string
	// complete: the prompt was given (words or --file): complete it.
	complete bool
	// terminal is stdin when no prompt was given and it is a terminal: a chat.
	terminal *os.File
}

// readInput finds the prompt: the words after the model, the file, or else
// stdin, which is read whole unless it is a terminal.
func readInput(cmd *cobra.Command, words []string, file string) (runInput, error) {
	stdin := cmd.InOrStdin()
	switch {
	case file != "" && len(words) > 0:
		return runInput{}, fmt.Errorf("a prompt in words and --file %s: give one of them", file)
	case len(words) > 0:
		return runInput{prompt: strings.Join(words, " "), complete: true}, nil
	case file == "-":
		text, err := readAtMost(stdin, "stdin")
		return runInput{prompt: trimFinalNewline(text), complete: true}, err
	case file != "":
		fh, err := os.Open(file)
		if err != nil {
			return runInput{}, fmt.Errorf("--file: %w", err)
		}
		defer fh.Close()
		text, err := readAtMost(fh, file)
		return runInput{prompt: trimFinalNewline(text), complete: true}, err
	}
	if isTerminal(stdin) {
		return runInput{terminal: stdin.(*os.File)}, nil
	}
	text, err := readAtMost(stdin, "stdin")
	if err == nil && strings.TrimSpace(text) == "" {
		err = errors.New("stdin is empty: give a prompt after the model, or run in a terminal to chat")
	}
	return runInput{prompt: text}, err
}

// readAtMost reads r whole, refusing more than maxPromptBytes.
func readAtMost(r io.Reader, name string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxPromptBytes {
		return "", fmt.Errorf("%s is larger than %d MiB: a prompt must fit the context", name, maxPromptBytes>>20)
	}
	return string(b), nil
}

// trimFinalNewline drops the newline a text file ends with, as llama.cpp
// does with -f: it ends the file, not the prompt.
func trimFinalNewline(s string) string {
	if t, ok := strings.CutSuffix(s, "\r\n"); ok {
		return t
	}
	return strings.TrimSuffix(s, "\n")
}

func runModel(cmd *cobra.Command, args []string, f runFlags, in runInput) error {
	ctx := cmd.Context()
	dir, err := resolveModelDir(ctx, args[0], f.revision, f.offline, progressWriter(f.quiet || f.asJSON), noticeWriter(cmd, f.quiet))
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return err
	}
	if f.ctxLen > m.Config.MaxPositions {
		return fmt.Errorf("--ctx %d: the model reads at most %d positions (its max_position_embeddings)", f.ctxLen, m.Config.MaxPositions)
	}
	backend, release, err := openBackend(f.device, cmd.ErrOrStderr(), f.quiet || f.asJSON)
	if err != nil {
		return err
	}
	defer release()
	s, err := m.NewSession(model.SessionOptions{Backend: backend, Context: f.ctxLen, Batch: maxStep, KVCache: f.kvCache.t})
	if err != nil {
		return err
	}
	r, err := chat.NewRunner(s, tok)
	if err != nil {
		return err
	}
	opts, seed, err := generationOptions(f)
	if err != nil {
		return err
	}
	device := "cpu"
	if backend != nil {
		device = backend.Name()
	}
	stdout := cmd.OutOrStdout()
	g := &generation{r: r, opts: opts, out: &lineWriter{w: stdout}, outTerminal: isTerminal(stdout), errw: cmd.ErrOrStderr(), maxPositions: m.Config.MaxPositions}
	if !f.asJSON {
		g.stream = g.out
	}
	g.report = func(res chat.Result, prompt string) error {
		st := runStats(m, s, res, device, seed)
		if f.asJSON {
			return printJSON(g.out, runJSON{Model: dir, Prompt: prompt, Text: res.Text, Stop: res.Stop, Stats: st})
		}
		if f.stats {
			printRunStats(g.errw, st)
		}
		return nil
	}
	if in.complete {
		return g.complete(ctx, in.prompt)
	}
	tpl, err := tokenizer.LoadChatTemplate(dir)
	if err != nil {
		return err
	}
	conv, err := chat.NewConversation(r, tpl, f.system)
	if errors.Is(err, chat.ErrNoTemplate) {
		if f.system != "" {
			return errors.New("--system: the model has no chat template, so there is no chat to give it to; its input is completed as plain text")
		}
		if in.terminal == nil {
			fmt.Fprintln(g.errw, "lowbit: the model has no chat template; stdin is completed as plain text")
			return g.complete(ctx, trimFinalNewline(in.prompt))
		}
		fmt.Fprintln(g.errw, "lowbit: the model has no chat template; each message is completed as plain text")
	} else if err != nil {
		return err
	}
	if in.terminal == nil {
		msg := strings.TrimSpace(in.prompt)
		res, err := g.reply(ctx, conv, msg)
		if err != nil {
			return g.explain(ctx, err, false)
		}
		return g.finish(res, msg)
	}
	return g.chatTerminal(ctx, in.terminal, conv)
}

// generation is what run's modes share: the runner, the options, and where
// text and messages go.
type generation struct {
	r            *chat.Runner
	opts         chat.Options
	out          *lineWriter // stdout
	outTerminal  bool
	errw         io.Writer
	stream       io.Writer // the text as it is generated: out, or nil with --json
	report       func(res chat.Result, prompt string) error
	maxPositions int
}

// lineWriter writes to w and remembers whether the last line is
// unfinished, so that a message after a text cut short starts on a line of
// its own.
type lineWriter struct {
	w       io.Writer
	midLine bool
}

func (l *lineWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		l.midLine = p[len(p)-1] != '\n'
	}
	return l.w.Write(p)
}

// endLine ends an unfinished line.
func (l *lineWriter) endLine() {
	if l.midLine {
		fmt.Fprintln(l)
	}
}

// complete streams the completion of prompt, after the prompt itself when
// stdout is a terminal (so the reader sees the whole text).
func (g *generation) complete(ctx context.Context, prompt string) error {
	if g.stream != nil && g.outTerminal {
		fmt.Fprint(g.out, prompt)
	}
	res, err := g.r.Complete(ctx, prompt, g.opts, g.stream)
	if err != nil {
		return g.explain(ctx, err, false)
	}
	return g.finish(res, prompt)
}

// reply answers one chat message, or completes it when the model has no
// chat template (conv nil).
func (g *generation) reply(ctx context.Context, conv *chat.Conversation, msg string) (chat.Result, error) {
	if conv == nil {
		return g.r.Complete(ctx, msg, g.opts, g.stream)
	}
	return conv.Send(ctx, msg, g.opts, g.stream)
}

// finish ends a generation's line of text, says why it stopped where that
// needs saying, and reports the statistics.
func (g *generation) finish(res chat.Result, prompt string) error {
	if g.stream != nil {
		fmt.Fprintln(g.out)
	}
	if res.Stop == chat.StopContext {
		fmt.Fprintf(g.errw, "lowbit: stopped at the end of the context (%d tokens); raise --ctx for more\n", g.r.Context())
	}
	return g.report(res, prompt)
}

// explain turns a generation's error into what the user can do about it
// (on a terminal, a chat can also start over).
func (g *generation) explain(ctx context.Context, err error, interactive bool) error {
	g.out.endLine()
	var tooLong *chat.TooLongError
	switch {
	case errors.As(err, &tooLong) && interactive:
		return fmt.Errorf("%w: /reset to start over, or raise --ctx (the model reads up to %d)", err, g.maxPositions)
	case errors.As(err, &tooLong):
		return fmt.Errorf("%w: raise --ctx (the model reads up to %d) or shorten the prompt", err, g.maxPositions)
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// resolveModelDir finds a model argument's directory, trying in turn (as
// modelArgHelp tells users): an existing path (a directory, or a GGUF file,
// returned as it is), a converted model in the store
// by name, a built-in alias (the demo is embedded; the others come through
// the HF cache), a Hub repo id. Its error says what was tried.
func resolveModelDir(ctx context.Context, name, revision string, offline bool, progress, notices io.Writer) (string, error) {
	local := func(dir string) (string, error) {
		if revision != "" {
			return "", fmt.Errorf("--revision %s: %s is not a Hub repo but %s; --revision picks a revision of a Hub repo", revision, name, dir)
		}
		return dir, nil
	}
	if st, err := os.Stat(name); err == nil {
		if !st.IsDir() {
			if gguf.IsFile(name) {
				return local(name) // model.Load and tokenizer.Load read it whole
			}
			return "", fmt.Errorf("%s is a file; want a model directory or a .gguf file", name)
		}
		return local(name)
	}
	models, storeErr := store.FromEnv()
	if dir, ok, err := models.Find(name); err != nil {
		return "", err
	} else if ok {
		return local(dir)
	}
	inStore := "none by that name in " + models.ModelsDir()
	if storeErr != nil {
		inStore = storeErr.Error()
	}
	e, known := convert.Lookup(name)
	if known && e.Embedded {
		if revision != "" {
			return "", fmt.Errorf("--revision %s: %s is built into lowbit, not a Hub repo", revision, name)
		}
		return models.Demo()
	}
	repo := name
	if known {
		repo = e.Repo
	} else if strings.Count(repo, "/") != 1 || strings.HasPrefix(repo, ".") || strings.HasPrefix(repo, "/") {
		return "", fmt.Errorf("%s: no model found: tried a path (no such directory), the store (%s), a built-in alias (none of %s) and a Hub repo id (not org/name)",
			name, inStore, strings.Join(convert.Aliases(), ", "))
	}
	fetcher, err := newFetcher(offline, 0, progress, notices)
	if err != nil {
		return "", err
	}
	snap, err := fetcher.Fetch(ctx, repo, revision)
	if err != nil {
		return "", fmt.Errorf("%s: tried a path (no such directory), the store (%s), then the Hub repo %s: %w", name, inStore, repo, err)
	}
	return snap.Dir, nil
}

// generationOptions turns the flags into chat options and the seed used;
// a value out of range is refused by its flag's name.
func generationOptions(f runFlags) (chat.Options, uint64, error) {
	bad := func(flag string, v any, want string) (chat.Options, uint64, error) {
		return chat.Options{}, 0, fmt.Errorf("%s %v: want %s", flag, v, want)
	}
	switch {
	case f.maxTokens < 0:
		return bad("-n", f.maxTokens, "0 (until the context is full) or more")
	case f.ctxLen < 0:
		return bad("--ctx", f.ctxLen, "0 (the model's) or more")
	case f.seed < -1:
		return bad("--seed", f.seed, "-1 (random), or 0 or more")
	}
	sampler, err := f.sampling.options()
	if err != nil {
		return chat.Options{}, 0, err
	}
	seed := uint64(f.seed)
	if f.seed < 0 {
		seed = uint64(time.Now().UnixNano())
	}
	sampler.Seed = seed
	stops := make([]string, len(f.stops))
	for i, s := range f.stops {
		stops[i] = unescape(s)
	}
	return chat.Options{MaxTokens: f.maxTokens, Stop: stops, Sampler: sampler}, seed, nil
}

// unescape reads \n, \t, \r and \\ as a shell user means them.
func unescape(s string) string {
	if u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`); err == nil {
		return u
	}
	return s
}

// runStatsJSON are the figures --stats prints and --json returns.
type runStatsJSON struct {
	Device             string  `json:"device"`
	Seed               uint64  `json:"seed"`
	LoadMillis         float64 `json:"load_ms"`
	PromptTokens       int     `json:"prompt_tokens"`
	PromptMillis       float64 `json:"prompt_ms"`
	PromptTokensPerSec float64 `json:"prompt_tokens_per_sec"`
	GenTokens          int     `json:"generated_tokens"`
	GenMillis          float64 `json:"gen_ms"`
	GenTokensPerSec    float64 `json:"gen_tokens_per_sec"`
	WeightBytes        int64   `json:"weight_bytes"`
	KVCacheBytes       int64   `json:"kv_cache_bytes"`
	Context            int     `json:"context"`
}

type runJSON struct {
	Model  string       `json:"model"`
	Prompt string       `json:"prompt"`
	Text   string       `json:"text"`
	Stop   string       `json:"stop"`
	Stats  runStatsJSON `json:"stats"`
}

func runStats(m *model.Model, s *model.Session, res chat.Result, device string, seed uint64) runStatsJSON {
	st := res.Stats
	return runStatsJSON{
		Device: device, Seed: seed,
		LoadMillis:   ms(m.LoadDuration),
		PromptTokens: st.PromptTokens, PromptMillis: ms(st.PromptDuration), PromptTokensPerSec: st.PromptTokensPerSec(),
		GenTokens: st.GeneratedTokens, GenMillis: ms(st.GenDuration), GenTokensPerSec: st.GenTokensPerSec(),
		WeightBytes: m.WeightBytes(), KVCacheBytes: s.CacheBytes(), Context: s.Context(),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printRunStats prints the figures as llama.cpp's llama_perf lines read.
func printRunStats(w io.Writer, st runStatsJSON) {
	perTok := func(msec float64, n int) float64 {
		if n <= 0 {
			return 0
		}
		return msec / float64(n)
	}
	fmt.Fprintf(w, "\nlowbit: device %s, seed %d, context %d\n", st.Device, st.Seed, st.Context)
	fmt.Fprintf(w, "lowbit:        load time = %10.2f ms\n", st.LoadMillis)
	fmt.Fprintf(w, "lowbit: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
		st.PromptMillis, st.PromptTokens, perTok(st.PromptMillis, st.PromptTokens), st.PromptTokensPerSec)
	runs := max(st.GenTokens-1, 0)
	fmt.Fprintf(w, "lowbit:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n",
		st.GenMillis, runs, perTok(st.GenMillis, runs), st.GenTokensPerSec)
	fmt.Fprintf(w, "lowbit:           memory = weights %s, KV cache %s\n", humanBytes(st.WeightBytes), humanBytes(st.KVCacheBytes))
}
