package validate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"

	"lowbit/calib"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
)

// A sweep quantizes one float model in every way a conversion can, in
// memory, and measures each against the float model on the same texts:
// bits per weight against KL divergence, top-1 agreement and perplexity.
// Every variant runs the same float32 forward pass on the CPU, so only the
// weights differ. The embeddings and the head are stored as convert stores
// them (q8 in groups of 128) in every variant, so the rows compare the
// linear weights.

// SweepVariant is one way to store a model's linear weights.
type SweepVariant struct {
	// Name labels the row ("q4", "q4+calib", "mix3.5").
	Name string `json:"name"`
	// Candidate is the format of every linear weight (without TargetBits).
	Candidate calib.Candidate `json:"candidate"`
	// Calibrated weighs the search by the calibration's importance.
	Calibrated bool `json:"calibrated"`
	// Compensated also compensates each column's error on the later ones
	// (GPTQ, quantize.Options.Compensate) in the formats that take it;
	// it needs the calibration's Hessians.
	Compensated bool `json:"compensated,omitempty"`
	// TargetBits, when set, mixes the candidates (calib.Mix) to at most
	// this mean of bits per linear weight; a mix is always calibrated.
	TargetBits float64 `json:"target_bits,omitempty"`
}

// SweepText is an evaluation text with its name in the report.
type SweepText struct {
	Name string
	Text string
}

// SweepOptions tune Sweep.
type SweepOptions struct {
	// Texts are the evaluation texts (at least one).
	Texts []SweepText
	// Window is the tokens per forward pass (0: 256).
	Window int
	// MaxTokens caps the tokens of each text (0: 8192).
	MaxTokens int
	// Calib is the calibration of the calibrated variants and mixes (nil:
	// none may be asked for), and CalibText its text ("": the built-in
	// one), which the mixes also measure their tensors' sensitivity on.
	Calib     *calib.Stats
	CalibText string
	// Variants are the rows (nil: DefaultVariants(nil)).
	Variants []SweepVariant
	// Workers bounds the goroutines quantizing (0: GOMAXPROCS).
	Workers int
	// Progress, when set, is told each variant as it starts.
	Progress func(i, n int, v SweepVariant)
}

// SweepRow is one variant's measurement.
type SweepRow struct {
	Variant SweepVariant `json:"variant"`
	// Bits is the stored bits per weight by tensor class (linear,
	// embedding, output; the output absent when tied to the embedding).
	Bits map[string]float64 `json:"bits_per_weight"`
	// Formats counts the linear weights stored in each candidate.
	Formats map[string]int `json:"formats"`
	// Texts are the figures on each text, in SweepOptions.Texts' order.
	Texts []SweepScore `json:"texts"`
}

// SweepScore is what a variant costs on one text.
type SweepScore struct {
	Text     string  `json:"text"`
	Tokens   int     `json:"tokens"`
	KLDMean  float64 `json:"kld_mean"`
	KLDP99   float64 `json:"kld_p99"`
	Top1     float64 `json:"top1_agreement"`
	PPL      float64 `json:"ppl"`
	PPLRef   float64 `json:"ppl_reference"`
	PPLRatio float64 `json:"ppl_ratio"`
}

// DefaultSweepTargets are the mixes DefaultVariants asks for.
var DefaultSweepTargets = []float64{2.7, 3.6, 4.6}

// DefaultVariants are every mixable format (calib.Candidates) at its
// default group, without and with calibration, and, with gptq, with error
// compensation where the format takes it; then a mix at each target, and
// with gptq the same mix compensated.
func DefaultVariants(targets []float64, gptq bool) []SweepVariant {
	var out []SweepVariant
	for _, c := range calib.Candidates() {
		if c.Group != c.Format.DefaultGroupSize() {
			continue
		}
		out = append(out, SweepVariant{Name: c.String(), Candidate: c}, SweepVariant{Name: c.String() + "+calib", Candidate: c, Calibrated: true})
		if gptq && c.Format.Compensable() {
			out = append(out, SweepVariant{Name: c.String() + "+gptq", Candidate: c, Calibrated: true, Compensated: true})
		}
	}
	for _, t := range targets {
		out = append(out, SweepVariant{Name: calib.TargetName(t), TargetBits: t, Calibrated: true})
		if gptq {
			out = append(out, SweepVariant{Name: calib.TargetName(t) + "+gptq", TargetBits: t, Calibrated: true, Compensated: true})
		}
	}
	return out
}

