package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SamplerOptions choose how the next token is picked from logits. The
// filters apply in transformers' order: repetition penalty, temperature,
// top-k, top-p, min-p; then a token is drawn. Temperature 0 is greedy.
type SamplerOptions struct {
	// Temperature divides the logits; 0 (or less) picks the argmax.
	Temperature float32
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches P (0 or 1: all).
	TopP float32
	// MinP drops tokens less likely than MinP times the most likely (0: none).
	MinP float32
	// RepeatPenalty divides positive (multiplies negative) logits of tokens
	// among the last RepeatLastN of the history (1 or 0: none).
	RepeatPenalty float32
	// RepeatLastN is the history window of the penalty (0: 64, -1: all).
	RepeatLastN int
	// Seed seeds the sampler's own PCG generator: a seed gives one sequence.
	Seed uint64
}

// Sampler picks tokens; it is deterministic for a seed and not safe for
// concurrent use.
type Sampler struct {
	opts  SamplerOptions
	rng   *rand.Rand
	cands []cand
	buf   []float32
}

type cand struct {
	id int
	p  float32
}

// NewSampler checks the options and returns a sampler.
func NewSampler(o SamplerOptions) (*Sampler, error) {
	switch {
	case math.IsNaN(float64(o.Temperature)) || o.Temperature < 0:
		return nil, fmt.Errorf("sampler: temperature %v must be 0 or more", o.Temperature)
	case o.TopK < 0:
		return nil, fmt.Errorf("sampler: top-k %d must be 0 or more", o.TopK)
	case !(o.TopP >= 0 && o.TopP <= 1):
		return nil, fmt.Errorf("sampler: top-p %v must be in [0, 1]", o.TopP)
	case !(o.MinP >= 0 && o.MinP <= 1):
		return nil, fmt.Errorf("sampler: min-p %v must be in [0, 1]", o.MinP)
	case !(o.RepeatPenalty >= 0):
		return nil, fmt.Errorf("sampler: repetition penalty %v must be positive", o.RepeatPenalty)
	case o.RepeatLastN < -1:
		return nil, fmt.Errorf("sampler: repeat-last-n %d must be -1 or more", o.RepeatLastN)
	}
	if o.RepeatLastN == 0 {
		o.RepeatLastN = 64
	}
	return &Sampler{opts: o, rng: rand.New(rand.NewPCG(o.Seed, 0x6c6f77626974))}, nil
}

// Greedy returns a sampler that always picks the most likely token.
func Greedy() *Sampler {
	s, _ := NewSampler(SamplerOptions{})
	return s
}

// argmaxOnly reports whether Sample is the argmax of the logits alone (no
// temperature, no repetition penalty), so a backend may pick it itself.
func (s *Sampler) argmaxOnly() bool {
	return s.opts.Temperature <= 0 && (s.opts.RepeatPenalty <= 0 || s.opts.RepeatPenalty == 1)
}

// Sample picks the next token from logits (not modified), given the
// sequence so far for the repetition penalty.
func (s *Sampler) Sample(logits []float32, history []int) int {
	o := s.opts
	x := logits
	if o.RepeatPenalty > 0 && o.RepeatPenalty != 1 && len(history) > 0 {
		s.buf = append(s.buf[:0], logits...)
		x = s.buf
		h := history
		if o.RepeatLastN > 0 && len(h) > o.RepeatLastN {
			h = h[len(h)-o.RepeatLastN:]
		}
		for _, id := range h {
			if id < 0 || id >= len(x) || x[id] != logits[id] {
				continue // out of range, or already penalized
			}
			if x[id] > 0 {
				x[id] /= o.RepeatPenalty
			} else {
				x[id] *= o.RepeatPenalty
			}
		}
	}
	if o.Temperature <= 0 {
		return argmax(x)
	}
	// Candidates sorted by logit, most likely first; softmax at the temperature.
	c := s.cands[:0]
	for id, v := range x {
		if !math.IsNaN(float64(v)) {
			c = append(c, cand{id, v})
		}
	}
	if len(c) == 0 {
		return 0
	}
	slices.SortStableFunc(c, func(a, b cand) int {
		switch {
		case a.p > b.p:
			return -1
		case a.p < b.p:
			return 1
		}
		return 0
	})
	if o.TopK > 0 && o.TopK < len(c) {
		c = c[:o.TopK]
	}
	top := c[0].p
	var sum float64
	for i := range c {
		c[i].p = float32(math.Exp(float64((c[i].p - top) / o.Temperature)))
		sum += float64(c[i].p)
	}
	for i := range c {
		c[i].p = float32(float64(c[i].p) / sum)
	}
	if o.TopP > 0 && o.TopP < 1 {
		var cum float32
		for i := range c {
			cum += c[i].p
			if cum >= o.TopP {
				c = c[:i+1]
				break
			}
		}
	}
	if o.MinP > 0 {
		limit := o.MinP * c[0].p
		n := 1
		for n < len(c) && c[n].p >= limit {
			n++
		}
		c = c[:n]
	}
	s.cands = c
	var total float64
	for _, k := range c {
		total += float64(k.p)
	}
	r := s.rng.Float64() * total
	for _, k := range c {
		r -= float64(k.p)
		if r < 0 {
			return k.id
		}
	}
	return c[len(c)-1].id
}

// argmax is the index of the largest value (the first on ties).
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
