package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"lowbit/chat"
	"lowbit/model"
	"lowbit/serve"
	"lowbit/tokenizer"
)

// serveFlags are lowbit serve's options.
type serveFlags struct {
	host     string
	port     int
	queue    int
	parallel int
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

A model holds one sequence, so requests are generated one at a time in the order they
came; up to --queue more wait, and one more is answered 503 with Retry-After. A client
that disconnects leaves the queue, or stops its generation, at once.

It listens on the loopback address unless --host says otherwise; with --api-key (or
` + apiKeyEnv + `) every request but /health must send Authorization: Bearer <key>.
One line per request goes to stderr (--json: one JSON object). SIGTERM or Ctrl-C stops
accepting, lets requests in flight finish for --grace, cancels the rest and exits 0.`,
		Example: `  lowbit serve demo
  lowbit serve ./tinyllama-q4 ./mistral-q4 --port 8000
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
	fl.IntVar(&f.queue, "queue", serve.DefaultQueue, "most requests waiting while one is generated")
	fl.IntVar(&f.parallel, "parallel", 1, "sequences generated at once (only 1: batching is not there yet)")
	fl.StringVar(&f.apiKey, "api-key", "", "bearer token every request must send (default $"+apiKeyEnv+")")
	fl.Int64Var(&f.maxBody, "max-body", serve.DefaultMaxBodyBytes, "largest request body in bytes")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "how long requests in flight may finish after SIGTERM")
	fl.IntVar(&f.ctxLen, "ctx", 0, "context length in tokens (default: the model's, at most 4096)")
	fl.StringVar(&f.device, "device", "auto", "where to run: cuda, cpu or auto")
	fl.BoolVar(&f.jsonLog, "json", false, "log requests as JSON objects")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bars or notices")
	fl.BoolVar(&f.offline, "offline", false, "use the HF cache only (also HF_HUB_OFFLINE=1)")
	fl.StringVar(&f.revision, "revision", "", "Hub revision of repo ids (default main)")
	return cmd
}

// checkServeFlags refuses flags out of range before a model is loaded.
func checkServeFlags(f serveFlags) error {
	switch {
	case f.parallel != 1:
		return fmt.Errorf("--parallel %d: batching several sequences is not there yet; only --parallel 1 is supported", f.parallel)
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
	return nil
}

func runServe(cmd *cobra.Command, args []string, f serveFlags) error {
	if err := checkServeFlags(f); err != nil {
		return err
	}
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	// One backend for every model: they run one at a time.
	backend, release, err := openBackend(f.device, stderr, f.quiet)
	if err != nil {
		return err
	}
	defer release()
	var models []serve.Model
	for _, name := range args {
		m, err := loadServed(cmd, name, backend, f)
		if err != nil {
			return err
		}
		models = append(models, m)
	}
	srv, err := serve.New(models, serve.Options{Queue: f.queue, MaxBodyBytes: f.maxBody, APIKey: f.apiKey, Log: stderr, JSONLog: f.jsonLog})
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

// loadServed loads one model argument for serving, named as it was given.
func loadServed(cmd *cobra.Command, name string, backend model.Backend, f serveFlags) (serve.Model, error) {
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
	s, err := m.NewSession(model.SessionOptions{Backend: backend, Context: f.ctxLen, Batch: maxStep})
	if err != nil {
		return serve.Model{}, err
	}
	r, err := chat.NewRunner(s, tok)
	if err != nil {
		return serve.Model{}, fmt.Errorf("%s: %w", name, err)
	}
	if tpl == nil && !f.quiet {
		fmt.Fprintf(cmd.ErrOrStderr(), "lowbit: %s has no chat template: it answers /v1/completions only\n", name)
	}
	return serve.Model{Name: name, Runner: r, Template: tpl}, nil
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
