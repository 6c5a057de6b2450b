package model

import (
	"fmt"
	"math"
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
	// Seed seeds the sampler's draws: a seed gives one sequence.
	Seed uint64
}

// Sampler picks tokens; it is deterministic for a seed and not safe for
// concurrent use. Draw i's uniform is a function of the seed and i alone
// (drawUniform), so a backend that draws on its device from the same
// candidates picks the same token without the host's generator.
type Sampler struct {
	opts  SamplerOptions
	cands []cand
	buf   []float32
	// n is the number of tokens drawn: the next draw's index. A choice the
	// most likely candidates could not settle (PickCandidates) leaves it,
	// so the Sample that follows uses the same uniform.
	n uint64
}

// drawUniform is the uniform in [0, 1) of draw i of a seed: splitmix64 of
// seed + (i+1) times the golden ratio, its top 53 bits (the GPU's draw
// kernel computes the same, gpu/kernels/sample.cu).
func drawUniform(seed, i uint64) float64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
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
	return &Sampler{opts: o}, nil
}

// Greedy returns a sampler that always picks the most likely token.
func Greedy() *Sampler {
	s, _ := NewSampler(SamplerOptions{})
	return s
}

// Options are the sampler's settings (a scheduler groups its sequences'
// draws by temperature).
func (s *Sampler) Options() SamplerOptions { return s.opts }

// ArgmaxOnly reports whether Sample is the argmax of the logits alone (no
// temperature, no repetition penalty), so a backend may pick it itself.
func (s *Sampler) ArgmaxOnly() bool {
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
		return Argmax(x)
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
	id, _ := s.pick(topCands(c, o.TopK), 0, false)
	return id
}

// candOrder orders candidates by logit, largest first, then by id: the
// order a stable sort of candidates built in id order gives, as a total
// order (the GPU's TopK returns them so too).
func candOrder(a, b cand) int {
	switch {
	case a.p > b.p:
		return -1
	case a.p < b.p:
		return 1
	}
	return a.id - b.id
}

// sortCands orders candidates by candOrder.
func sortCands(c []cand) { slices.SortFunc(c, candOrder) }

