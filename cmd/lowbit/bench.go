package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"lowbit/bench"
	"lowbit/model"
	"lowbit/quantize"
)

// benchFlags are lowbit bench's options.
type benchFlags struct {
	prompt, gen, reps int
	depth             int
	batches           []int
	shapes, bits      []string
	device            string
	asJSON, quiet     bool
	offline           bool
	revision          string
	sampling          samplingFlags
	kvCache           kvCacheFlag
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [model]",
		Short: "Measure prompt (pp) and generation (tg) speed as llama-bench does",
		Long: `bench runs a model's prompt processing (-p tokens at once) and token generation
(-n tokens one by one, greedy) several times and prints tokens per second as mean ± sd,
the weight bytes a generated token reads, the bandwidth that achieves, and on a GPU
the device's copy bandwidth (the roofline) and its memory by kind.

-b (--batch) replaces the tg test with one per batch size B: B sequences decode together,
one token each per step, and the test reports their aggregate tokens per second, as
llama-batched-bench's S_TG (the throughput of a server generating for B users at once).

Without a model, --shape builds models of real architectures' exact shapes with
random weights in --bits (no download), one of
  ` + strings.Join(bench.Shapes(), ", ") + `
(bitnet-2b is ternary: --bits tq2); --bits f16 gives the unquantized baseline (f16 on
the GPU, float32 on the CPU). Both take comma-separated lists.`,
		Example: `  lowbit bench ./tinyllama-q4
  lowbit bench --shape tinyllama,llama2-7b --bits 4,8 -p 512 -n 128
  lowbit bench --shape llama3.1-8b,qwen2.5-7b,qwen3-8b,gemma2-9b,phi3.5-mini --bits 4
  lowbit bench --shape bitnet-2b --bits tq2 --json
  lowbit bench --shape tinyllama -p 0 -b 1,8,32,64`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd, args, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.prompt, "prompt", "p", 512, "prompt tokens of the pp test (0: none)")
	fl.IntVarP(&f.gen, "n-gen", "n", 128, "generated tokens of the tg test (0: none)")
	fl.IntVarP(&f.depth, "depth", "d", 0, "tokens already in the context when each test starts")
	fl.IntVarP(&f.reps, "repetitions", "r", 5, "timed repetitions of each test")
	fl.IntSliceVarP(&f.batches, "batch", "b", nil, "sequences decoding together in the tg test, one test per size (aggregate tokens/s)")
	fl.StringSliceVar(&f.shapes, "shape", nil, "random model of this shape instead of a model: "+strings.Join(bench.Shapes(), ", "))
	fl.StringSliceVar(&f.bits, "bits", []string{"4"}, "format of a --shape model: 1, 2, 4, 8, ternary (also tq2) or f16 (16-bit floats on the GPU)")
	fl.StringVar(&f.device, "device", "auto", "where to run: cuda, cpu or auto")
	fl.Var(&f.kvCache, "kv-cache", kvCacheUsage)
	fl.BoolVar(&f.asJSON, "json", false, "print the results as JSON")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress lines")
	fl.BoolVar(&f.offline, "offline", false, "use the HF cache only (also HF_HUB_OFFLINE=1)")
	fl.StringVar(&f.revision, "revision", "", "Hub revision of a repo id (default main)")
	f.sampling.register(fl, 0, "time tg sampling at this temperature, as lowbit run does (0: greedy, as llama-bench)")
	return cmd
}