// blocksFit says every linear weight of m has rows of whole blocks of f
// (always, for a format of groups).
func blocksFit(m *model.Model, f quantize.Format) bool {
	s := f.Spec()
	if !s.BlockScales {
		return true
	}
	for _, name := range linearNames(m) {
		if m.Weights[name].Cols%s.Block != 0 {
			return false
		}
	}
	return true
}

// Sweep measures each variant of ref (a float model) on each text.
func Sweep(ctx context.Context, ref *model.Model, tok tokenizer.Tokenizer, opts SweepOptions) ([]SweepRow, error) {
	if len(opts.Texts) == 0 {
		return nil, errors.New("validate: sweep: no evaluation text")
	}
	variants := opts.Variants
	if variants == nil {
		variants = DefaultVariants(nil, false)
	}
	for _, v := range variants {
		if (v.Calibrated || v.TargetBits > 0 || v.Compensated) && opts.Calib == nil {
			return nil, fmt.Errorf("validate: sweep: variant %s needs a calibration", v.Name)
		}
		if v.Compensated && opts.Calib.Hessian == nil {
			return nil, fmt.Errorf("validate: sweep: variant %s needs the calibration's Hessians", v.Name)
		}
	}
	window := opts.Window
	if window <= 0 {
		window = 256
	}
	costs := map[bool][]calib.Costs{} // by compensation
	cands := calib.Candidates()
	var rows []SweepRow
	for i, v := range variants {
		if opts.Progress != nil {
			opts.Progress(i, len(variants), v)
		}
		plan := map[string]calib.Candidate{}
		for _, name := range linearNames(ref) {
			plan[name] = v.Candidate
		}
		if v.TargetBits == 0 && !blocksFit(ref, v.Candidate.Format) {
			continue // a block format whose blocks the model's rows are not whole numbers of
		}
		if v.TargetBits > 0 {
			cs := costs[v.Compensated]
			if cs == nil {
				var err error
				sens, err := calib.MeasureSensitivity(ctx, ref, tok, opts.Calib, calib.SensitivityOptions{Text: opts.CalibText, Compensate: v.Compensated})
				if err != nil {
					return nil, fmt.Errorf("validate: sweep: %s: %w", v.Name, err)
				}
				mo := calib.MeasureOptions{Compensate: v.Compensated, Sensitivity: sens}
				if cs, err = mixCosts(ctx, ref, opts.Calib, cands, mo, opts.Workers); err != nil {
					return nil, err
				}
				costs[v.Compensated] = cs
			}
			pick, err := calib.Mix(cs, v.TargetBits)
			if err != nil {
				return nil, fmt.Errorf("validate: sweep: %s: %w", v.Name, err)
			}
			for t, c := range cs {
				plan[c.Name] = cands[pick[t]]
			}
		}
		var st *calib.Stats
		if v.Calibrated || v.TargetBits > 0 {
			st = opts.Calib
		}
		quant, row, err := quantizeModel(ctx, ref, plan, st, v.Compensated, opts.Workers)
		if err != nil {
			return nil, fmt.Errorf("validate: sweep: %s: %w", v.Name, err)
		}
		row.Variant = v
		for _, t := range opts.Texts {
			rep, err := CompareModels(ctx, quant, ref, tok, ModelOptions{Text: t.Text, Window: window, MaxTokens: opts.MaxTokens})
			if err != nil {
				return nil, fmt.Errorf("validate: sweep: %s on %s: %w", v.Name, t.Name, err)
			}
			row.Texts = append(row.Texts, SweepScore{Text: t.Name, Tokens: rep.Tokens, KLDMean: rep.KLDMean, KLDP99: rep.KLDP99,
				Top1: rep.Top1, PPL: rep.PPL, PPLRef: rep.PPLRef, PPLRatio: rep.PPLRatio})
		}
		rows = append(rows, *row)
	}
	return rows, nil
}

