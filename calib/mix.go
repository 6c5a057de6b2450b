package calib

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"lowbit/quantize"
)

// Mixed precision: given a target of bits per linear weight, each linear
// weight gets the format, among the candidates, that spends the bits where
// they lower the error most. A tensor's cost at a format is the
// noise-to-signal ratio of its output over the calibration text, which
// puts a small tensor, GQA's k and v, on the same footing as a large one
// (the model reads each output whole, whatever the tensor's size): with
// the inputs' Hessians, measured on the output itself as the tensor will
// be stored (compensated or not); without them, its importance-weighted
// squared error over its importance-weighted squared weights, times its
// block's gain (Stats.Gain: how much of what the next layer reads the
// block wrote), so that a block that adds little to the residual stream
// is not given the bits of one that adds much.

// Candidate is one way a mixed model may store a linear weight.
type Candidate struct {
	Format quantize.Format `json:"format"`
	// Group is the weights per scale (the format's default when 0).
	Group int `json:"group,omitempty"`
}

// String names the candidate: its format, and the group when not the default.
func (c Candidate) String() string {
	if c.Group == 0 || c.Group == c.Format.DefaultGroupSize() {
		return string(c.Format)
	}
	return fmt.Sprintf("%s/g%d", c.Format, c.Group)
}

// Candidates are the ways a mix may store a linear weight: every quantized
// format (quantize.Formats) whose products take float activations (not
// those trained with int8 ones, ternary), at its default group, and at 2
// and 4 times it where the format has groups: fewer bits of scales for a
// little more error.
func Candidates() []Candidate {
	var out []Candidate
	for _, f := range quantize.Formats() {
		s := f.Spec()
		if !f.Quantized() || s.Int8Activations {
			continue
		}
		out = append(out, Candidate{Format: f, Group: s.Group})
		if s.Group > 0 && !s.TensorScale && !s.BlockScales {
			out = append(out, Candidate{Format: f, Group: 2 * s.Group}, Candidate{Format: f, Group: 4 * s.Group})
		}
	}
	return out
}

// Costs are one tensor's figures at each candidate.
type Costs struct {
	Name   string
	Params int64
	// Bits is the stored bits per weight (codes, scales, minimums) and
	// Err the importance-weighted relative squared error, per candidate; a
	// candidate that cannot store the tensor has Err +Inf.
	Bits, Err []float64
}

// sampleRows is how many rows Measure reads of a tensor: the error per
// weight of a few hundred rows of thousands of weights is within a few
// percent of the whole tensor's, at a fraction of the time.
const sampleRows = 256

// SampleRows are the rows of a tensor of n rows that Measure reads: all of
// them up to a limit, else that many spread evenly.
func SampleRows(n int) []int {
	k := min(n, sampleRows)
	idx := make([]int, k)
	for i := range idx {
		idx[i] = int(int64(i) * int64(n) / int64(k))
	}
	return idx
}

// MeasureOptions tune Measure.
type MeasureOptions struct {
	// Compensate quantizes with each column's error compensated
	// (Stats.Compensation) in the formats that take it, as the tensor
	// will be stored.
	Compensate bool
	// Sensitivity, when it has the tensor, scales its costs so that its
	// probe's is the divergence measured (MeasureSensitivity).
	Sensitivity *Sensitivity
}

// Measure quantizes w, the rows SampleRows(rows) of the [rows, cols]
// tensor name (len(w) a multiple of cols), to each candidate with the
// search weighted by st's importance (nil: uniform), and returns the
// tensor's costs: each candidate's relative error times the tensor's gain
// (Stats.Gain). Where st holds the tensor's Hessian H the error is the
// output's noise-to-signal ratio instead, Σ Δw H Δwᵀ over Σ w H wᵀ: what
// compensation lowers (it moves error between correlated columns, which
// a per-column weighting cannot see), without the gain. With the tensor's
// sensitivity, the errors are scaled to the divergence it measured.
func Measure(ctx context.Context, st *Stats, name string, w []float32, rows, cols int, cands []Candidate, o MeasureOptions) (Costs, error) {
	if cols <= 0 || len(w) == 0 || len(w)%cols != 0 {
		return Costs{}, fmt.Errorf("calib: %s: %d sampled values are not rows of %d", name, len(w), cols)
	}
	n := len(w) / cols
	imp, gain := st.Importance(name), 1.0
	var h []float32
	if st != nil && len(st.Hessian[name]) == cols*cols {
		h = st.Hessian[name]
	} else if g, ok := st.gain(name); ok {
		gain = g
	}
	c := Costs{Name: name, Params: int64(rows) * int64(cols), Bits: make([]float64, len(cands)), Err: make([]float64, len(cands))}
	var u []float32
	if o.Compensate {
		var err error
		if u, err = st.Compensation(name); err != nil {
			return c, err
		}
	}
	ref := errorOf(w, nil, imp, h, cols)
	relErr := func(cand Candidate) (*quantize.Tensor, float64, error) {
		opt := quantize.Options{GroupSize: cand.Group, Search: true, Importance: imp}
		if u != nil && cand.Format.Compensable() {
			opt.Compensate = u
		}
		q, err := quantize.Quantize(ctx, cand.Format, w, n, cols, opt)
		if err != nil {
			return nil, 0, err
		}
		return q, gain * errorOf(w, q.Dequantize(), imp, h, cols) / max(ref, math.SmallestNonzeroFloat64), nil
	}
	scale := 1.0
	if kld, ok := o.Sensitivity.kld(name); ok {
		_, e, err := relErr(o.Sensitivity.Probe)
		if err != nil {
			return c, fmt.Errorf("calib: %s: its sensitivity probe: %w", name, err)
		}
		scale = kld / max(e, math.SmallestNonzeroFloat64)
	}
	for k, cand := range cands {
		q, e, err := relErr(cand)
		if err != nil {
			if ctx.Err() != nil {
				return c, ctx.Err()
			}
			c.Bits[k], c.Err[k] = math.Inf(1), math.Inf(1) // e.g. a weight out of the format's range
			continue
		}
		bytes := len(q.Data) + 2*len(q.Scales) + 2*len(q.Mins)
		c.Bits[k] = float64(bytes) * 8 / float64(len(w))
		if cand.Format.Spec().TensorScale {
			c.Bits[k] += 32 / float64(c.Params) // the tensor's float32 scale, once for all its rows
		}
		c.Err[k] = scale * e
	}
	return c, nil
}

