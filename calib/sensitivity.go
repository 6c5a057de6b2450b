package calib

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"lowbit/model"
	"lowbit/quantize"
	"lowbit/tokenizer"
)

// A tensor's error costs the model more or less than its output's
// noise-to-signal ratio says, by where the tensor sits and what reads it;
// a mix that ranks tensors by that ratio alone gives bits to tensors the
// model does not miss. Sensitivity measures the cost where it is paid:
// the model's next-token distribution on the calibration text, with one
// tensor at a time stored in a probe format and every other weight
// float. Measure then scales each tensor's costs so that the probe's is
// that divergence: the mix compares tensors by what they cost the output,
// and formats of one tensor by their error.

// Sensitivity is each linear weight's measured cost to the model's output.
type Sensitivity struct {
	// Probe is the format each tensor was stored in alone.
	Probe Candidate
	// KLD is the mean KL divergence of the model's next-token
	// distribution from the float model's, by tensor, with that tensor
	// alone in Probe.
	KLD map[string]float64
}

// kld is name's divergence, if measured (s may be nil).
func (s *Sensitivity) kld(name string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	v, ok := s.KLD[name]
	return v, ok
}

// SensitivityOptions tune MeasureSensitivity.
type SensitivityOptions struct {
	// Text is the calibration text ("": DefaultText).
	Text string
	// MaxTokens caps the tokens read (0: SensitivityTokens by the model's
	// size).
	MaxTokens int
	// Compensate stores the probe with each column's error compensated
	// (Stats.Compensation), as a mix with error compensation stores its
	// tensors.
	Compensate bool
	// Progress, when set, is told each tensor done and the number of them.
	Progress func(done, total int)
}

// SensitivityTokens is what MeasureSensitivity reads of the text by
// default for a model of params weights and tensors linear weights: it
// runs the model once for each of them, so a budget of tokens × weights
// × tensors (four calibration passes' of DefaultTokens) is shared out, up
// to a ceiling that ranks the tensors of a small model as well as the
// whole text does; 0 where the share is below a floor under which a mean
// divergence says little (a model of billions of weights), so the
// measurement is left out rather than made to cost many times the
// conversion.
func SensitivityTokens(params int64, tensors int) int {
	const budget = 4 * (128 << 30)
	if params <= 0 || tensors <= 0 {
		return maxSensitivityTokens
	}
	n := budget / params / int64(tensors)
	if n < minSensitivityTokens {
		return 0
	}
	return int(min(n, maxSensitivityTokens))
}

// The bounds of SensitivityTokens.
const (
	minSensitivityTokens = 16
	maxSensitivityTokens = 1024
)

// SensitivityProbe is the format MeasureSensitivity stores each tensor in:
// one of few bits, whose error the model feels, as a mix below 5 bits
// stores most of its tensors.
var SensitivityProbe = Candidate{Format: quantize.Q3S}

