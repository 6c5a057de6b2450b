package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"lowbit/convert"
	"lowbit/gguf"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/store"
)

// showJSON is what lowbit show --json prints.
type showJSON struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Converted is false for a HuggingFace model directory (no manifest).
	Converted bool         `json:"converted"`
	Config    model.Config `json:"config"`
	Formats   *formatsJSON `json:"formats,omitempty"`
	// SizeOnDisk is the bytes of the directory's files.
	SizeOnDisk int64                `json:"size_on_disk,omitempty"`
	Summary    *manifest.Summary    `json:"summary,omitempty"`
	Validation *manifest.Validation `json:"validation,omitempty"`
	// Calibration is what the search was weighted by (absent: nothing).
	Calibration *manifest.Calibration `json:"calibration,omitempty"`
	Source      *sourceJSON           `json:"source,omitempty"`
}

// formatsJSON are the storage formats of a converted model's weights.
type formatsJSON struct {
	Linear      string `json:"linear"`
	LinearGroup int    `json:"linear_group_size,omitempty"`
	// LinearFallback counts the linear weights stored in another format
	// than Linear (a block format's fallback), by that format.
	LinearFallback map[string]int `json:"linear_fallback,omitempty"`
	Embedding      string         `json:"embedding"`
	EmbeddingGroup int            `json:"embedding_group_size,omitempty"`
	// Head is empty when the head is tied to the embeddings.
	Head      string `json:"head,omitempty"`
	HeadGroup int    `json:"head_group_size,omitempty"`
	HeadTied  bool   `json:"head_tied,omitempty"`
	// Mix counts the linear weights of each format and group of a mix.
	Mix map[string]int `json:"linear_mix,omitempty"`
}

// sourceJSON is where a converted model came from.
type sourceJSON struct {
	Label    string `json:"label"`
	RepoID   string `json:"repo_id,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"`
	Dir      string `json:"dir,omitempty"`
}

func newShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show <model>",
		Short: "Describe a model: architecture, formats, sizes, errors, validation and source",
		Long: `show prints what a model is: its architecture (layers, hidden size, heads, vocabulary,
context), and for a converted model the formats of its linear weights, embeddings and head,
its size and bits per weight, the quantization error, what validation found (status, KL
divergence, top-1 agreement, perplexity ratio, what was not checked) and its source.`,
		Example: `  lowbit show demo-q4
  lowbit show demo-q4 --json
  lowbit show model.gguf                      # a GGUF file: architecture, tensor types, tokenizer, lowbit's provenance`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := resolveModelDir(cmd.Context(), args[0], "", true, nil, nil)
			if err != nil {
				return err
			}
			if gguf.IsFile(dir) {
				d, err := convert.DescribeGGUF(dir)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), d)
				}
				return printGGUF(cmd.OutOrStdout(), d)
			}
			models, _ := store.FromEnv() // only labels the demo source
			res, err := describeModel(args[0], dir, models)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			return printShow(cmd.OutOrStdout(), res)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the description as JSON")
	return cmd
}

