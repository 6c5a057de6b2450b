package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"lowbit/calib"
	"lowbit/internal/atomicfile"
	"lowbit/internal/safefile"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
	"lowbit/store"
	"lowbit/validate"
)

// Options are the settings of one conversion.
type Options struct {
	// Source is a local HF model directory, a registry alias or a Hub repo id.
	Source   string
	Revision string
	// Out is the output directory; empty means <name>-<format> in Store's
	// models directory, where name is the alias the source was given by,
	// else the repo's or the directory's base name (demo-q4, tinyllama-q4).
	Out string
	// Store holds converted models by default and extracts the embedded demo.
	Store store.Store
	// Bits is the format of linear weights: 1, 2, 4, 8 or ternary (also
	// q1...q8, tq2, GGUF's block formats q5_0, q5_1, q2k ... q6k, f16, bf16,
	// f32), or a number of bits per linear weight that is no format's
	// (3.5): a mix of formats chosen by calibration. A tensor whose rows
	// are not whole blocks of a block format takes its Spec.Fallback,
	// recorded in the manifest and in the notes.
	Bits      string
	GroupSize int
	// TableGroupSize is the group of the token embeddings and the output
	// head when quantized (0: 128 at 8 bits, quantize.Format.TableGroupSize;
	// at fewer bits GroupSize's).
	TableGroupSize int
	// EmbeddingBits and OutputBits are the formats of the token embeddings and
	// the output head (default 8; "f16", "bf16" or "f32" keep them as floats).
	EmbeddingBits string
	OutputBits    string
	// NoSearch turns the clipping and scale search off (plain min/max).
	NoSearch bool
	// Calib is the calibration text: the float model runs over it and the
	// search weighs each input column's error by its mean square input
	// ("": the built-in text, calib.DefaultText).
	Calib string
	// NoCalib skips calibration: the search weighs every column alike.
	NoCalib bool
	// CalibTokens caps the calibration's tokens (0: calib.DefaultTokens, by the model's size).
	CalibTokens int
	// GPTQ also compensates each column's quantization error on the later
	// columns (quantize.Options.Compensate), from the calibration's
	// Hessians: slower, and only for models whose Hessians fit in memory.
	GPTQ           bool
	Force          bool
	AllowNonFinite bool
	// NPZ also writes the stored tensors as model.npz for numpy tools.
	NPZ bool
	// GGUF makes the output a GGUF file (Out, default <name>-<format>.gguf
	// in the working directory) instead of a lowbit directory: runGGUF.
	GGUF    bool
	Workers int
	// Fetcher downloads a repo when Source is not a local directory (nil: the source must be local).
	Fetcher Fetcher
	// Progress receives progress bars (nil: none).
	Progress io.Writer
	// NoValidate skips the last stage (kernel and model checks).
	NoValidate bool
	// Version is lowbit's version, recorded in the manifest.
	Version string

	// forGGUF is set by runGGUF: the model is made to be exported (the
	// architecture is checked first, tq2's scale rounded to an f16).
	forGGUF bool
}

// Fetcher turns a repo id into a local snapshot directory; the hub client
// implements it, and tests substitute their own.
type Fetcher interface {
	Fetch(ctx context.Context, repoID, revision string) (*Snapshot, error)
}

// Snapshot is a downloaded (or cached) model: where it is and which commit.
type Snapshot struct {
	Dir, RepoID, Revision, Commit string
	// Alias is the registry alias the model was asked for by ("" if none).
	Alias string
}

// Result summarizes a finished conversion.
type Result struct {
	// OutDir is the output directory, or the .gguf file with Options.GGUF.
	OutDir   string             `json:"out_dir"`
	Source   manifest.Source    `json:"source"`
	Summary  manifest.Summary   `json:"summary"`
	Format   string             `json:"format"`
	Tensors  int                `json:"tensors"`
	Seconds  float64            `json:"seconds"`
	Manifest *manifest.Manifest `json:"-"`
	// Validation is the last stage's report (nil with NoValidate).
	Validation *validate.Report `json:"validation,omitempty"`
	// Notes says what the conversion left out of the source, or stored in
	// another format than asked (a fallback), and why.
	Notes []string `json:"notes,omitempty"`
	// GGUF describes the GGUF file written with Options.GGUF.
	GGUF *GGUFResult `json:"gguf,omitempty"`
}