// errorOf is Σ d H dᵀ over the rows d of w - dq (dq nil: of w itself)
// with h ([cols, cols]) set, else Σ imp d².
func errorOf(w, dq, imp, h []float32, cols int) float64 {
	d := make([]float64, cols)
	var e float64
	for r := 0; r+cols <= len(w); r += cols {
		for c := range d {
			d[c] = float64(w[r+c])
			if dq != nil {
				d[c] -= float64(dq[r+c])
			}
		}
		if h == nil {
			for c, v := range d {
				e += weight(imp, c) * v * v
			}
			continue
		}
		for i, di := range d {
			if di == 0 {
				continue
			}
			hr := h[i*cols : (i+1)*cols]
			var s float64
			for j, dj := range d {
				s += float64(hr[j]) * dj
			}
			e += di * s
		}
	}
	return e
}

func weight(imp []float32, c int) float64 {
	if imp == nil {
		return 1
	}
	return float64(imp[c])
}

// Mix picks a candidate for each tensor (indexes into its Costs) so that
// the mean bits per weight, weighted by parameters, is at most target,
// with the summed Err as low as a greedy search finds: every tensor starts
// at its fewest bits, then the upgrade that lowers the error most per bit
// spent is taken while the budget allows.
func Mix(costs []Costs, target float64) ([]int, error) {
	if len(costs) == 0 {
		return nil, errors.New("calib: no tensors to mix")
	}
	if !(target > 0) || math.IsInf(target, 0) {
		return nil, fmt.Errorf("calib: target %v bits per weight is not a positive number", target)
	}
	pick := make([]int, len(costs))
	var params, used float64
	for t, c := range costs {
		best := -1
		for k := range c.Bits {
			if math.IsInf(c.Err[k], 1) {
				continue
			}
			if best < 0 || c.Bits[k] < c.Bits[best] || c.Bits[k] == c.Bits[best] && c.Err[k] < c.Err[best] {
				best = k
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("calib: no format can store tensor %s", c.Name)
		}
		pick[t] = best
		params += float64(c.Params)
		used += float64(c.Params) * c.Bits[best]
	}
	budget := target * params
	if used > budget*(1+1e-12) {
		return nil, fmt.Errorf("calib: a target of %.3g bits per weight is below the fewest the formats store, %.3g", target, used/params)
	}
	for {
		bt, bk, bestGain := -1, -1, 0.0
		for t, c := range costs {
			cur := pick[t]
			for k := range c.Bits {
				db := float64(c.Params) * (c.Bits[k] - c.Bits[cur])
				de := c.Err[cur] - c.Err[k]
				if db <= 0 || de <= 0 || used+db > budget*(1+1e-12) {
					continue
				}
				if g := de / db; g > bestGain {
					bt, bk, bestGain = t, k, g
				}
			}
		}
		if bt < 0 {
			return pick, nil
		}
		used += float64(costs[bt].Params) * (costs[bt].Bits[bk] - costs[bt].Bits[pick[bt]])
		pick[bt] = bk
	}
}

// ParseTarget reads a mixed-precision --bits value: a number of bits per
// linear weight that is not a format's name (3.5, 2.7); ok is false for
// anything else.
func ParseTarget(s string) (bits float64, ok bool) {
	s = strings.TrimSpace(s)
	if _, err := quantize.ParseFormat(s); err == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// TargetName is the name a mix at target bits goes by ("mix3.5"), in the
// manifest and in output paths.
func TargetName(target float64) string {
	return "mix" + strconv.FormatFloat(target, 'f', -1, 64)
}