func runBench(cmd *cobra.Command, args []string, f benchFlags) error {
	ctx := cmd.Context()
	if (len(args) == 1) == (len(f.shapes) > 0) {
		return fmt.Errorf("bench: give a model or --shape, one of the two")
	}
	if len(args) == 1 && cmd.Flags().Changed("bits") {
		return fmt.Errorf("--bits chooses the format of --shape models; a model is measured in the format it is stored in")
	}
	for _, b := range f.batches {
		if b < 1 {
			return fmt.Errorf("--batch %d: want 1 or more sequences", b)
		}
	}
	if len(f.batches) > 0 && f.sampling.temp > 0 {
		return fmt.Errorf("--batch with --temp: batched decoding is measured greedy")
	}
	progress := progressWriter(f.quiet || f.asJSON)
	sampling, err := f.sampling.options()
	if err != nil {
		return err
	}
	devices, err := newBackends(f.device, cmd.ErrOrStderr(), f.quiet || f.asJSON)
	if err != nil {
		return err
	}
	type job struct {
		name string
		load func() (*model.Model, error)
	}
	var jobs []job
	if len(args) == 1 {
		jobs = append(jobs, job{args[0], func() (*model.Model, error) {
			dir, err := resolveModelDir(ctx, args[0], f.revision, f.offline, progress, noticeWriter(cmd, f.quiet))
			if err != nil {
				return nil, err
			}
			return model.Load(ctx, dir, model.LoadOptions{})
		}})
	}
	for _, shape := range f.shapes {
		for _, b := range f.bits {
			format, err := quantize.ParseFormat(b)
			if err != nil {
				return fmt.Errorf("--bits %s: %w", b, err)
			}
			jobs = append(jobs, job{shape + "-shape", func() (*model.Model, error) {
				return bench.RandomModel(ctx, shape, format, 1)
			}})
		}
	}
	var results []*bench.Result
	for _, j := range jobs {
		m, err := j.load()
		if err != nil {
			return err
		}
		be, release, err := devices.open()
		if err != nil {
			return err
		}
		opts := bench.Options{Prompt: f.prompt, Gen: f.gen, Depth: f.depth, Reps: f.reps, Batches: f.batches, Progress: progress, KVCache: f.kvCache.t}
		if sampling.Temperature > 0 {
			opts.Sampling = &sampling
		}
		// The default tests shrink to fit a short context; tests asked for do not.
		room := m.Config.MaxPositions - f.depth
		if !cmd.Flags().Changed("prompt") {
			opts.Prompt = min(opts.Prompt, room)
		}
		if !cmd.Flags().Changed("n-gen") {
			opts.Gen = min(opts.Gen, room)
		}
		res, err := bench.Run(ctx, m, be, j.name, opts)
		release()
		if err != nil {
			return fmt.Errorf("%s: %w", j.name, err)
		}
		results = append(results, res)
		if !f.asJSON {
			printBench(cmd, res)
		}
	}
	if f.asJSON {
		return printJSON(cmd.OutOrStdout(), results)
	}
	return nil
}

// printBench writes one result as llama-bench's table rows plus the
// bandwidth and memory lines.
func printBench(cmd *cobra.Command, r *bench.Result) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "| model | format | params | device | kv | test | t/s |\n|---|---|---:|---|---|---:|---:|\n")
	for _, t := range r.Tests {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.2f ± %.2f |\n", r.Model, r.Format, humanCount(r.Params), r.Device, r.KVCache, t.Test, t.Mean, t.SD)
	}
	fmt.Fprintf(w, "weights read per token: %s", humanBytes(r.WeightBytes))
	if r.Bandwidth > 0 {
		fmt.Fprintf(w, ", achieved %s/s", humanBytes(int64(r.Bandwidth)))
		if r.DeviceBandwidth > 0 {
			fmt.Fprintf(w, " = %.0f%% of the device copy bandwidth %s/s (roofline %.0f tokens/s)",
				100*r.Bandwidth/r.DeviceBandwidth, humanBytes(int64(r.DeviceBandwidth)), r.DeviceBandwidth/float64(r.WeightBytes))
		}
	}
	fmt.Fprintln(w)
	if r.Memory != nil {
		fmt.Fprintf(w, "VRAM: weights %s, KV cache %s, scratch %s\n", humanBytes(r.Memory.Weights), humanBytes(r.Memory.KV), humanBytes(r.Memory.Scratch))
	}
	fmt.Fprintln(w)
}
