package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"lowbit/convert"
	"lowbit/hub"
)

func newExportCmd() *cobra.Command {
	var (
		opts      convert.GGUFOptions
		format    string
		asJSON    bool
		quiet     bool
		reference string
	)
	cmd := &cobra.Command{
		Use:   "export <lowbit-model> --format gguf [--out file.gguf]",
		Short: "Write a converted model as a GGUF file for llama.cpp and Ollama",
		Long: `export writes a lowbit model directory (a path or a model of the store) as one GGUF v3
file that llama.cpp, Ollama and LM Studio load: q8 as Q8_0 and q4 as Q4_1 (groups of 32), q1 as
Q1_0 (groups of 128), tq2 as TQ2_0, floats as themselves, repacked with the same values; the
architecture's and the tokenizer's metadata as llama.cpp's converter writes them, and lowbit's
provenance and validation under lowbit.* keys. A tensor no GGUF type holds exactly (groups of
another size, such as the 128 of lowbit's 8-bit tables) is refused with the closest type named;
--requantize writes it in that type and validates the file again against the float original.
Without --out the file is <model>.gguf in the working directory.`,
		Example: `  lowbit export demo-q4 --format gguf --out stories-q4.gguf
  lowbit export ./tinyllama-q8 --format gguf --requantize`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "gguf" {
				return fmt.Errorf("--format %q: want gguf", format)
			}
			dir, err := resolveModelDir(cmd.Context(), args[0], "", true, nil, noticeWriter(cmd, quiet))
			if err != nil {
				return err
			}
			if opts.Out == "" {
				opts.Out = filepath.Base(filepath.Clean(dir)) + ".gguf"
			}
			opts.Progress = progressWriter(quiet || asJSON)
			opts.Version = version
			opts.Reference, opts.CacheDir = reference, hub.OptionsFromEnv().CacheDir
			res, err := convert.ExportGGUF(cmd.Context(), dir, opts)
			failed := errors.Is(err, convert.ErrValidation)
			if err != nil && !failed {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, res); err != nil {
					return err
				}
			} else if err := printGGUFResult(out, res); err != nil {
				return err
			}
			if failed {
				return exitError{code: 1, msg: err.Error() + "; the file is kept"}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "gguf", "output format (gguf)")
	f.StringVarP(&opts.Out, "out", "o", "", "the .gguf file to write (default: <model>.gguf in the working directory)")
	f.BoolVar(&opts.Force, "force", false, "replace an existing file")
	f.BoolVar(&opts.Requantize, "requantize", false, "write tensors no GGUF type holds exactly in the closest type, then validate the file again")
	f.StringVar(&reference, "reference", "", "the float original a requantized file is validated against (default: the model's source)")
	f.BoolVar(&opts.NoValidate, "no-validate", false, "do not validate a requantized file")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	return cmd
}

// printGGUFResult says what an export wrote.
func printGGUFResult(w io.Writer, r *convert.GGUFResult) error {
	var types []string
	for t, n := range r.Types {
		types = append(types, fmt.Sprintf("%d %s", n, t))
	}
	slices.Sort(types)
	fmt.Fprintf(w, "wrote %s: %s, %d tensors (%s), %s, %.1fs\n", r.Path, r.Arch, r.Tensors, strings.Join(types, ", "), humanBytes(r.Bytes), r.Seconds)
	if len(r.Requantized) > 0 {
		fmt.Fprintf(w, "requantized: %s\n", strings.Join(r.Requantized, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if r.Validation != nil {
		return r.Validation.WriteText(w)
	}
	return nil
}
