// Package calib measures, by running a float model over a text, how much
// each input column of every linear weight matters to that weight's output:
// the mean over the text's tokens of the square of the (normed) activation
// the column multiplies. An error e in weight (r, c) moves output r by e*x_c,
// so over the tokens it costs e² times that mean: the diagonal of the
// product's Hessian, which the quantizers' search weighs its error by
// (quantize.Options.Importance). The same figures rank tensors by what their
// quantization error costs, for mixed precision.
//
// It is a package of its own because both the converter and the validator's
// sweep calibrate, and because it watches the forward pass from outside: a
// Backend that wraps the CPU's and records each Linear's input before passing
// it on, so the model package knows nothing of it.
package calib

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"

	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
)

// DefaultText is the built-in calibration text: short plain-English
// stories, descriptions and a dialogue written for lowbit, kept apart from
// every evaluation text (validate's built-in passage, Alice, text sampled
// from the model) so that a measurement never grades the text it was tuned on.
//
//go:embed text.txt
var DefaultText string

// DefaultSource names DefaultText in the manifest.
const DefaultSource = "built-in"

// Method names what the statistics are, as the manifest records it.
const Method = "mean-square-activation"

// GPTQ names the error compensation (quantize.Options.Compensate from
// Stats.Compensation), as the manifest records it.
const GPTQ = "gptq"

// DefaultTokens is how many tokens of the text a model of params weights
// runs over when Options.MaxTokens is 0: the more the steadier the
// statistics, but the pass costs params × tokens while quantizing costs
// params, so a large model gets fewer: 128 from a billion weights up
// (the float pass then costs about half what quantizing does on a CPU),
// up to 4096 for small ones.
func DefaultTokens(params int64) int {
	const budget = 128 << 30 // tokens × weights
	if params <= 0 {
		return maxDefaultTokens
	}
	return int(min(max(budget/params, minDefaultTokens), maxDefaultTokens))
}

// The bounds of DefaultTokens.
const (
	minDefaultTokens = 128
	maxDefaultTokens = 4096
)

// DefaultWindow is the longest sequence one pass reads (a shorter context
// caps it); the text is cut into windows, each starting afresh.
const DefaultWindow = 256

// Options tune Collect.
type Options struct {
	// Text is the calibration text (DefaultText when empty).
	Text string
	// MaxTokens caps the tokens of the text used (0: DefaultTokens).
	MaxTokens int
	// Window is the most tokens per sequence (0: DefaultWindow).
	Window int
	// Workers is the CPU backend's goroutines (0: GOMAXPROCS).
	Workers int
	// Progress, when set, is told the tokens done after each window.
	Progress func(done, total int)
	// Hessians also keeps each input's full Hessian (Stats.Hessian), for
	// error compensation; a model whose Hessians would not fit in memory
	// (maxHessianBytes) is an error.
	Hessians bool
}

// Stats are what a calibration pass measured.
type Stats struct {
	// Tokens is the number of tokens the model ran over (BOS included).
	Tokens int
	// TextSHA256 is the hex sha256 of the text used (before truncation).
	TextSHA256 string
	// MeanSq maps each linear weight (HF name) to the mean square of
	// its input, one value per column.
	MeanSq map[string][]float32
	// Hessian maps each linear weight to the mean of x xᵀ over its
	// inputs ([cols, cols]), with Options.Hessians; inputs read by several
	// weights share one.
	Hessian map[string][]float32
	// Gain maps each linear weight to its block's gain: the power the
	// block it belongs to (attention, or the MLP) adds to the residual
	// stream over the stream's power at the block's input. A relative
	// error in the weight's output moves the stream about that much
	// relative to its size, so it ranks tensors of different blocks.
	Gain map[string]float64
}

// Importance is the per-column weight of name's quantization error: its
// mean square input, plus a floor of a thousandth of the tensor's mean so
// that a column the text never excited still counts for something (the
// text is finite; the model's use is not). Nil when name was not measured.
func (s *Stats) Importance(name string) []float32 {
	if s == nil {
		return nil
	}
	ms, ok := s.MeanSq[name]
	if !ok {
		return nil
	}
	var mean float64
	for _, v := range ms {
		mean += float64(v)
	}
	mean /= float64(len(ms))
	floor := float32(1e-3 * mean)
	imp := make([]float32, len(ms))
	for i, v := range ms {
		imp[i] = v + floor
	}
	return imp
}