// describeModel reads a converted model's manifest, or an HF directory's config.json.
func describeModel(name, dir string, models store.Store) (showJSON, error) {
	res := showJSON{Name: name, Path: dir}
	if abs, err := filepath.Abs(dir); err == nil {
		res.Path = abs
	}
	m, err := manifest.Read(dir)
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, manifest.FileName)); !errors.Is(statErr, os.ErrNotExist) {
			return res, err
		}
		cfgPath := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			return res, fmt.Errorf("%s is neither a lowbit model (no %s) nor a HuggingFace model: %w", dir, manifest.FileName, err)
		}
		if res.Config, err = model.ParseHFConfig(b); err != nil {
			return res, fmt.Errorf("%s: %w", cfgPath, err)
		}
		return res, nil
	}
	res.Converted = true
	if res.SizeOnDisk, err = store.DirSize(dir); err != nil {
		return res, err
	}
	if res.Config, err = model.ParseConfig(m.Architecture); err != nil {
		return res, fmt.Errorf("%s: architecture: %w", filepath.Join(dir, manifest.FileName), err)
	}
	q := m.Quantization
	f := &formatsJSON{Linear: q.Format, LinearGroup: q.GroupSize, Embedding: q.EmbeddingFormat, Head: q.OutputFormat}
	f.HeadTied = res.Config.TieEmbeddings
	for _, t := range m.Tensors {
		switch res.Config.TensorRole(t.Name) {
		case model.RoleEmbedding:
			f.Embedding, f.EmbeddingGroup = t.Format, t.GroupSize
		case model.RoleOutput:
			f.Head, f.HeadGroup, f.HeadTied = t.Format, t.GroupSize, false
		case model.RoleLinear:
			if t.FallbackFrom != "" {
				if f.LinearFallback == nil {
					f.LinearFallback = map[string]int{}
				}
				f.LinearFallback[t.Format]++
			}
			if q.TargetBits > 0 {
				if f.Mix == nil {
					f.Mix = map[string]int{}
				}
				f.Mix[formatGroup(t.Format, t.GroupSize)]++
			}
		}
	}
	if f.HeadTied {
		f.Head = ""
	}
	res.Formats, res.Summary, res.Validation, res.Calibration = f, &m.Summary, m.Validation, q.Calibration
	src := m.Source
	res.Source = &sourceJSON{Label: sourceLabel(src, models), RepoID: src.RepoID, Revision: src.Revision, Commit: src.Commit, Dir: src.Dir}
	return res, nil
}

func printShow(w io.Writer, r showJSON) error {
	c := r.Config
	lines := [][2]string{
		{"name", r.Name},
		{"path", r.Path},
		{"architecture", fmt.Sprintf("%s (%s): %d layers, hidden %d, intermediate %d, %d heads (%d KV, head dim %d), vocab %d, context %d",
			c.Arch, c.HFArchitecture, c.NumLayers, c.HiddenSize, c.IntermediateSize, c.NumHeads, c.NumKVHeads, c.HeadDim, c.VocabSize, c.MaxPositions)},
	}
	if !r.Converted {
		lines = append(lines, [2]string{"formats", "not converted: a HuggingFace model directory (lowbit convert " + r.Name + " --bits 4)"})
		return writeFields(w, lines)
	}
	f, s := r.Formats, r.Summary
	head := "tied to the embeddings"
	if !f.HeadTied {
		head = formatGroup(f.Head, f.HeadGroup)
	}
	linear := formatGroup(f.Linear, f.LinearGroup)
	for _, fb := range slices.Sorted(maps.Keys(f.LinearFallback)) {
		linear += fmt.Sprintf(" (%d as %s: rows not whole blocks)", f.LinearFallback[fb], fb)
	}
	if len(f.Mix) > 0 {
		names := make([]string, 0, len(f.Mix))
		for n := range f.Mix {
			names = append(names, n)
		}
		slices.Sort(names)
		for i, n := range names {
			names[i] = fmt.Sprintf("%s x%d", n, f.Mix[n])
		}
		linear += " (" + strings.Join(names, ", ") + ")"
	}
	calibration := "none: every input weighed alike"
	if c := r.Calibration; c != nil {
		calibration = fmt.Sprintf("%s, %d tokens of %s (sha256 %.12s)", c, c.Tokens, c.Source, c.SHA256)
	}
	lines = append(lines,
		[2]string{"formats", fmt.Sprintf("linear %s, embeddings %s, head %s", linear, formatGroup(f.Embedding, f.EmbeddingGroup), head)},
		[2]string{"calibration", calibration},
		[2]string{"parameters", fmt.Sprintf("%d (%s)", s.Parameters, humanCount(s.Parameters))},
		[2]string{"size", fmt.Sprintf("%s on disk (source %s), %.2f bits/weight", humanBytes(r.SizeOnDisk), humanBytes(s.SourceBytes), s.BitsPerWeight)},
		[2]string{"error", fmt.Sprintf("relative L2 mean %.4f, max %.4f (%s)", s.MeanRelL2Error, s.MaxRelL2Error, s.MaxErrorTensor)},
		[2]string{"validation", validationLine(r.Validation)},
	)
	if v := r.Validation; v != nil && len(v.NotChecked) > 0 {
		lines = append(lines, [2]string{"not checked", strings.Join(v.NotChecked, "; ")})
	}
	src := r.Source
	lines = append(lines, [2]string{"source", src.Label})
	if src.Commit != "" {
		lines = append(lines, [2]string{"commit", src.Commit + " (" + src.Revision + ")"})
	}
	if src.Dir != "" && src.Dir != src.Label {
		lines = append(lines, [2]string{"source dir", src.Dir})
	}
	return writeFields(w, lines)
}