// settings are Options resolved to formats.
type settings struct {
	linear, embedding, output quantize.Format
	// target, when set, mixes the linear weights' formats to this many
	// bits per weight on average (linear is then empty).
	target            float64
	groupSize         int
	tableGroupSize    int // 0: the table format's TableGroupSize or groupSize (tableGroup)
	search            bool
	allowNonFinite    bool
	workers           int
	bitnetLinearClass string // quantization_config.linear_class of a packed BitNet checkpoint
	f16TensorScale    bool   // round tq2's tensor scale to an f16 (GGUF's TQ2_0 holds it so)
	// calibrate runs the calibration pass over calibText (its name
	// calibSource), at most calibTokens tokens; stats is its result.
	calibrate              bool
	calibText, calibSource string
	calibTokens            int
	stats                  *calib.Stats
	// sens is the linear weights' sensitivity a mix measures (calib.MeasureSensitivity).
	sens *calib.Sensitivity
	// gptq compensates the linear weights' errors (Options.GPTQ).
	gptq bool
}

// name is what the linear weights are stored as: their format, or the mix's name.
func (s settings) name() string {
	if s.target > 0 {
		return calib.TargetName(s.target)
	}
	return string(s.linear)
}

// auxFiles are copied from the source directory when present.
var auxFiles = []string{
	"config.json", "generation_config.json", "tokenizer.model", "tokenizer.json",
	"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "added_tokens.json",
}

