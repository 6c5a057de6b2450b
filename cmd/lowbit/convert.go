package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"lowbit/convert"
	"lowbit/store"
)

func newConvertCmd() *cobra.Command {
	var (
		opts       convert.Options
		listModels bool
		asJSON     bool
		quiet      bool
		format     string
		offline    bool
		workers    int
	)
	cmd := &cobra.Command{
		Use:   "convert <model-dir | alias | org/repo>",
		Short: "Download, quantize, export with a manifest, and validate a model",
		Long: `convert takes a HuggingFace model (a directory, a built-in alias: demo is built into
lowbit, the others are downloaded through the HF cache, or any Hub repo id), quantizes it,
writes a lowbit model directory with its manifest and validates it. Without --out the
model goes to the store, $LOWBIT_HOME/models/<alias or repo name>-<format> (LOWBIT_HOME
defaults to lowbit in the user's cache directory, ~/.cache/lowbit), where run, validate,
bench and show find it by that name. With --format gguf the output is one GGUF file for
llama.cpp and Ollama instead (--out, default <name>-<format>.gguf in the working directory):
the weights are quantized in the groups GGUF's types hold (32; the 8-bit tables too) and
written as Q8_0, Q4_1, Q1_0 or TQ2_0 with the values lowbit validated.`,
		Example: `  lowbit convert demo --bits 4                 # the built-in model, to demo-q4 in the store
  lowbit convert --list-models
  lowbit convert tinyllama --bits 4            # to tinyllama-q4 in the store
  lowbit convert ./TinyLlama-1.1B-Chat-v1.0 --bits 4 --out ./tinyllama-q4
  lowbit convert tinyllama --bits q4k          # GGUF's Q4_K layout, to tinyllama-q4k
  lowbit convert tinyllama --bits 3.5 --calib my-text.txt   # a mix of formats, 3.5 bits per weight
  lowbit convert bitnet-2b --bits ternary
  lowbit convert demo --bits 4 --format gguf   # one file for llama.cpp and Ollama: ./demo-q4.gguf`,
		Args: func(cmd *cobra.Command, args []string) error {
			if listModels {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if listModels {
				return listRegistry(cmd, asJSON)
			}
			switch format {
			case "safetensors":
			case "npz":
				opts.NPZ = true
			case "gguf":
				opts.GGUF = true
			default:
				return fmt.Errorf("--format %q: want safetensors, npz or gguf", format)
			}
			models, err := store.FromEnv()
			if err != nil && opts.Out == "" && !opts.GGUF {
				return err
			}
			opts.Store = models
			opts.Source = args[0]
			opts.Progress = progressWriter(quiet || asJSON)
			opts.Version = version
			opts.Workers = workers
			fetcher, err := newFetcher(offline, workers, opts.Progress, noticeWriter(cmd, quiet))
			if err != nil {
				return err
			}
			opts.Fetcher = fetcher
			res, err := convert.Run(cmd.Context(), opts)
			failed := errors.Is(err, convert.ErrValidation)
			if err != nil && !failed {
				return err
			}
			if asJSON {
				if err := printJSON(out, res); err != nil {
					return err
				}
			} else if res.GGUF != nil {
				if err := printGGUFResult(out, res.GGUF); err != nil {
					return err
				}
				s := res.Summary
				fmt.Fprintf(out, "quantized %s -> %.2f bits/weight, mean rel. error %.4f (max %.4f in %s)\n",
					humanBytes(s.SourceBytes), s.BitsPerWeight, s.MeanRelL2Error, s.MaxRelL2Error, s.MaxErrorTensor)
				for _, n := range res.Notes {
					fmt.Fprintf(out, "note: %s\n", n)
				}
				if res.Validation != nil {
					if err := res.Validation.WriteText(out); err != nil {
						return err
					}
				}
			} else {
				s := res.Summary
				fmt.Fprintf(out, "wrote %s: %d tensors, %s -> %s (%.2f bits/weight), mean rel. error %.4f (max %.4f in %s), %.1fs\n",
					res.OutDir, res.Tensors, humanBytes(s.SourceBytes), humanBytes(s.OutputBytes), s.BitsPerWeight,
					s.MeanRelL2Error, s.MaxRelL2Error, s.MaxErrorTensor, res.Seconds)
				for _, n := range res.Notes {
					fmt.Fprintf(out, "note: %s\n", n)
				}
				if res.Validation != nil {
					if err := res.Validation.WriteText(out); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(out, "not validated (--no-validate): the manifest says so; check it with lowbit validate")
				}
			}
			if failed {
				return exitError{code: 1, msg: err.Error() + "; the model is kept: rerun with more --bits, or use it knowing the cost"}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&listModels, "list-models", false, "list the built-in model registry")
	f.StringVar(&opts.Bits, "bits", "", "format of linear weights: 1, 2, 4, 8, ternary (also tq2), GGUF's block formats q5_0, q5_1, q2k, q3k, q4k, q5k, q6k (rows not whole blocks fall back, noted), lowbit's super-block formats q2s, q3s, q4s (2.5, 3.5, 4.5 bits, rows of any length), or f16, bf16, f32 to keep floats (default 4; ternary for BitNet); or bits per weight such as 3.5 for a mix of formats chosen by calibration")
	f.IntVar(&opts.GroupSize, "group-size", 0, "weights per scale group (default: the format's, 32; block formats have none)")
	f.IntVar(&opts.TableGroupSize, "table-group-size", 0, "weights per scale group of the embeddings and head (default 128 at 8 bits, else --group-size)")
	f.StringVar(&opts.EmbeddingBits, "embedding-bits", "8", "format of token embeddings: 8, 4, ... or f16, bf16, f32 to keep floats")
	f.StringVar(&opts.OutputBits, "output-bits", "8", "format of the output head: 8, 4, ... or f16, bf16, f32")
	f.StringVarP(&opts.Out, "out", "o", "", "output directory (default: <alias or repo name>-<format> in $LOWBIT_HOME/models, e.g. demo-q4); with --format gguf the .gguf file (default ./<name>-<format>.gguf)")
	f.StringVar(&opts.Revision, "revision", "", "Hub revision: branch, tag or commit (default main)")
	f.BoolVar(&opts.Force, "force", false, "replace an existing output directory")
	f.BoolVar(&opts.NoValidate, "no-validate", false, "skip the last stage (kernel checks and the model against its source)")
	f.BoolVar(&opts.NoSearch, "no-search", false, "plain min/max scales instead of the error-minimizing clipping search")
	f.StringVar(&opts.Calib, "calib", "", "calibration text file: the float model runs over it and the search weighs each input's error by its activations (default: a built-in text)")
	f.BoolVar(&opts.NoCalib, "no-calib", false, "no calibration: the search weighs every input alike")
	f.BoolVar(&opts.GPTQ, "gptq", false, "also compensate each weight's rounding error on the rest of its row (GPTQ), from the calibration: slower, for models of up to a few hundred million weights")
	f.IntVar(&opts.CalibTokens, "calib-tokens", 0, "most tokens of the calibration text to run (default: 128 to 4096 by model size, fewer for larger models)")
	f.BoolVar(&opts.AllowNonFinite, "allow-nonfinite", false, "convert weights holding NaN or Inf (they become 0) instead of failing")
	f.StringVar(&format, "format", "safetensors", "output format: safetensors, npz (also writes model.npz for numpy tools), or gguf (one .gguf file for llama.cpp)")
	f.IntVar(&workers, "workers", 0, "parallel workers (default: all cores)")
	f.BoolVar(&offline, "offline", false, "use the HF cache only (also HF_HUB_OFFLINE=1)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	return cmd
}

// listRegistry prints the built-in models with their size at each --bits.
func listRegistry(cmd *cobra.Command, asJSON bool) error {
	type row struct {
		convert.Entry
		Parameters int64            `json:"parameters"`
		Sizes      map[string]int64 `json:"approx_bytes"`
	}
	bitsList := []string{"1", "2", "4", "8", "ternary"}
	var rows []row
	for _, e := range convert.Registry() {
		r := row{Entry: e, Parameters: e.TotalParams(), Sizes: map[string]int64{}}
		for _, b := range bitsList {
			n, err := e.EstimateBytes(b)
			if err != nil {
				return err
			}
			r.Sizes[b] = n
		}
		rows = append(rows, r)
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), rows)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ALIAS\tREPO\tPARAMS\tARCHITECTURE\tGATED\t1-BIT\t2-BIT\t4-BIT\t8-BIT\tTERNARY")
	for _, r := range rows {
		gated := "no"
		if r.Gated {
			gated = "yes"
		}
		repo := r.Repo
		if r.Embedded {
			repo = "(built into lowbit)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", r.Alias, repo, humanCount(r.Parameters), r.Architecture, gated)
		for _, b := range bitsList {
			fmt.Fprintf(tw, "\t%s", humanBytes(r.Sizes[b]))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "sizes are approximate: linear weights at --bits, embeddings and head at 8-bit, norms F32; any other Hub repo id works too")
	return nil
}