// printGGUF describes a GGUF file: its architecture as lowbit reads it,
// its tensors' types, its tokenizer, and what a lowbit export records.
func printGGUF(w io.Writer, d *convert.GGUFDescription) error {
	arch := d.Arch + " (lowbit cannot run it: " + d.ConfigError + ")"
	if c := d.Config; c != nil {
		arch = fmt.Sprintf("%s: %d layers, hidden %d, intermediate %d, %d heads (%d KV, head dim %d), vocab %d, context %d",
			d.Arch, c.NumLayers, c.HiddenSize, c.IntermediateSize, c.NumHeads, c.NumKVHeads, c.HeadDim, c.VocabSize, c.MaxPositions)
	}
	var types []string
	for t, n := range d.Types {
		types = append(types, fmt.Sprintf("%d %s", n, t))
	}
	slices.Sort(types)
	tok := "none"
	if d.Tokenizer != "" {
		tok = fmt.Sprintf("%s, %d tokens", d.Tokenizer, d.Tokens)
		if d.ChatTemplate {
			tok += ", chat template"
		}
	}
	lines := [][2]string{
		{"name", d.Name},
		{"path", d.Path},
		{"format", fmt.Sprintf("GGUF v%d, %d metadata keys", d.Version, d.Keys)},
		{"architecture", arch},
		{"tensors", fmt.Sprintf("%d: %s", d.Tensors, strings.Join(types, ", "))},
		{"parameters", fmt.Sprintf("%d (%s)", d.Parameters, humanCount(d.Parameters))},
		{"size", fmt.Sprintf("%s, %.2f bits/weight", humanBytes(d.Size), d.BitsPerWeight)},
		{"tokenizer", tok},
	}
	if p := d.Lowbit; p != nil {
		q := p.Quantization
		lines = append(lines,
			[2]string{"exported by", "lowbit " + p.LowbitVersion},
			[2]string{"quantized", fmt.Sprintf("linear %s, embeddings %s, head %s", formatGroup(q.Format, q.GroupSize), q.EmbeddingFormat, q.OutputFormat)},
			[2]string{"validation", validationLine(p.Validation)},
		)
		if len(p.Requantized) > 0 {
			lines = append(lines, [2]string{"requantized", strings.Join(p.Requantized, ", ") + " (validation above is the lowbit model's)"})
		}
		if src := p.Source; src.RepoID != "" {
			lines = append(lines, [2]string{"source", strings.TrimSuffix(src.RepoID+" "+src.Commit, " ")})
		}
	}
	return writeFields(w, lines)
}

// formatGroup is a format with its group size when it has one.
func formatGroup(format string, group int) string {
	if group > 0 {
		return fmt.Sprintf("%s (group %d)", format, group)
	}
	return format
}

// validationLine sums up a manifest's validation record.
func validationLine(v *manifest.Validation) string {
	if v == nil {
		return "- (converted before lowbit recorded it: lowbit validate checks it)"
	}
	var figs []string
	if v.KLDMean != nil {
		figs = append(figs, fmt.Sprintf("KLD mean %.4f", *v.KLDMean))
	}
	if v.Top1 != nil {
		figs = append(figs, fmt.Sprintf("top-1 %.1f%%", 100**v.Top1))
	}
	if v.PPLRatio != nil {
		figs = append(figs, fmt.Sprintf("PPL ratio %.3f", *v.PPLRatio))
	}
	if len(figs) == 0 {
		return v.Status
	}
	return v.Status + ": " + strings.Join(figs, ", ")
}

// writeFields prints label-value lines in two aligned columns.
func writeFields(w io.Writer, lines [][2]string) error {
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%-*s  %s\n", width, l[0], l[1]); err != nil {
			return err
		}
	}
	return nil
}
