package validate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"lowbit/gguf"
	"lowbit/hub"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
)

// DirOptions tune ModelDir.
type DirOptions struct {
	// Reference is the float original (empty: FindReference).
	Reference string
	// CacheDir is the HF cache searched for the reference.
	CacheDir string
	// Text, MaxTokens and Backend are as in ModelOptions.
	Text      string
	MaxTokens int
	Backend   func() (model.Backend, error)
	// Adjust, when set, changes the format's default thresholds (flags).
	Adjust func(*Thresholds)
	// KVCache is the quantized model's cache type (ModelOptions.KVCache).
	KVCache model.KVType
	// KVCaches are the cache types whose own cost is measured too
	// (CompareKVCaches).
	KVCaches []model.KVType
}

// ModelDir checks a converted lowbit model directory against its float
// original and returns the report and the reference directory used. A
// BitNet model converted to tq2 is measured against its original's
// ternarized weights (TernarizeLinears), with TernaryThresholds.
func ModelDir(ctx context.Context, dir string, o DirOptions) (*ModelReport, string, error) {
	man, err := manifest.Read(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("validate: %s has no %s: not a lowbit model (convert it first)", dir, manifest.FileName)
	}
	if err != nil {
		return nil, "", fmt.Errorf("validate: %w", err)
	}
	ref, err := resolveReference(o)
	if err != nil {
		return nil, "", err
	}
	if ref == "" {
		if ref, err = FindReference(dir, o.CacheDir); err != nil {
			return nil, "", err
		}
	}
	quant, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return nil, "", err
	}
	rep, err := compareWith(ctx, quant, dir, ref, man.Quantization.Format, o)
	return rep, ref, err
}

// ModelGGUF checks a GGUF file, lowbit's export or any other llama.cpp
// reads and lowbit runs, against the float original exactly as ModelDir
// checks a lowbit model: the reference is DirOptions.Reference, else the
// source a lowbit export names (lowbit.source.*, through the HF cache);
// the thresholds are those of lowbit.quantization.format, else of the
// format most of the file's linear weights are read as (Q8_0 as q8, Q4_0
// and Q4_1 as q4, ...).
func ModelGGUF(ctx context.Context, path string, o DirOptions) (*ModelReport, string, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("validate: %w", err)
	}
	prov, ok, err := manifest.ReadProvenance(f)
	f.Close()
	if err != nil {
		return nil, "", fmt.Errorf("validate: %s: %w", path, err)
	}
	ref, err := resolveReference(o)
	if err != nil {
		return nil, "", err
	}
	if ref == "" {
		if !ok || prov.Source.RepoID == "" {
			return nil, "", fmt.Errorf("validate: %s names no source lowbit can find: give --reference (a HuggingFace directory or repo id in the HF cache)", path)
		}
		rev := prov.Source.Commit
		if rev == "" {
			rev = prov.Source.Revision
		}
		snap, err := hub.CachedSnapshot(o.CacheDir, prov.Source.RepoID, rev, nil)
		if err != nil {
			return nil, "", fmt.Errorf("validate: the reference %s is not in the HF cache (lowbit download %s, or give --reference): %w", prov.Source.RepoID, prov.Source.RepoID, err)
		}
		ref = snap.Dir
	}
	quant, err := model.Load(ctx, path, model.LoadOptions{})
	if err != nil {
		return nil, "", err
	}
	format := ""
	if ok {
		format = prov.Quantization.Format
	} else {
		format = string(linearFormat(quant))
	}
	rep, err := compareWith(ctx, quant, path, ref, format, o)
	return rep, ref, err
}

// resolveReference is DirOptions.Reference as a directory: a path, or a
// Hub repo id (org/name) found in the HF cache, never downloaded; "" when
// none is given.
func resolveReference(o DirOptions) (string, error) {
	ref := o.Reference
	if ref == "" {
		return "", nil
	}
	if _, err := os.Stat(ref); err == nil || !strings.Contains(ref, "/") || filepath.IsAbs(ref) || strings.HasPrefix(ref, ".") {
		return ref, nil
	}
	repo, rev, _ := strings.Cut(ref, "@")
	snap, err := hub.CachedSnapshot(o.CacheDir, repo, rev, nil)
	if err != nil {
		return "", fmt.Errorf("validate: --reference %s is neither a directory nor a repo in the HF cache (lowbit download %s): %w", ref, repo, err)
	}
	return snap.Dir, nil
}

// linearFormat is the format most linear weights of m are stored in.
func linearFormat(m *model.Model) quantize.Format {
	count := map[quantize.Format]int{}
	best := quantize.F32
	for name, w := range m.Weights {
		if m.Config.TensorRole(name) != model.RoleLinear {
			continue
		}
		f := w.Format()
		count[f]++
		if count[f] > count[best] {
			best = f
		}
	}
	return best
}

