package main

import (
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"lowbit/chat"
	"lowbit/model"
	"lowbit/sched"
	"lowbit/serve"
	"lowbit/tokenizer"
)

// serveFlags are lowbit serve's options.
type serveFlags struct {
	host     string
	port     int
	queue    int
	parallel int
	chunk    int
	kvBudget string
	kvCache  kvCacheFlag
	apiKey   string
	maxBody  int64
	grace    time.Duration
	ctxLen   int
	device   string
	jsonLog  bool
	quiet    bool
	offline  bool
	revision string
}

// apiKeyEnv holds the API key when --api-key is not given (a flag shows in
// the process list; the environment does not).
const apiKeyEnv = "LOWBIT_API_KEY"

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve <model>...",
		Short: "Serve models over OpenAI's HTTP API",
		Long: `serve loads one or more models and answers OpenAI's API on http://HOST:PORT/v1:
POST /v1/chat/completions (messages in the model's chat template), POST /v1/completions,
GET /v1/models, and GET /health. A model's id in the API is its name as given here.
Responses stream as server-sent events with "stream": true.

Each model generates up to --parallel requests at once (continuous batching): every step
decodes one token of each running request, and feeds the prompts of new ones in chunks of
--chunk tokens beside them, so a long prompt never stalls the others' streams. Each request
has a cache slot of --ctx positions (--kv-budget caps the cache instead: the slots share
it); more requests wait in the order they came, up to --queue, and one more is answered
503 with Retry-After. A client that disconnects leaves the queue, or its slot, at once.

It listens on the loopback address unless --host says otherwise; with --api-key (or
` + apiKeyEnv + `) every request but /health must send Authorization: Bearer <key>.
One line per request goes to stderr (--json: one JSON object), with a generation's
wait for a slot, time to first token and inter-token latency (mean and longest). SIGTERM or Ctrl-C stops
accepting, lets requests in flight finish for --grace, cancels the rest and exits 0.`,
		Example: `  lowbit serve demo
  lowbit serve ./tinyllama-q4 ./mistral-q4 --port 8000
  lowbit serve ./tinyllama-q4 --parallel 64 --kv-budget 8GiB
  LOWBIT_API_KEY=secret lowbit serve ./tinyllama-q4 --host 0.0.0.0`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.apiKey == "" {
				f.apiKey = os.Getenv(apiKeyEnv)
			}
			return runServe(cmd, args, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.host, "host", "127.0.0.1", "address to listen on (another than loopback: give --api-key too)")
	fl.IntVar(&f.port, "port", 8080, "port to listen on (0: any free one)")
	fl.IntVar(&f.queue, "queue", sched.DefaultQueue, "most requests waiting for a slot, per model")
	fl.IntVar(&f.parallel, "parallel", 1, "requests generated at once, per model (cache slots)")
	fl.IntVar(&f.chunk, "chunk", 0, fmt.Sprintf("prompt tokens fed per step beside the decoding requests (default %d, less where --parallel leaves no room; %d with --parallel 1)", sched.DefaultChunk, maxStep))
	fl.StringVar(&f.kvBudget, "kv-budget", "", "most memory of each model's KV cache, e.g. 8GiB: each slot's context is what fits (at most --ctx)")
	fl.StringVar(&f.apiKey, "api-key", "", "bearer token every request must send (default $"+apiKeyEnv+")")
	fl.Int64Var(&f.maxBody, "max-body", serve.DefaultMaxBodyBytes, "largest request body in bytes")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "how long requests in flight may finish after SIGTERM")
	fl.IntVar(&f.ctxLen, "ctx", 0, "context length in tokens (default: the model's, at most 4096)")
	fl.Var(&f.kvCache, "kv-cache", kvCacheUsage)
	fl.StringVar(&f.device, "device", "auto", "where to run: cuda, cpu or auto")
	fl.BoolVar(&f.jsonLog, "json", false, "log requests as JSON objects")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bars or notices")
	fl.BoolVar(&f.offline, "offline", false, "use the HF cache only (also HF_HUB_OFFLINE=1)")
	fl.StringVar(&f.revision, "revision", "", "Hub revision of repo ids (default main)")
	return cmd
}

// checkServeFlags refuses flags out of range before a model is loaded.
func checkServeFlags(f serveFlags) error {
	room := maxStep - (f.parallel - 1) // the prompt tokens a step holds beside the decode tokens
	switch {
	case f.parallel < 1 || f.parallel > maxStep:
		return fmt.Errorf("--parallel %d: want 1 to %d", f.parallel, maxStep)
	case f.chunk < 0:
		return fmt.Errorf("--chunk %d: want 1 or more", f.chunk)
	case f.chunk > room:
		return fmt.Errorf("--chunk %d with --parallel %d: a step would hold %d tokens, over %d; lower one of them", f.chunk, f.parallel, f.chunk+f.parallel-1, maxStep)
	case f.port < 0 || f.port > 65535:
		return fmt.Errorf("--port %d: want 0 to 65535", f.port)
	case f.queue < 1:
		return fmt.Errorf("--queue %d: want 1 or more", f.queue)
	case f.maxBody < 1:
		return fmt.Errorf("--max-body %d: want 1 or more", f.maxBody)
	case f.grace < 0:
		return fmt.Errorf("--grace %v: want 0 or more", f.grace)
	case f.ctxLen < 0:
		return fmt.Errorf("--ctx %d: want 0 (the model's) or more", f.ctxLen)
	}
	if _, err := kvBudget(f.kvBudget); err != nil {
		return err
	}
	return nil
}