// linearNames are ref's linear weights, sorted.
func linearNames(ref *model.Model) []string {
	var names []string
	for name := range ref.Weights {
		if ref.Config.TensorRole(name) == model.RoleLinear {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// mixCosts measures every linear weight of ref at every candidate (calib.Measure).
func mixCosts(ctx context.Context, ref *model.Model, st *calib.Stats, cands []calib.Candidate, mo calib.MeasureOptions, workers int) ([]calib.Costs, error) {
	names := linearNames(ref)
	costs := make([]calib.Costs, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workersOr(workers))
	for i, name := range names {
		g.Go(func() error {
			w := ref.Weights[name]
			if w.F32 == nil {
				return fmt.Errorf("weight %s is not float", name)
			}
			var sample []float32
			for _, r := range calib.SampleRows(w.Rows) {
				sample = append(sample, w.F32[r*w.Cols:(r+1)*w.Cols]...)
			}
			c, err := calib.Measure(gctx, st, name, sample, w.Rows, w.Cols, cands, mo)
			costs[i] = c
			return err
		})
	}
	return costs, g.Wait()
}

// quantizeModel is ref with each linear weight stored as plan says (the
// search weighted by st's importance when st is set, and with compensate
// each column's error compensated where the format takes it), the
// embeddings and head as convert stores them, norms as they are; and the
// row's bits and formats.
func quantizeModel(ctx context.Context, ref *model.Model, plan map[string]calib.Candidate, st *calib.Stats, compensate bool, workers int) (*model.Model, *SweepRow, error) {
	weights := make(map[string]*model.Weight, len(ref.Weights))
	type job struct {
		name string
		f    quantize.Format
		opt  quantize.Options
	}
	var jobs []job
	for name, w := range ref.Weights {
		weights[name] = w
		switch ref.Config.TensorRole(name) {
		case model.RoleLinear:
			c := plan[name]
			jobs = append(jobs, job{name, c.Format, quantize.Options{GroupSize: c.Group, Search: true, Importance: st.Importance(name), Factors: st.Factors(name)}})
		case model.RoleEmbedding, model.RoleOutput:
			jobs = append(jobs, job{name, quantize.Q8, quantize.Options{GroupSize: quantize.Q8.TableGroupSize(), Search: true}})
		}
	}
	out := make([]*model.Weight, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workersOr(workers))
	for i, j := range jobs {
		g.Go(func() error {
			w := ref.Weights[j.name]
			if w.F32 == nil {
				return fmt.Errorf("weight %s is not float", j.name)
			}
			if compensate && ref.Config.TensorRole(j.name) == model.RoleLinear && j.f.Compensable() {
				u, err := st.Compensation(j.name)
				if err != nil {
					return err
				}
				j.opt.Compensate = u
			}
			q, err := quantize.Quantize(gctx, j.f, w.F32, w.Rows, w.Cols, j.opt)
			if err != nil {
				return fmt.Errorf("%s: %w", j.name, err)
			}
			out[i] = model.QuantWeight(q)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	row := &SweepRow{Bits: map[string]float64{}, Formats: map[string]int{}}
	bits, params := map[string]float64{}, map[string]float64{}
	for i, j := range jobs {
		weights[j.name] = out[i]
		class := string(ref.Config.TensorRole(j.name))
		bits[class] += float64(storedBytes(out[i].Q)) * 8
		params[class] += float64(out[i].Rows) * float64(out[i].Cols)
		if class == string(model.RoleLinear) {
			row.Formats[plan[j.name].String()]++
		}
	}
	for class, b := range bits {
		row.Bits[class] = b / params[class]
	}
	quant, err := model.New(ref.Config, weights)
	if err != nil {
		return nil, nil, err
	}
	return quant, row, nil
}

// workersOr is workers, or GOMAXPROCS when 0.
func workersOr(workers int) int {
	if workers > 0 {
		return workers
	}
	return runtime.GOMAXPROCS(0)
}

// storedBytes is what a quantized tensor stores: codes, scales, minimums
// and a per-tensor scale.
func storedBytes(q *quantize.Tensor) int {
	n := len(q.Data) + 2*len(q.Scales) + 2*len(q.Mins)
	if q.Format.Spec().TensorScale {
		n += 4
	}
	return n
}

// SampleText is text sampled from m at temperature 1 (no other filter),
// seeded: sequences from BOS to EOS or the end of the context, one after
// the other, until tokens tokens: an evaluation text from the model's own
// distribution, which no calibration text can have seen.
func SampleText(ctx context.Context, m *model.Model, tok tokenizer.Tokenizer, tokens int, seed uint64) (string, error) {
	if tokens <= 0 {
		return "", fmt.Errorf("validate: sample: %d tokens", tokens)
	}
	sampler, err := model.NewSampler(model.SamplerOptions{Temperature: 1, Seed: seed})
	if err != nil {
		return "", err
	}
	sess, err := m.NewSession(model.SessionOptions{})
	if err != nil {
		return "", err
	}
	start := tok.BOS()
	if start < 0 {
		return "", errors.New("validate: sample: the tokenizer has no BOS to start from")
	}
	var parts []string
	n := 0
	for n < tokens {
		sess.Reset()
		st, err := model.Generate(ctx, sess, []int{start}, model.GenerateOptions{
			MaxTokens: min(tokens-n, sess.Context()-1), Sampler: sampler, StopIDs: tok.EOSIDs(),
		})
		if err != nil {
			return "", fmt.Errorf("validate: sample: %w", err)
		}
		if len(st.Tokens) == 0 {
			continue // an EOS at once: draw again
		}
		n += len(st.Tokens)
		parts = append(parts, tok.Decode(st.Tokens))
	}
	return strings.Join(parts, "\n"), nil
}

// WriteSweep prints the rows as a table: bits per weight by class, then
// each text's KLD mean, top-1 and perplexity ratio.
func WriteSweep(w io.Writer, rows []SweepRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rows) == 0 {
		return nil
	}
	head := "variant\tlinear bpw\temb bpw\thead bpw\t"
	for _, s := range rows[0].Texts {
		head += fmt.Sprintf("%s KLD\tp99\ttop-1\tPPL ratio\t", s.Text)
	}
	fmt.Fprintln(tw, head+"formats\t")
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%.3f\t%s\t%s\t", r.Variant.Name, r.Bits[string(model.RoleLinear)],
			optBits(r.Bits, model.RoleEmbedding), optBits(r.Bits, model.RoleOutput))
		for _, s := range r.Texts {
			line += fmt.Sprintf("%.4f\t%.3f\t%.1f%%\t%.4f\t", s.KLDMean, s.KLDP99, 100*s.Top1, s.PPLRatio)
		}
		fmt.Fprintln(tw, line+formatList(r.Formats)+"\t")
	}
	return tw.Flush()
}

func optBits(b map[string]float64, role model.Role) string {
	v, ok := b[string(role)]
	if !ok || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

// formatList is "q4:20 q8:15", by name.
func formatList(f map[string]int) string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s:%d", n, f[n])
	}
	return strings.Join(parts, " ")
}

// SweepDirOptions tune SweepDir.
type SweepDirOptions struct {
	// Texts are evaluation texts given by the caller.
	Texts []SweepText
	// SampleTokens, when positive, adds a text of that many tokens sampled
	// from the float model (SampleText) with SampleSeed.
	SampleTokens int
	SampleSeed   uint64
	// CalibText is the calibration text ("": calib.DefaultText), and
	// CalibSource its name in the report (a file's path).
	CalibText, CalibSource string
	// CalibTokens caps the calibration's tokens (0: calib.DefaultTokens, by the model's size).
	CalibTokens int
	// Targets are the mixes' bits per linear weight (nil: DefaultSweepTargets).
	Targets []float64
	// Only, when set, keeps the variants of these names ("q4", "q3s+gptq",
	// "mix2.7"): a sweep of a few rows takes a fraction of the whole's time.
	Only []string
	// Window, MaxTokens, Workers and Progress are as in SweepOptions.
	Window, MaxTokens, Workers int
	Progress                   func(i, n int, v SweepVariant)
}

// SweepReport is a sweep of one model.
type SweepReport struct {
	Model string `json:"model"`
	// Calibration says what the calibrated rows were calibrated on.
	Calibration SweepCalibration `json:"calibration"`
	// Texts name the evaluation texts with their sha256 (the sampled
	// one's seed in its name).
	Texts []SweepTextInfo `json:"texts"`
	Rows  []SweepRow      `json:"rows"`
	// Notes say what was left out, and why.
	Notes []string `json:"notes,omitempty"`
}

// SweepCalibration describes the calibration of a sweep.
type SweepCalibration struct {
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
	Tokens int    `json:"tokens"`
}

// SweepTextInfo names an evaluation text.
type SweepTextInfo struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// SweepDir sweeps the float model in dir (an HF directory): every
// format without and with calibration, and the mixes, on the given texts
// and a text sampled from the model.
func SweepDir(ctx context.Context, dir string, o SweepDirOptions) (*SweepReport, error) {
	ref, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		return nil, err
	}
	for name, w := range ref.Weights {
		if ref.Config.TensorRole(name) == model.RoleLinear && w.F32 == nil {
			return nil, fmt.Errorf("validate: sweep: %s is not a float model (weight %s is %s): give the float original", dir, name, w.Format())
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	texts := slices.Clone(o.Texts)
	if o.SampleTokens > 0 {
		s, err := SampleText(ctx, ref, tok, o.SampleTokens, o.SampleSeed)
		if err != nil {
			return nil, err
		}
		texts = append(texts, SweepText{Name: fmt.Sprintf("sampled(seed %d)", o.SampleSeed), Text: s})
	}
	if len(texts) == 0 {
		return nil, errors.New("validate: sweep: no evaluation text: give a text or sample one")
	}
	copts := calib.Options{Text: o.CalibText, MaxTokens: o.CalibTokens, Workers: o.Workers, Hessians: true}
	st, err := calib.Collect(ctx, ref, tok, copts)
	var notes []string
	if errors.Is(err, calib.ErrHessiansTooLarge) {
		notes = append(notes, fmt.Sprintf("no +gptq rows: %v", err))
		copts.Hessians = false
		st, err = calib.Collect(ctx, ref, tok, copts)
	}
	if err != nil {
		return nil, err
	}
	calText := strings.TrimSpace(cmp.Or(o.CalibText, calib.DefaultText))
	probe := calText[:min(len(calText), 200)]
	for _, t := range texts {
		if strings.Contains(t.Text, probe) {
			return nil, fmt.Errorf("validate: sweep: the evaluation text %s holds the calibration text: the rows would grade what they were tuned on", t.Name)
		}
	}
	targets := o.Targets
	if targets == nil {
		targets = DefaultSweepTargets
	}
	variants, err := onlyVariants(DefaultVariants(targets, st.Hessian != nil), o.Only)
	if err != nil {
		return nil, err
	}
	rep := &SweepReport{Model: dir, Calibration: SweepCalibration{Source: cmp.Or(o.CalibSource, calib.DefaultSource), SHA256: st.TextSHA256, Tokens: st.Tokens}, Notes: notes}
	for _, t := range texts {
		rep.Texts = append(rep.Texts, SweepTextInfo{Name: t.Name, SHA256: calib.TextHash(t.Text)})
	}
	rep.Rows, err = Sweep(ctx, ref, tok, SweepOptions{Texts: texts, Window: o.Window, MaxTokens: o.MaxTokens, Calib: st, CalibText: o.CalibText,
		Variants: variants, Workers: o.Workers, Progress: o.Progress})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// onlyVariants is the variants named in only, in vs's order (all of vs
// when only is empty); a name no variant has is an error listing them.
func onlyVariants(vs []SweepVariant, only []string) ([]SweepVariant, error) {
	if len(only) == 0 {
		return vs, nil
	}
	var out []SweepVariant
	for _, v := range vs {
		if slices.Contains(only, v.Name) {
			out = append(out, v)
		}
	}
	for _, name := range only {
		if !slices.ContainsFunc(vs, func(v SweepVariant) bool { return v.Name == name }) {
			names := make([]string, len(vs))
			for i, v := range vs {
				names[i] = v.Name
			}
			return nil, fmt.Errorf("validate: sweep: no variant %q (the variants: %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}
