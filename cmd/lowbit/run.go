package main

import (
	"bufio"
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
	"lowbit/model"
	"lowbit/store"
	"lowbit/tokenizer"
)

// runFlags are lowbit run's options.
type runFlags struct {
	maxTokens   int
	temp        float32
	topK        int
	topP        float32
	minP        float32
	repeat      float32
	repeatLastN int
	seed        int64
	stops       []string
	system      string
	ctxLen      int
	device      string
	stats       bool
	asJSON      bool
	offline     bool
	revision    string
	quiet       bool
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run <model> [prompt]",
		Short: "Generate text with a model: complete a prompt, or chat",
		Long: `run loads a model (a lowbit directory, an HF directory in F32/F16/BF16, or an alias
or repo id fetched through the HF cache) and generates text on the GPU when one is
found, else on the CPU. With a prompt it streams the completion; without one it
starts a chat in the model's chat template, reading one message per line of stdin
(/reset forgets the history, /exit ends).`,
		Example: `  lowbit run ./tinyllama-q4 "Once upon a time"
  lowbit run ./tinyllama-q4
  lowbit run ./tinyllama-q4 -n 256 --temp 0.7 --top-p 0.9 --seed 1 --stats`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runModel(cmd, args, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.maxTokens, "n-predict", "n", 256, "most tokens to generate (0: until the context is full)")
	fl.Float32Var(&f.temp, "temp", 0.8, "temperature (0: greedy)")
	fl.IntVar(&f.topK, "top-k", 40, "keep the K most likely tokens (0: all)")
	fl.Float32Var(&f.topP, "top-p", 0.95, "keep the most likely tokens up to this probability (1: all)")
	fl.Float32Var(&f.minP, "min-p", 0.05, "drop tokens less likely than this times the most likely (0: none)")
	fl.Float32Var(&f.repeat, "repeat-penalty", 1.0, "penalty for tokens seen in the last --repeat-last-n (1: none)")
	fl.IntVar(&f.repeatLastN, "repeat-last-n", 64, "history window of the repeat penalty (-1: all)")
	fl.Int64Var(&f.seed, "seed", -1, "sampling seed (-1: random, printed with --stats)")
	fl.StringArrayVar(&f.stops, "stop", nil, `stop at this string (repeatable; \n and \t are understood)`)
	fl.StringVar(&f.system, "system", "", "system message of a chat")
	fl.IntVar(&f.ctxLen, "ctx", 0, "context length in tokens (default: the model's, at most 4096)")
	fl.StringVar(&f.device, "device", "auto", "where to run: cuda, cpu or auto")
	fl.BoolVar(&f.stats, "stats", false, "print timings and memory to stderr, as llama.cpp does")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object with the text and the statistics")
	fl.BoolVar(&f.offline, "offline", false, "use the HF cache only (also HF_HUB_OFFLINE=1)")
	fl.StringVar(&f.revision, "revision", "", "Hub revision of a repo id (default main)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bars")
	return cmd
}