// kvBudget parses --kv-budget (0: none).
func kvBudget(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("--kv-budget %q: want a size such as 8GiB or 512MB", s)
	}
	return int64(n), nil
}

func runServe(cmd *cobra.Command, args []string, f serveFlags) error {
	if err := checkServeFlags(f); err != nil {
		return err
	}
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	// One backend for every model: their schedulers take turns at it, a
	// step at a time.
	backend, release, err := openBackend(f.device, stderr, f.quiet)
	if err != nil {
		return err
	}
	defer release()
	var steps sync.Mutex
	var models []serve.Model
	for _, name := range args {
		m, err := loadServed(cmd, name, backend, &steps, f)
		if err != nil {
			return err
		}
		models = append(models, m)
	}
	srv, err := serve.New(models, serve.Options{MaxBodyBytes: f.maxBody, APIKey: f.apiKey, Log: stderr, JSONLog: f.jsonLog})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		return fmt.Errorf("--host %s --port %d: %w", f.host, f.port, err)
	}
	if f.apiKey == "" && !isLoopback(ln.Addr()) {
		fmt.Fprintf(stderr, "lowbit: warning: listening on %s without an API key: anyone who reaches it can use it (--api-key or %s)\n", ln.Addr(), apiKeyEnv)
	}
	fmt.Fprintf(stderr, "lowbit: serving %d model(s) on http://%s/v1 (Ctrl-C stops)\n", len(models), ln.Addr())
	if err := srv.Serve(ctx, ln, f.grace); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	fmt.Fprintln(stderr, "lowbit: stopped")
	return nil
}

// loadServed loads one model argument for serving, named as it was given,
// on a session of --parallel slots scheduled with the others' steps.
func loadServed(cmd *cobra.Command, name string, backend model.Backend, steps sync.Locker, f serveFlags) (serve.Model, error) {
	ctx := cmd.Context()
	dir, err := resolveModelDir(ctx, name, f.revision, f.offline, progressWriter(f.quiet), noticeWriter(cmd, f.quiet))
	if err != nil {
		return serve.Model{}, err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return serve.Model{}, err
	}
	tpl, err := tokenizer.LoadChatTemplate(dir)
	if err != nil {
		return serve.Model{}, err
	}
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return serve.Model{}, err
	}
	if f.ctxLen > m.Config.MaxPositions {
		return serve.Model{}, fmt.Errorf("%s: --ctx %d: the model reads at most %d positions (its max_position_embeddings)", name, f.ctxLen, m.Config.MaxPositions)
	}
	ctxLen := f.ctxLen
	if ctxLen == 0 {
		ctxLen = min(m.Config.MaxPositions, model.DefaultContext)
	}
	budget, err := kvBudget(f.kvBudget)
	if err != nil {
		return serve.Model{}, err
	}
	if budget > 0 {
		fits := budget / (int64(f.parallel) * m.Config.CachePositionBytes(f.kvCache.t))
		if fits < minSlotContext {
			return serve.Model{}, fmt.Errorf("%s: --kv-budget %s holds %d positions for each of --parallel %d slots (a position takes %s); want at least %d: raise it or lower --parallel",
				name, f.kvBudget, fits, f.parallel, humanBytes(m.Config.CachePositionBytes(f.kvCache.t)), minSlotContext)
		}
		ctxLen = int(min(int64(ctxLen), fits))
	}
	s, err := m.NewSession(model.SessionOptions{Backend: backend, Context: ctxLen, Batch: maxStep, Slots: f.parallel, KVCache: f.kvCache.t})
	if err != nil {
		return serve.Model{}, err
	}
	sc, err := sched.New(s, sched.Options{Chunk: f.chunk, Queue: f.queue, Lock: steps})
	if err != nil {
		return serve.Model{}, fmt.Errorf("%s: %w", name, err)
	}
	r, err := chat.NewScheduled(sc, tok)
	if err != nil {
		return serve.Model{}, fmt.Errorf("%s: %w", name, err)
	}
	if !f.quiet {
		w := cmd.ErrOrStderr()
		fmt.Fprintf(w, "lowbit: %s: %d slot(s) of %d positions, KV cache %s, prompts in chunks of %d\n", name, f.parallel, ctxLen, humanBytes(s.CacheBytes()), sc.Options().Chunk)
		if tpl == nil {
			fmt.Fprintf(w, "lowbit: %s has no chat template: it answers /v1/completions only\n", name)
		}
	}
	return serve.Model{Name: name, Runner: r, Template: tpl}, nil
}

// minSlotContext is the least context a slot may have under --kv-budget.
const minSlotContext = 64

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