// Run converts a model. Everything is checked before anything is
// quantized: the checkpoint against config.json, the tokenizer, the output
// path. The model is written under a temporary name beside the output and
// moved into place whole, never replacing what it did not create (with
// Force, only a lowbit model directory). On any failure or cancellation it
// removes what it wrote.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.GGUF {
		return runGGUF(ctx, opts)
	}
	start := time.Now()
	snap, err := resolveSource(ctx, opts)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(snap.Dir, "config.json")
	cfgBytes, err := safefile.ReadFile(cfgPath, model.MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	cfg, err := model.ParseHFConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	s, err := resolveSettings(opts, cfg)
	if err != nil {
		return nil, err
	}
	if opts.forGGUF {
		if _, err := cfg.GGUF(); err != nil {
			return nil, fmt.Errorf("--format gguf: %s (%s): %w", snap.Dir, cfg.HFArchitecture, err)
		}
	}
	s.bitnetLinearClass = bitnetLinearClass(cfgBytes)
	set, err := safetensors.OpenDir(snap.Dir)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	plans, notes, err := planTensors(cfg, set, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", snap.Dir, err)
	}
	if err := checkTokenizer(snap.Dir, cfg); err != nil {
		return nil, err
	}
	out, err := outputPath(opts, snap, s)
	if err != nil {
		return nil, err
	}
	if err := checkOut(out, snap.Dir, opts.Force); err != nil {
		return nil, err
	}
	if why := noCalibration(s, plans); why != "" {
		if s.gptq {
			return nil, fmt.Errorf("--gptq: %s", why)
		}
		if s.calibrate && opts.Calib != "" {
			notes = append(notes, fmt.Sprintf("--calib %s not used: %s", opts.Calib, why))
		}
		s.calibrate = false
	}
	if s.calibrate {
		if s.stats, s.sens, err = calibrate(ctx, snap.Dir, plans, s, opts.Progress); err != nil {
			return nil, err
		}
	}
	if s.target > 0 {
		if err := planMix(ctx, set, plans, s, opts.Progress); err != nil {
			return nil, err
		}
	}
	dir, err := atomicfile.CreateDir(out)
	if err != nil {
		return nil, fmt.Errorf("create output: %w", err)
	}
	defer dir.Discard() // a no-op once in place
	tmp := dir.Path

	m := &manifest.Manifest{
		FormatVersion: manifest.FormatVersion,
		LowbitVersion: opts.Version,
		Quantization: manifest.Quantization{
			Format: s.name(), GroupSize: s.groupSize, EmbeddingFormat: string(s.embedding),
			OutputFormat: string(s.output), Search: s.search, AllowNonFinite: s.allowNonFinite,
			TargetBits: s.target, Calibration: calibrationRecord(s),
		},
	}
	if m.Architecture, err = json.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("encode architecture: %w", err)
	}
	if m.Source, err = sourceRecord(snap, set); err != nil {
		return nil, err
	}
	entries, err := writeTensors(ctx, set, plans, s, filepath.Join(tmp, weightsFile), opts.Progress)
	if err != nil {
		return nil, err
	}
	m.Tensors = entries
	if opts.NPZ {
		if err := writeNPZ(ctx, filepath.Join(tmp, weightsFile), filepath.Join(tmp, "model.npz")); err != nil {
			return nil, err
		}
	}
	for _, name := range auxFiles {
		if err := copyFile(filepath.Join(snap.Dir, name), filepath.Join(tmp, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("copy %s: %w", name, err)
		}
	}
	if m.Files, err = hashDir(tmp); err != nil {
		return nil, err
	}
	m.SortFiles()
	m.Summarize()
	m.Validation = &manifest.Validation{Status: manifest.NotValidated, NotChecked: []string{"conversion ran with --no-validate"}}
	if err := m.Write(tmp); err != nil {
		return nil, err
	}
	var report *validate.Report
	if !opts.NoValidate {
		if report, err = validateOutput(ctx, tmp, out, validationReference(snap.Dir, plans), linearFormats(plans), opts.Progress); err != nil {
			return nil, fmt.Errorf("validate: %w", err)
		}
		m.Validation = validationRecord(report)
		if err := m.Write(tmp); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := place(dir, out, snap.Dir, opts.Force); err != nil {
		return nil, err
	}
	res := &Result{
		OutDir: out, Source: m.Source, Summary: m.Summary, Format: s.name(),
		Tensors: len(m.Tensors), Seconds: time.Since(start).Seconds(), Manifest: m, Validation: report, Notes: notes,
	}
	if report != nil && report.Status != validate.Pass {
		return res, fmt.Errorf("%s: %w (report in %s)", out, ErrValidation, filepath.Join(out, validationFile))
	}
	return res, nil
}

// weightsFile is the name of the stored tensors inside a model directory.
const weightsFile = "model.safetensors"

// maxWorkers bounds --workers: each worker holds a chunk of rows.
const maxWorkers = 256

// maxGroupSize bounds --group-size and --table-group-size: a group is
// quantized in buffers of its size, and no model's rows are longer.
const maxGroupSize = 1 << 16

// maxCalibSize bounds the --calib file: calibration reads a few hundred
// tokens of it, so a larger file is a mistake (or /dev/zero) to refuse.
const maxCalibSize = 64 << 20

// maxTargetBits bounds a mix's --bits: no quantized format stores more.
const maxTargetBits = 16

func resolveSettings(opts Options, cfg model.Config) (settings, error) {
	bits := opts.Bits
	if bits == "" {
		bits = "4"
		if cfg.Arch == "bitnet" {
			bits = "ternary"
		}
	}
	var s settings
	var err error
	if t, ok := calib.ParseTarget(bits); ok {
		switch {
		case opts.NoCalib:
			return s, fmt.Errorf("--bits %s mixes formats by what calibration measures: drop --no-calib", bits)
		case opts.NoSearch:
			return s, fmt.Errorf("--bits %s mixes formats by the searched error: drop --no-search", bits)
		case opts.GroupSize != 0:
			return s, fmt.Errorf("--bits %s chooses each tensor's group: drop --group-size", bits)
		case t > maxTargetBits:
			return s, fmt.Errorf("--bits %s: a mix of more than %d bits per weight is no smaller than float", bits, maxTargetBits)
		}
		s.target = t
	} else if s.linear, err = quantize.ParseFormat(bits); err != nil {
		return s, fmt.Errorf("--bits: %w (or a number of bits per weight to mix formats to, such as 3.5)", err)
	}
	parse := func(flag, v string) (quantize.Format, error) {
		if v == "" {
			v = "8"
		}
		f, err := quantize.ParseFormat(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flag, err)
		}
		if f == quantize.TQ2 {
			return "", fmt.Errorf("%s: ternary is for linear weights only", flag)
		}
		return f, nil
	}
	if s.embedding, err = parse("--embedding-bits", opts.EmbeddingBits); err != nil {
		return s, err
	}
	if s.output, err = parse("--output-bits", opts.OutputBits); err != nil {
		return s, err
	}
	for _, g := range []struct {
		flag string
		n    int
	}{{"--group-size", opts.GroupSize}, {"--table-group-size", opts.TableGroupSize}} {
		if g.n < 0 {
			return s, fmt.Errorf("%s %d must be positive", g.flag, g.n)
		}
		if g.n > 0 && g.n%32 != 0 {
			return s, fmt.Errorf("%s %d must be a multiple of 32", g.flag, g.n)
		}
		if g.n > maxGroupSize {
			return s, fmt.Errorf("%s %d is over the limit of %d weights a group", g.flag, g.n, maxGroupSize)
		}
	}
	s.groupSize = opts.GroupSize
	s.tableGroupSize = opts.TableGroupSize
	if ls := s.linear.Spec(); ls.BlockScales {
		// The block is the group; tensors that fall back to another
		// format take that format's default group.
		if s.groupSize != 0 && s.groupSize != ls.Block {
			return s, fmt.Errorf("--group-size %d: %s has %d-weight blocks with scales of their own, no groups to set", s.groupSize, s.linear, ls.Block)
		}
		s.groupSize = 0
	} else if s.groupSize == 0 && s.linear.Quantized() {
		s.groupSize = s.linear.DefaultGroupSize()
	}
	s.search = !opts.NoSearch
	s.f16TensorScale = opts.forGGUF
	s.calibrate = !opts.NoCalib
	if s.calibrate {
		s.calibText, s.calibSource = calib.DefaultText, calib.DefaultSource
		if opts.Calib != "" {
			b, err := safefile.ReadFile(opts.Calib, maxCalibSize)
			if err != nil {
				return s, fmt.Errorf("--calib: %w", err)
			}
			if strings.TrimSpace(string(b)) == "" {
				return s, fmt.Errorf("--calib %s: the file holds no text", opts.Calib)
			}
			s.calibText, s.calibSource = string(b), opts.Calib
		}
	} else if opts.Calib != "" {
		return s, errors.New("--calib and --no-calib contradict each other")
	}
	if opts.CalibTokens < 0 {
		return s, fmt.Errorf("--calib-tokens %d must be positive", opts.CalibTokens)
	}
	s.calibTokens = opts.CalibTokens
	s.gptq = opts.GPTQ
	switch {
	case s.gptq && !s.calibrate:
		return s, errors.New("--gptq compensates by what calibration measures: drop --no-calib")
	case s.gptq && s.target == 0 && s.linear.Quantized() && !s.linear.Compensable():
		return s, fmt.Errorf("--gptq: %s does not support error compensation", s.linear)
	}
	s.allowNonFinite = opts.AllowNonFinite
	s.workers = opts.Workers
	if s.workers <= 0 {
		s.workers = runtime.GOMAXPROCS(0)
	}
	if s.workers > maxWorkers {
		return s, fmt.Errorf("--workers %d is over the limit of %d (each holds a chunk of %d MiB)", s.workers, maxWorkers, chunkElems*4>>20)
	}
	return s, nil
}