func runModel(cmd *cobra.Command, args []string, f runFlags) error {
	ctx := cmd.Context()
	dir, err := resolveModelDir(ctx, args[0], f.revision, f.offline, progressWriter(f.quiet || f.asJSON))
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
	backend, release, err := openBackend(f.device, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer release()
	s, err := m.NewSession(model.SessionOptions{Backend: backend, Context: f.ctxLen})
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
	report := func(res chat.Result, prompt string) error {
		st := runStats(m, s, res, device, seed)
		if f.asJSON {
			return printJSON(cmd.OutOrStdout(), runJSON{Model: dir, Prompt: prompt, Text: res.Text, Stop: res.Stop, Stats: st})
		}
		if f.stats {
			printRunStats(cmd.ErrOrStderr(), st)
		}
		return nil
	}
	out := cmd.OutOrStdout()
	stream := out
	if f.asJSON {
		stream = nil
	}
	if len(args) == 2 {
		res, err := r.Complete(ctx, args[1], opts, stream)
		if err != nil {
			return err
		}
		if stream != nil {
			fmt.Fprintln(out)
		}
		if res.Stop == chat.StopContext {
			fmt.Fprintf(cmd.ErrOrStderr(), "lowbit: stopped at the end of the context (%d tokens); raise --ctx for more\n", s.Context())
		}
		return report(res, args[1])
	}
	return chatLoop(ctx, cmd, dir, r, opts, f, report)
}

// chatLoop reads messages from stdin until EOF or /exit.
func chatLoop(ctx context.Context, cmd *cobra.Command, dir string, r *chat.Runner, opts chat.Options, f runFlags, report func(chat.Result, string) error) error {
	tpl, err := tokenizer.LoadChatTemplate(dir)
	if err != nil {
		return err
	}
	errw := cmd.ErrOrStderr()
	conv, err := chat.NewConversation(r, tpl, f.system)
	if errors.Is(err, chat.ErrNoTemplate) {
		fmt.Fprintln(errw, "lowbit: the model has no chat template; each line is completed as plain text")
	} else if err != nil {
		return err
	}
	in := cmd.InOrStdin()
	interactive := false
	if file, ok := in.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
		interactive = true
		fmt.Fprintln(errw, "lowbit: chat started; /reset forgets the history, /exit or Ctrl-D ends")
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	out := cmd.OutOrStdout()
	stream := out
	if f.asJSON {
		stream = nil
	}
	for {
		if interactive {
			fmt.Fprint(errw, "> ")
		}
		if !sc.Scan() {
			break
		}
		line := strings.TrimSpace(sc.Text())
		switch line {
		case "":
			continue
		case "/exit", "/bye", "/quit":
			return nil
		case "/reset", "/clear":
			if conv != nil {
				conv.Reset()
			}
			fmt.Fprintln(errw, "lowbit: history cleared")
			continue
		}
		var res chat.Result
		if conv != nil {
			res, err = conv.Send(ctx, line, opts, stream)
		} else {
			res, err = r.Complete(ctx, line, opts, stream)
		}
		if err != nil {
			return err
		}
		if stream != nil {
			fmt.Fprintln(out)
		}
		if res.Stop == chat.StopContext {
			fmt.Fprintln(errw, "lowbit: the reply reached the end of the context; /reset to continue")
		}
		if err := report(res, line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// resolveModelDir finds a model argument's directory, trying in turn (as
// modelArgHelp tells users): an existing path, a converted model in the store
// by name, a built-in alias (the demo is embedded; the others come through
// the HF cache), a Hub repo id. Its error says what was tried.
func resolveModelDir(ctx context.Context, name, revision string, offline bool, progress io.Writer) (string, error) {
	if st, err := os.Stat(name); err == nil {
		if !st.IsDir() {
			return "", fmt.Errorf("%s is a file; want a model directory", name)
		}
		return name, nil
	}
	models, storeErr := store.FromEnv()
	if dir, ok, err := models.Find(name); err != nil {
		return "", err
	} else if ok {
		return dir, nil
	}
	inStore := "none by that name in " + models.ModelsDir()
	if storeErr != nil {
		inStore = storeErr.Error()
	}
	e, known := convert.Lookup(name)
	if known && e.Embedded {
		return models.Demo()
	}
	repo := name
	if known {
		repo = e.Repo
	} else if strings.Count(repo, "/") != 1 || strings.HasPrefix(repo, ".") || strings.HasPrefix(repo, "/") {
		return "", fmt.Errorf("%s: no model found: tried a path (no such directory), the store (%s), a built-in alias (none of %s) and a Hub repo id (not org/name)",
			name, inStore, strings.Join(convert.Aliases(), ", "))
	}
	fetcher, err := newFetcher(offline, 0, progress)
	if err != nil {
		return "", err
	}
	snap, err := fetcher.Fetch(ctx, repo, revision)
	if err != nil {
		return "", fmt.Errorf("%s: tried a path (no such directory), the store (%s), then the Hub repo %s: %w", name, inStore, repo, err)
	}
	return snap.Dir, nil
}

// generationOptions turns the flags into chat options and the seed used.
func generationOptions(f runFlags) (chat.Options, uint64, error) {
	if f.maxTokens < 0 {
		return chat.Options{}, 0, fmt.Errorf("-n %d: want 0 or more", f.maxTokens)
	}
	if f.ctxLen < 0 {
		return chat.Options{}, 0, fmt.Errorf("--ctx %d: want 0 (the model's) or more", f.ctxLen)
	}
	seed := uint64(f.seed)
	if f.seed < 0 {
		seed = uint64(time.Now().UnixNano())
	}
	stops := make([]string, len(f.stops))
	for i, s := range f.stops {
		stops[i] = unescape(s)
	}
	return chat.Options{
		MaxTokens: f.maxTokens,
		Stop:      stops,
		Sampler: model.SamplerOptions{
			Temperature: f.temp, TopK: f.topK, TopP: f.topP, MinP: f.minP,
			RepeatPenalty: f.repeat, RepeatLastN: f.repeatLastN, Seed: seed,
		},
	}, seed, nil
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