// topCands returns the first k of c in candOrder (all of c, sorted, when k
// is 0 or more than c holds). With top-k set only those k are sorted: a
// heap keeps the k best seen in one pass over the vocabulary, O(n log k),
// where a full sort of every logit is O(n log n) on every token.
func topCands(c []cand, k int) []cand {
	if k <= 0 || k >= len(c) {
		sortCands(c)
		return c
	}
	h := c[:k] // a heap whose root is the worst of the k best
	worse := func(i, j int) bool { return candOrder(h[i], h[j]) > 0 }
	down := func(i int) {
		for {
			w, l, r := i, 2*i+1, 2*i+2
			if l < k && worse(l, w) {
				w = l
			}
			if r < k && worse(r, w) {
				w = r
			}
			if w == i {
				return
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for _, x := range c[k:] {
		if candOrder(x, h[0]) < 0 {
			h[0] = x
			down(0)
		}
	}
	sortCands(h)
	return h
}

// CandidateSampling reports whether PickCandidates can serve this sampler:
// a temperature and no repetition penalty (which needs every logit).
func (s *Sampler) CandidateSampling() bool {
	return s.opts.Temperature > 0 && (s.opts.RepeatPenalty <= 0 || s.opts.RepeatPenalty == 1)
}

// PickCandidates picks the next token from the most likely ones of a
// step (most likely first, as Sample sorts them) and the softmax
// denominator over the whole vocabulary, as Sample would pick it from all
// logits. It reports false when the choice needs tokens beyond c; the
// uniform it drew then stays for the Sample that follows, so the seeded
// sequence is the same either way.
func (s *Sampler) PickCandidates(ids []int, logits []float32, sumExp float64) (int, bool) {
	c := s.cands[:0]
	for i, id := range ids {
		c = append(c, cand{id, logits[i]})
	}
	if len(c) == 0 {
		return 0, false
	}
	return s.pick(c, sumExp, true)
}

// pick draws from sorted candidates c. With partial, c is the head of a
// larger vocabulary whose softmax denominator is sumExp, and pick reports
// false where the filters or the draw reach past c.
func (s *Sampler) pick(c []cand, sumExp float64, partial bool) (int, bool) {
	o := s.opts
	if o.TopK > 0 {
		if o.TopK < len(c) {
			c, partial = c[:o.TopK], false
		} else if partial && o.TopK > len(c) {
			return 0, false
		} else {
			partial = false // exactly the top k
		}
	}
	top := c[0].p
	var sum float64
	for i := range c {
		c[i].p = float32(math.Exp(float64((c[i].p - top) / o.Temperature)))
		sum += float64(c[i].p)
	}
	head := sum // the candidates' share of the denominator
	if partial {
		sum = sumExp
	}
	for i := range c {
		c[i].p = float32(float64(c[i].p) / sum)
	}
	if o.TopP > 0 && o.TopP < 1 {
		var cum float32
		reached := false
		for i := range c {
			cum += c[i].p
			if cum >= o.TopP {
				c, reached = c[:i+1], true
				break
			}
		}
		if partial && !reached {
			return 0, false
		}
		partial = partial && !reached
	}
	if o.MinP > 0 {
		limit := o.MinP * c[0].p
		n := 1
		for n < len(c) && c[n].p >= limit {
			n++
		}
		if partial && n == len(c) {
			return 0, false // the tokens after c may pass too
		}
		c, partial = c[:n], false
	}
	s.cands = c
	var total float64
	for _, k := range c {
		total += float64(k.p)
	}
	if partial {
		total += math.Max(0, (sumExp-head)/sumExp) // the rest of the vocabulary
	}
	r := drawUniform(o.Seed, s.n) * total
	for _, k := range c {
		r -= float64(k.p)
		if r < 0 {
			s.n++
			return k.id, true
		}
	}
	if partial {
		return 0, false // the draw fell past the candidates
	}
	s.n++
	return c[len(c)-1].id, true
}

// Draw is the request for a backend to draw the next token itself as s
// would (Want.Draw), given the sequence so far; nil where s is greedy.
// A draw the backend made is s's only after Accept.
func (s *Sampler) Draw(history []int) *Draw {
	o := s.opts
	if o.Temperature <= 0 {
		return nil
	}
	d := &Draw{Options: o, Index: s.n}
	if o.RepeatPenalty > 0 && o.RepeatPenalty != 1 {
		h := history
		if o.RepeatLastN > 0 && len(h) > o.RepeatLastN {
			h = h[len(h)-o.RepeatLastN:]
		}
		d.Recent = slices.Clone(h)
	}
	return d
}

// Accept counts a token a backend drew for s (Draw): the next draw takes
// the next uniform.
func (s *Sampler) Accept() { s.n++ }

// SampleDraw is the token d asks for from logits, drawn on the host: the
// CPU backend's way, and the reference a device's draws are held to.
func SampleDraw(logits []float32, d *Draw) int {
	s := &Sampler{opts: d.Options, n: d.Index}
	return s.Sample(logits, d.Recent)
}

// LogSoftmax is the log-probabilities of logits x, in float64 (the sum
// of exponentials taken in float64 below the largest value): what
// validation's and calibration's divergences are measured on.
func LogSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	ls := math.Log(s)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = (float64(v) - mx) - ls // (not v - (mx + ls): exact for logits far from zero)
	}
	return out
}

// Argmax is the index of the largest value (the first on ties): the
// greedy token, as every backend picks it.
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// TopCandidates are the k most likely of logits at temperature temp, in
// Sample's order, with the softmax denominator over all of them: what a
// step returns for Want.TopK, computed on the host (the CPU backend's
// way, and the reference of a device's).
func TopCandidates(logits []float32, k int, temp float32) *Candidates {
	c := make([]cand, 0, len(logits))
	for id, v := range logits {
		if !math.IsNaN(float64(v)) {
			c = append(c, cand{id, v})
		}
	}
	out := &Candidates{Exact: true}
	if len(c) == 0 {
		return out
	}
	top := topCands(c, max(k, 1))
	best := top[0].p
	// The terms in id order, each rounded to float32 as Sample rounds it.
	for _, v := range logits {
		if !math.IsNaN(float64(v)) {
			out.SumExp += float64(float32(math.Exp(float64((v - best) / temp))))
		}
	}
	for _, x := range top[:min(k, len(top))] {
		out.IDs = append(out.IDs, x.id)
		out.Logits = append(out.Logits, x.p)
	}
	return out
}