// tableGroup is the group of an embedding table or head stored in f:
// --table-group-size, else f's own TableGroupSize where it has one (8
// bits), else the linear weights' group (0: f's default).
func (s settings) tableGroup(f quantize.Format) int {
	switch {
	case s.tableGroupSize > 0:
		return s.tableGroupSize
	case f.TableGroupSize() != f.DefaultGroupSize():
		return f.TableGroupSize()
	}
	return s.groupSize
}

// resolveSource finds the model directory: a local path, else the
// embedded demo, else a Hub repo (an alias is first turned into its repo)
// through the fetcher.
func resolveSource(ctx context.Context, opts Options) (*Snapshot, error) {
	src := opts.Source
	if src == "" {
		return nil, errors.New("no model given: pass a directory, a registry alias (see --list-models) or a Hub repo id")
	}
	if st, err := os.Stat(src); err == nil {
		if !st.IsDir() {
			return nil, fmt.Errorf("%s is not a directory (give the model's directory)", src)
		}
		if opts.Revision != "" {
			return nil, fmt.Errorf("--revision %s: %s is a local directory; --revision picks a revision of a Hub repo", opts.Revision, src)
		}
		return &Snapshot{Dir: src}, nil
	}
	e, known := Lookup(src)
	if known && e.Embedded && opts.Revision != "" {
		return nil, fmt.Errorf("--revision %s: %s is built into lowbit, not a Hub repo", opts.Revision, src)
	}
	if known && e.Embedded {
		dir, err := opts.Store.Demo()
		if err != nil {
			return nil, err
		}
		return &Snapshot{Dir: dir, Alias: e.Alias}, nil
	}
	repo := src
	if known {
		repo = e.Repo
	} else if !strings.Contains(src, "/") {
		return nil, fmt.Errorf("%q is neither a directory, a known alias (%s) nor a Hub repo id (org/name)", src, strings.Join(Aliases(), ", "))
	}
	if opts.Fetcher == nil {
		return nil, fmt.Errorf("%s: not a local directory and no Hub client is configured", repo)
	}
	rev := opts.Revision
	if rev == "" {
		rev = "main"
	}
	snap, err := opts.Fetcher.Fetch(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	snap.Alias = e.Alias
	return snap, nil
}

// outputPath is --out, else <name>-<format> in the store, name being the
// alias, else the repo's base name, else the source directory's.
func outputPath(opts Options, snap *Snapshot, s settings) (string, error) {
	if opts.Out != "" {
		return filepath.Clean(opts.Out), nil
	}
	name := snap.Alias
	if name == "" && snap.RepoID != "" {
		name = path.Base(snap.RepoID)
	}
	if name == "" {
		abs, err := filepath.Abs(snap.Dir)
		if err != nil {
			return "", fmt.Errorf("source %s: %w", snap.Dir, err)
		}
		name = filepath.Base(abs)
	}
	out, err := opts.Store.ModelPath(name + "-" + s.name())
	if err != nil {
		return "", fmt.Errorf("default output in the model store: %w (give --out)", err)
	}
	return out, nil
}

// checkOut refuses an output that exists, unless forced and it is a lowbit
// model directory, and an output that is, or holds, the source.
func checkOut(out, src string, force bool) error {
	if holds(out, src) {
		return fmt.Errorf("output %s is the source model's directory or holds it: choose another --out", out)
	}
	if _, err := os.Lstat(out); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("output %s: %w", out, err)
	}
	if !force {
		return fmt.Errorf("output %s already exists (use --force to replace it)", out)
	}
	return isLowbitModel(out)
}