// compareWith loads the reference and the quantized model's tokenizer (from
// src, the model's directory or file) and compares the two under the
// thresholds of format.
func compareWith(ctx context.Context, quant *model.Model, src, ref, format string, o DirOptions) (*ModelReport, error) {
	refModel, err := model.Load(ctx, ref, model.LoadOptions{})
	if err != nil {
		return nil, fmt.Errorf("validate: reference: %w", err)
	}
	if quant.Config.Arch != refModel.Config.Arch && quant.Config.GGUFArch() == refModel.Config.GGUFArch() {
		// A GGUF file names Mistral llama: the same computation.
		quant.Config.Arch = refModel.Config.Arch
	}
	tok, err := tokenizer.Load(src)
	if err != nil {
		return nil, err
	}
	th, refWeights := formatThresholds(format), ""
	if isTernaryPair(quant, format) {
		if err := TernarizeLinears(ctx, refModel); err != nil {
			return nil, err
		}
		th, refWeights = TernaryThresholds(), ReferenceTernary
	}
	if o.Adjust != nil {
		o.Adjust(&th)
	}
	opts := ModelOptions{Text: o.Text, MaxTokens: o.MaxTokens, Thresholds: th, Backend: o.Backend, KVCache: o.KVCache}
	rep, err := CompareModels(ctx, quant, refModel, tok, opts)
	if err != nil {
		return nil, err
	}
	if rep.KVCaches, err = CompareKVCaches(ctx, refModel, tok, o.KVCaches, opts); err != nil {
		return nil, err
	}
	if rep.Chat, err = compareChat(ctx, quant, refModel, src, tok, opts); err != nil {
		return nil, err
	}
	rep.Format, rep.ReferenceWeights = format, refWeights
	return rep, nil
}

// DefaultChat is the conversation a model's chat template renders for
// validation: a system message and two turns.
var DefaultChat = []tokenizer.Message{
	{Role: "system", Content: "You are a friendly storyteller who answers briefly."},
	{Role: "user", Content: "Tell me about a girl who finds a boat by the river."},
	{Role: "assistant", Content: "Lily found a little red boat tied to an old post. She waited for its owner, an old man with a grey beard, who promised to sail her across."},
	{Role: "user", Content: "What did she see on the other side?"},
	{Role: "assistant", Content: "A meadow full of flowers, and a path that led to a small house where a cat was sleeping in the sun."},
}

// compareChat compares quant and ref over DefaultChat as src's chat
// template renders it (nil where the model has none, or its template
// takes no system message: then without it).
func compareChat(ctx context.Context, quant, ref *model.Model, src string, tok tokenizer.Tokenizer, opts ModelOptions) (*ModelReport, error) {
	tpl, err := tokenizer.LoadChatTemplate(src)
	if err != nil || tpl == nil {
		return nil, err
	}
	text, err := tpl.Render(DefaultChat, false)
	if err != nil {
		if text, err = tpl.Render(DefaultChat[1:], false); err != nil {
			return nil, fmt.Errorf("validate: the chat template: %w", err)
		}
	}
	ids, err := tokenizer.EncodeRendered(tok, text)
	if err != nil {
		return nil, fmt.Errorf("validate: the rendered chat: %w", err)
	}
	opts.IDs = ids
	rep, err := CompareModels(ctx, quant, ref, tok, opts)
	if err != nil {
		return nil, fmt.Errorf("validate: chat: %w", err)
	}
	rep.Format, rep.KLD, rep.LayerRelErr = "chat", nil, nil
	return rep, nil
}

// ManifestThresholds are the default pass marks of a converted model: its
// linear format's, and for a mix of formats those of the format of most
// bits per weight at or below the mix's target (a mix at 4.6 bits is held
// to 4-bit marks, one at 3.5 to 2-bit marks).
func ManifestThresholds(man *manifest.Manifest) Thresholds {
	if q := man.Quantization; q.TargetBits > 0 {
		return mixThresholds(q.TargetBits)
	}
	return DefaultThresholds(man.Quantization.Format)
}

// formatThresholds are DefaultThresholds, or for a mix's name
// (mix<target>, as a manifest or a GGUF file's provenance records it)
// mixThresholds.
func formatThresholds(format string) Thresholds {
	if t, ok := strings.CutPrefix(format, "mix"); ok {
		if bits, err := strconv.ParseFloat(t, 64); err == nil && bits > 0 {
			return mixThresholds(bits)
		}
	}
	return DefaultThresholds(format)
}

// mixThresholds are the marks of the quantized format of most bits per
// weight at or below target.
func mixThresholds(target float64) Thresholds {
	best := quantize.Format("")
	for _, f := range quantize.Formats() {
		s := f.Spec()
		if f.Quantized() && !s.Int8Activations && s.Bits <= target && (best == "" || s.Bits > best.Bits()) {
			best = f
		}
	}
	return DefaultThresholds(string(best))
}

// FormatCases keeps the cases of the given format, in any spelling
// quantize.ParseFormat reads (all when empty).
func FormatCases(format string) []Case {
	if f, err := quantize.ParseFormat(format); err == nil {
		format = string(f)
	}
	var out []Case
	for _, c := range Cases() {
		if format == "" || string(c.Format) == format {
			out = append(out, c)
		}
	}
	return out
}

// RealWeights takes up to maxRows rows of a few linear weights of a float
// model directory (the first layer's attention and MLP projections), as
// kernel inputs with the value distributions of a trained model.
func RealWeights(ctx context.Context, dir string, maxRows int) ([]RealWeight, error) {
	if _, err := os.Stat(filepath.Join(dir, manifest.FileName)); err == nil {
		return nil, fmt.Errorf("validate: --model %s is a quantized lowbit model; give its float original", dir)
	}
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return nil, err
	}
	var names []string
	for name, w := range m.Weights {
		if w.F32 != nil && w.Rows > 1 && strings.Contains(name, "layers.0.") && strings.HasSuffix(name, "proj.weight") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("validate: %s has no float projection weights in its first layer", dir)
	}
	var out []RealWeight
	for _, name := range names {
		w := m.Weights[name]
		rows := min(w.Rows, maxRows)
		out = append(out, RealWeight{Name: name, Rows: rows, Cols: w.Cols, W: w.F32[:rows*w.Cols]})
	}
	return out, nil
}