// Compensation is quantize.Options.Compensate for name: the factor of its
// inputs' Hessian (with Options.Hessians; nil without).
func (s *Stats) Compensation(name string) ([]float32, error) {
	if s == nil || s.Hessian[name] == nil {
		return nil, nil
	}
	h := s.Hessian[name]
	u, err := quantize.CompensationFactor(h, int(math.Sqrt(float64(len(h)))))
	if err != nil {
		return nil, fmt.Errorf("calib: %s: %w", name, err)
	}
	return u, nil
}

// gain is name's gain, if measured.
func (s *Stats) gain(name string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	g, ok := s.Gain[name]
	return g, ok
}

// TextHash is the hex sha256 of a calibration text, as Stats records it.
func TextHash(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:])
}

// Collect runs m (float weights) over the text on the CPU and returns the
// column statistics of every linear weight (model.RoleLinear) it reads.
func Collect(ctx context.Context, m *model.Model, tok tokenizer.Tokenizer, opts Options) (*Stats, error) {
	text := opts.Text
	if text == "" {
		text = DefaultText
	}
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("calib: the calibration text is empty")
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		return nil, fmt.Errorf("calib: encoding the text: %w", err)
	}
	maxTok := opts.MaxTokens
	if maxTok <= 0 {
		var params int64
		for _, w := range m.Weights {
			params += int64(w.Rows) * int64(w.Cols)
		}
		maxTok = DefaultTokens(params)
	}
	ids = ids[:min(len(ids), maxTok)]
	if len(ids) == 0 {
		return nil, errors.New("calib: the calibration text has no tokens")
	}
	for _, id := range ids {
		if id < 0 || id >= m.Config.VocabSize {
			return nil, fmt.Errorf("calib: the tokenizer gave id %d outside the model's vocabulary of %d", id, m.Config.VocabSize)
		}
	}
	bos := -1
	if tokenizer.AddBOS(tok) && tok.BOS() >= 0 && tok.BOS() < m.Config.VocabSize {
		bos = tok.BOS()
	}
	window := opts.Window
	if window <= 0 {
		window = DefaultWindow
	}
	window = min(window, m.Config.MaxPositions, model.DefaultContext)
	step := window
	if bos >= 0 {
		step--
	}
	if step < 1 {
		return nil, fmt.Errorf("calib: a window of %d tokens is too short", window)
	}
	rec := newRecorder(model.NewCPU(opts.Workers))
	rec.hessians, rec.hessianLimit = opts.Hessians, maxHessianBytes
	sess, err := m.NewSession(model.SessionOptions{Backend: rec, Context: window})
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	tokens := 0
	for lo := 0; lo < len(ids); lo += step {
		in := ids[lo:min(lo+step, len(ids))]
		if bos >= 0 {
			in = append([]int{bos}, in...)
		}
		tokens += len(in)
		sess.Reset()
		if _, err := sess.Forward(ctx, in); err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		if rec.err != nil {
			return nil, fmt.Errorf("calib: %w", rec.err)
		}
		if opts.Progress != nil {
			opts.Progress(min(lo+step, len(ids)), len(ids))
		}
	}
	st := &Stats{Tokens: tokens, TextSHA256: TextHash(text), MeanSq: map[string][]float32{}, Gain: map[string]float64{}}
	means := map[*site][]float32{}
	for name, w := range m.Weights {
		if m.Config.TensorRole(name) != model.RoleLinear {
			continue
		}
		site := rec.siteOf(w)
		if site == nil || site.rows == 0 {
			return nil, fmt.Errorf("calib: the forward pass never read weight %s", name)
		}
		ms := make([]float32, len(site.sumSq))
		for c, v := range site.sumSq {
			ms[c] = float32(v / float64(site.rows))
		}
		if bad := firstNonFinite(ms); bad >= 0 {
			return nil, fmt.Errorf("calib: weight %s: the input of column %d is not finite (%v)", name, bad, ms[bad])
		}
		st.MeanSq[name] = ms
		st.Gain[name] = site.gain()
		if site.h != nil {
			if st.Hessian == nil {
				st.Hessian = map[string][]float32{}
			}
			if hs, ok := means[site]; ok {
				st.Hessian[name] = hs // shared with the weights of the same input
				continue
			}
			hs := make([]float32, len(site.h))
			for i, v := range site.h {
				hs[i] = v / float32(site.rows)
			}
			means[site] = hs
			st.Hessian[name] = hs
		}
	}
	return st, nil
}

func firstNonFinite(x []float32) int {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i
		}
	}
	return -1
}