// holds reports whether directory a is b or one of b's ancestors, after
// symbolic links.
func holds(a, b string) bool {
	ra, err1 := realPath(a)
	rb, err2 := realPath(b)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(ra, rb)
	return err == nil && (rel == "." || !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != "..")
}

// realPath is path made absolute with its symbolic links resolved; a path
// that does not exist yet resolves through its nearest existing parent.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var rest []string
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}

// isLowbitModel accepts only a directory (not a link to one) with a lowbit
// manifest: --force replaces converted models, nothing else.
func isLowbitModel(dir string) error {
	if _, err := manifest.ReadModelDir(dir); err != nil {
		return fmt.Errorf("output %s: --force replaces only a lowbit model directory: %w", dir, err)
	}
	return nil
}

// place moves the finished directory to out: without force it never
// replaces anything; with force it exchanges it with the lowbit model there
// in one step.
func place(dir *atomicfile.Dir, out, src string, force bool) error {
	var err error
	if force {
		err = dir.Replace(func(old string) error {
			if holds(old, src) {
				return fmt.Errorf("output %s is the source model's directory or holds it", old)
			}
			return isLowbitModel(old)
		})
	} else {
		err = dir.Commit()
	}
	if errors.Is(err, atomicfile.ErrExist) {
		return fmt.Errorf("output %s appeared while converting (another conversion?): it was left as it is and this conversion's result discarded (use --force to replace a lowbit model)", out)
	}
	return err
}

// sourceRecord lists the source files with sizes and checksums.
func sourceRecord(snap *Snapshot, set *safetensors.Set) (manifest.Source, error) {
	src := manifest.Source{RepoID: snap.RepoID, Revision: snap.Revision, Commit: snap.Commit}
	if abs, err := filepath.Abs(snap.Dir); err == nil {
		src.Dir = abs
	}
	paths := append([]string(nil), set.Files()...)
	if idx := filepath.Join(snap.Dir, "model.safetensors.index.json"); fileExists(idx) {
		paths = append(paths, idx)
	}
	for _, name := range auxFiles {
		if p := filepath.Join(snap.Dir, name); fileExists(p) {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		f, err := hashFile(p)
		if err != nil {
			return src, err
		}
		f.Path = filepath.Base(p)
		src.Files = append(src.Files, f)
	}
	return src, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// hashFile checksums a regular file, reading no more than its size.
func hashFile(path string) (manifest.File, error) {
	f, st, err := safefile.Open(path)
	if err != nil {
		return manifest.File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyN(h, f, st.Size())
	if err != nil {
		return manifest.File{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return manifest.File{Path: path, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// hashDir records every regular file of the output directory.
func hashDir(dir string) ([]manifest.File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []manifest.File
	for _, e := range ents {
		if !e.Type().IsRegular() || e.Name() == manifest.FileName || atomicfile.IsInternal(e.Name()) {
			continue
		}
		f, err := hashFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		f.Path = e.Name()
		files = append(files, f)
	}
	return files, nil
}

// copyFile copies src to dst (dst is inside the temporary output directory).
func copyFile(src, dst string) error {
	in, st, err := safefile.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, in, st.Size()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
