package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"lowbit/gguf"
	"lowbit/hub"
	"lowbit/internal/atomicfile"
	"lowbit/internal/safefile"
	"lowbit/model"
	"lowbit/validate"
)

// maxTextSize bounds the --text file: validation reads at most a few thousand
// tokens of it, so a larger file is a mistake (or /dev/zero) to refuse, not read.
const maxTextSize = 64 << 20

func newValidateCmd() *cobra.Command {
	var (
		kernels   bool
		seed      int64
		realDir   string
		reference string
		textFiles []string
		maxTokens int
		sweep     bool
		sample    int
		calibFile string
		calibToks int
		targets   []float64
		only      []string
		window    int
		workers   int
		device    string
		asJSON    bool
		quiet     bool
		offline   bool // accepted, and always so
		htmlFile  string
		kvCache   kvCacheFlag
		kldMean   float64
		kldP99    float64
		top1      float64
		pplRatio  float64
	)
	cmd := &cobra.Command{
		Use:   "validate [<quantized-model>]",
		Short: "Measure what the bits cost: kernels against a float64 reference, a model against its original",
		Long: `validate checks kernels (--kernels: every format's products on the CPU and, when a GPU is
found, CUDA, against a float64 reference from the same packed weights, within 5% for 1 bit,
1% for 2 bits and ternary, 0.5% for 4 bits, 0.1% for 8 bits) and models (a converted model
against its float original over a text: per-layer error, KL divergence, top-1 agreement and
perplexity, with per-format thresholds; a GGUF file, lowbit's export or llama.cpp's, likewise,
against --reference or the source its lowbit.* keys name; a BitNet model converted to ternary against its original's
linear weights ternarized, as BitNet runs them, with a 99% top-1 bar). It exits with status 1
when a check fails.`,
		Example: `  lowbit validate --kernels
  lowbit validate ./tinyllama-q4
  lowbit validate ./tinyllama-q4 --reference ./TinyLlama-1.1B-Chat-v1.0 --text book.txt --html report.html
  lowbit validate tinyllama-q4_1.gguf --reference TinyLlama/TinyLlama-1.1B-Chat-v1.0
  lowbit validate --sweep ./stories260K-hf --text alice.txt          # every format, bits against KLD
  lowbit validate --sweep ./stories260K-hf --targets 2.7,3.6 --calib my.txt --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if len(args) == 0 && !kernels {
				return fmt.Errorf("give a model directory to validate, or --kernels")
			}
			texts, err := readTexts(textFiles)
			if err != nil {
				return err
			}
			if sweep {
				if len(args) != 1 || kernels {
					return fmt.Errorf("--sweep takes one float model (an HF directory) and no --kernels")
				}
				return runSweep(cmd, args[0], sweepFlags{texts: texts, sample: sample, seed: seed, calibFile: calibFile,
					calibTokens: calibToks, targets: targets, only: only, window: window, maxTokens: maxTokens, workers: workers, asJSON: asJSON, quiet: quiet})
			}
			if len(texts) > 1 {
				return fmt.Errorf("--text: one evaluation text validates a model (several are for --sweep)")
			}
			devices, err := newBackends(device, cmd.ErrOrStderr(), quiet || asJSON)
			if err != nil {
				return err
			}
			var releases []func()
			defer func() {
				for _, r := range releases {
					if r != nil {
						r()
					}
				}
			}()
			rep := &validate.Report{}
			if len(args) == 1 {
				text := ""
				if len(texts) == 1 {
					text = texts[0].Text
				}
				// A name never downloads: a Hub repo is a float model, not one to validate.
				dir, err := resolveModelDir(ctx, args[0], "", true, nil, noticeWriter(cmd, quiet))
				if err != nil {
					return err
				}
				check := validate.ModelDir
				if gguf.IsFile(dir) {
					check = validate.ModelGGUF
				}
				m, ref, err := check(ctx, dir, validate.DirOptions{
					Reference: reference, CacheDir: hub.OptionsFromEnv().CacheDir, Text: text, MaxTokens: maxTokens,
					KVCache: kvCache.t, KVCaches: []model.KVType{model.KVF16, model.KVQ8},
					Backend: func() (model.Backend, error) {
						b, release, err := devices.open()
						releases = append(releases, release)
						return b, err
					},
					Adjust: func(t *validate.Thresholds) {
						f := cmd.Flags()
						if f.Changed("max-kld-mean") {
							t.MaxKLDMean = kldMean
						}
						if f.Changed("max-kld-p99") {
							t.MaxKLDP99 = kldP99
						}
						if f.Changed("min-top1") {
							t.MinTop1 = top1
						}
						if f.Changed("max-ppl-ratio") {
							t.MaxPPLRatio = pplRatio
						}
					},
				})
				if err != nil {
					return err
				}
				rep.Model, rep.ModelDir, rep.Reference = m, dir, ref
			}
			if kernels {
				opts := validate.KernelOptions{Seed: uint64(seed), Backends: validate.CPUBackends(), Missing: map[string]string{}}
				if seed < 0 {
					opts.Seed = validate.NewSeed()
				}
				if device != "cpu" {
					cuda, err := validate.OpenCUDA()
					switch {
					case err == nil:
						defer cuda.Close()
						opts.Backends = append(opts.Backends, cuda)
					case device == "cuda":
						return fmt.Errorf("--device cuda: %w", err)
					default:
						opts.Missing["cuda"] = err.Error()
					}
				}
				if realDir != "" {
					real, err := validate.RealWeights(ctx, realDir, 256)
					if err != nil {
						return err
					}
					opts.Real = real
				}
				k, err := validate.RunKernels(ctx, opts)
				if err != nil {
					return err
				}
				rep.Kernels = k
			}
			rep.Finish()
			if htmlFile != "" {
				if err := atomicfile.Write(htmlFile, 0o644, rep.WriteHTML); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = printJSON(out, rep)
			} else {
				err = rep.WriteText(out)
			}
			if err != nil {
				return err
			}
			if rep.Status != validate.Pass {
				return exitError{code: 1, msg: "validation failed"}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&kernels, "kernels", false, "check every format's products on every backend present")
	f.Int64Var(&seed, "seed", -1, "seed of the kernel inputs (-1: new each run; the report prints it), as run's --seed")
	f.StringVar(&realDir, "model", "", "also use rows of this float model's weights as kernel inputs")
	f.StringVar(&reference, "reference", "", "the float original: a directory or a repo id in the HF cache (default: the model's source)")
	f.StringArrayVar(&textFiles, "text", nil, "evaluation text file (default: a built-in passage; repeat for --sweep)")
	f.IntVar(&maxTokens, "max-tokens", 0, "most tokens of the text to evaluate (default 8192)")
	f.BoolVar(&sweep, "sweep", false, "quantize a float model every way (each format without and with calibration, mixes) and print bits per weight against KLD, top-1 and perplexity")
	f.IntVar(&sample, "sample", 2048, "with --sweep: also evaluate on this many tokens sampled from the float model at temperature 1 (--seed, default 1; 0: none)")
	f.StringVar(&calibFile, "calib", "", "with --sweep: calibration text file (default: the built-in one)")
	f.IntVar(&calibToks, "calib-tokens", 0, "with --sweep: most tokens of the calibration text (default: 128 to 4096 by model size)")
	f.Float64SliceVar(&targets, "targets", validate.DefaultSweepTargets, "with --sweep: mixed-precision targets, bits per linear weight")
	f.StringSliceVar(&only, "only", nil, "with --sweep: only these variants (q4,q3s+gptq,mix2.7; default: all)")
	f.IntVar(&window, "window", 256, "with --sweep: tokens per forward pass")
	f.IntVar(&workers, "workers", 0, "with --sweep: goroutines (default: all cores)")
	f.StringVar(&device, "device", "auto", "cpu, cuda or auto")
	f.Var(&kvCache, "kv-cache", kvCacheUsage+" (the reference's is f32; f16's and q8's own costs are reported too)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bars or notices on stderr")
	f.BoolVar(&offline, "offline", false, "accepted as run's: validate never uses the network (the model and its reference come from disk and the HF cache)")
	f.StringVar(&htmlFile, "html", "", "also write an HTML report with plots to this file")
	f.Float64Var(&kldMean, "max-kld-mean", 0, "threshold: mean KL divergence (default: the format's)")
	f.Float64Var(&kldP99, "max-kld-p99", 0, "threshold: 99th percentile of the KL divergence")
	f.Float64Var(&top1, "min-top1", 0, "threshold: least top-1 agreement (0..1)")
	f.Float64Var(&pplRatio, "max-ppl-ratio", 0, "threshold: most perplexity ratio")
	return cmd
}

// readTexts reads --text files, each bounded and non-empty.
func readTexts(files []string) ([]validate.SweepText, error) {
	var out []validate.SweepText
	for _, f := range files {
		b, err := safefile.ReadFile(f, maxTextSize)
		if err != nil {
			return nil, fmt.Errorf("--text: %w", err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("--text %s: the file is empty", f)
		}
		out = append(out, validate.SweepText{Name: filepath.Base(f), Text: string(b)})
	}
	return out, nil
}

// sweepFlags are validate --sweep's settings.
type sweepFlags struct {
	texts                                  []validate.SweepText
	sample, calibTokens, window, maxTokens int
	workers                                int
	seed                                   int64
	calibFile                              string
	targets                                []float64
	only                                   []string
	asJSON, quiet                          bool
}

// runSweep is validate --sweep: a float model quantized every way.
func runSweep(cmd *cobra.Command, name string, f sweepFlags) error {
	ctx := cmd.Context()
	dir, err := resolveModelDir(ctx, name, "", true, nil, noticeWriter(cmd, f.quiet))
	if err != nil {
		return err
	}
	o := validate.SweepDirOptions{Texts: f.texts, SampleTokens: f.sample, SampleSeed: 1, CalibTokens: f.calibTokens,
		Targets: f.targets, Only: f.only, Window: f.window, MaxTokens: f.maxTokens, Workers: f.workers}
	if f.seed >= 0 {
		o.SampleSeed = uint64(f.seed)
	}
	if f.calibFile != "" {
		b, err := safefile.ReadFile(f.calibFile, maxTextSize)
		if err != nil {
			return fmt.Errorf("--calib: %w", err)
		}
		o.CalibText, o.CalibSource = string(b), f.calibFile
	}
	if w := progressWriter(f.quiet || f.asJSON); w != nil {
		o.Progress = func(i, n int, v validate.SweepVariant) {
			fmt.Fprintf(w, "\rsweep %d/%d: %-16s", i+1, n, v.Name)
			if i+1 == n {
				fmt.Fprintln(w)
			}
		}
	}
	rep, err := validate.SweepDir(ctx, dir, o)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.asJSON {
		return printJSON(out, rep)
	}
	fmt.Fprintf(out, "%s: calibration %s (%d tokens, sha256 %.12s)\n", rep.Model, rep.Calibration.Source, rep.Calibration.Tokens, rep.Calibration.SHA256)
	for _, t := range rep.Texts {
		fmt.Fprintf(out, "text %s (sha256 %.12s)\n", t.Name, t.SHA256)
	}
	return validate.WriteSweep(out, rep.Rows)
}