// MeasureSensitivity runs m (float weights) over the calibration text once
// as it is, then once for each linear weight with that weight alone in
// SensitivityProbe (its search weighted by st), and returns each weight's
// mean KL divergence from the float model; nil, without error, when m is
// too large for the default budget (SensitivityTokens) and
// opts.MaxTokens does not set one.
func MeasureSensitivity(ctx context.Context, m *model.Model, tok tokenizer.Tokenizer, st *Stats, opts SensitivityOptions) (*Sensitivity, error) {
	text := opts.Text
	if text == "" {
		text = DefaultText
	}
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("calib: sensitivity: the calibration text is empty")
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		return nil, fmt.Errorf("calib: sensitivity: encoding the text: %w", err)
	}
	var names []string
	var params int64
	for name, w := range m.Weights {
		params += int64(w.Rows) * int64(w.Cols)
		if m.Config.TensorRole(name) != model.RoleLinear {
			continue
		}
		if w.F32 == nil {
			return nil, fmt.Errorf("calib: sensitivity: weight %s is not float", name)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, errors.New("calib: sensitivity: the model has no linear weights")
	}
	slices.Sort(names)
	maxTok := opts.MaxTokens
	if maxTok <= 0 {
		if maxTok = SensitivityTokens(params, len(names)); maxTok == 0 {
			return nil, nil
		}
	}
	ids = ids[:min(len(ids), maxTok)]
	if len(ids) < 2 {
		return nil, fmt.Errorf("calib: sensitivity: the calibration text has %d tokens; at least 2 are needed", len(ids))
	}
	for _, id := range ids {
		if id < 0 || id >= m.Config.VocabSize {
			return nil, fmt.Errorf("calib: sensitivity: the tokenizer gave id %d outside the model's vocabulary of %d", id, m.Config.VocabSize)
		}
	}
	bos := -1
	if tokenizer.AddBOS(tok) && tok.BOS() >= 0 && tok.BOS() < m.Config.VocabSize {
		bos = tok.BOS()
	}
	window := min(DefaultWindow, m.Config.MaxPositions, model.DefaultContext)
	ref, err := logProbs(ctx, m, ids, bos, window)
	if err != nil {
		return nil, err
	}
	probe := SensitivityProbe
	sens := &Sensitivity{Probe: probe, KLD: make(map[string]float64, len(names))}
	for i, name := range names {
		w := m.Weights[name]
		opt := quantize.Options{GroupSize: probe.Group, Search: true, Importance: st.Importance(name)}
		if opts.Compensate && probe.Format.Compensable() {
			if opt.Compensate, err = st.Compensation(name); err != nil {
				return nil, err
			}
		}
		q, err := quantize.Quantize(ctx, probe.Format, w.F32, w.Rows, w.Cols, opt)
		if err != nil {
			return nil, fmt.Errorf("calib: sensitivity: %s: %w", name, err)
		}
		weights := maps.Clone(m.Weights)
		weights[name] = model.QuantWeight(q)
		qm, err := model.New(m.Config, weights)
		if err != nil {
			return nil, fmt.Errorf("calib: sensitivity: %s: %w", name, err)
		}
		lq, err := logProbs(ctx, qm, ids, bos, window)
		if err != nil {
			return nil, err
		}
		sens.KLD[name] = meanKLD(ref, lq, m.Config.VocabSize)
		if opts.Progress != nil {
			opts.Progress(i+1, len(names))
		}
	}
	return sens, nil
}

// logProbs are m's next-token log-probabilities at every position of ids,
// read in windows that each start afresh (after bos, when not -1).
func logProbs(ctx context.Context, m *model.Model, ids []int, bos, window int) ([]float32, error) {
	step := window
	if bos >= 0 {
		step--
	}
	if step < 2 {
		return nil, fmt.Errorf("calib: sensitivity: a window of %d tokens is too short", window)
	}
	sess, err := m.NewSession(model.SessionOptions{Context: window})
	if err != nil {
		return nil, fmt.Errorf("calib: sensitivity: %w", err)
	}
	v := m.Config.VocabSize
	var out []float32
	for lo := 0; lo < len(ids); lo += step {
		in := ids[lo:min(lo+step, len(ids))]
		if bos >= 0 {
			in = append([]int{bos}, in...)
		}
		sess.Reset()
		fo, err := sess.ForwardAll(ctx, in, false)
		if err != nil {
			return nil, fmt.Errorf("calib: sensitivity: %w", err)
		}
		for p := range len(in) {
			for _, l := range model.LogSoftmax(fo.Logits[p*v : (p+1)*v]) {
				out = append(out, float32(l)) // (float32: a row per position of every pass)
			}
		}
	}
	return out, nil
}

// meanKLD is the mean over positions of KL(ref ‖ q), both log-probability
// rows of v entries.
func meanKLD(ref, q []float32, v int) float64 {
	n := len(ref) / v
	var sum float64
	for p := range n {
		lr, lq := ref[p*v:(p+1)*v], q[p*v:(p+1)*v]
		var kld float64
		for i, a := range lr {
			if pa := math.Exp(float64(a)); pa > 0 {
				kld += pa * (float64(a) - float64(lq[i]))
			}
		}
		sum += max(kld, 0)
	}
	return sum / float64(n)
}
