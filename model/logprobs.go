package model

import "math"

// Logprob is one token's natural log-probability at one step.
type Logprob struct {
	ID      int
	Logprob float64
}

// TokenLogprobs are a generated token's log-probability and the step's most
// likely tokens. They are of the model's own distribution, the log-softmax
// of the raw logits (before repetition penalty, temperature and filters),
// as OpenAI reports them: what the model thought, not what the sampler drew
// from.
type TokenLogprobs struct {
	ID      int
	Logprob float64
	// Top are the most likely tokens of the step, most likely first (equal
	// ones in id order).
	Top []Logprob
}

// LogprobsOf is the log-softmax of logits, in float64, at id and at the top
// most likely tokens. A NaN logit counts as impossible (-Inf).
func LogprobsOf(logits []float32, id, top int) TokenLogprobs {
	peak := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > peak {
			peak = float64(v)
		}
	}
	var sum float64
	for _, v := range logits {
		if x := float64(v); x > math.Inf(-1) { // NaN and -Inf add nothing
			sum += math.Exp(x - peak)
		}
	}
	logZ := peak + math.Log(sum)
	at := func(i int) Logprob {
		x := float64(logits[i])
		if math.IsNaN(x) {
			x = math.Inf(-1)
		}
		return Logprob{ID: i, Logprob: x - logZ}
	}
	best := make([]Logprob, 0, min(max(top, 0), len(logits)))
	for i := range logits {
		lp := at(i)
		if len(best) == cap(best) && (len(best) == 0 || !(lp.Logprob > best[len(best)-1].Logprob)) {
			continue
		}
		// Insert after every one at least as likely, so equal ones keep id order.
		j := len(best)
		for j > 0 && lp.Logprob > best[j-1].Logprob {
			j--
		}
		if len(best) < cap(best) {
			best = append(best, Logprob{})
		}
		copy(best[j+1:], best[j:len(best)-1])
		best[j] = lp
	}
	chosen := at(id)
	return TokenLogprobs{ID: id, Logprob: chosen.Logprob, Top: best}
}
