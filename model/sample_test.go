package model

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSampler(t *testing.T) {
	logits := []float32{1, 3, 2.5, -1, 0.5}
	tests := []struct {
		name    string
		opts    SamplerOptions
		history []int
		// allowed are the tokens the sampler may return.
		allowed []int
	}{
		{"greedy", SamplerOptions{}, nil, []int{1}},
		{"greedy with penalty", SamplerOptions{RepeatPenalty: 1.5}, []int{1}, []int{2}},
		{"penalty outside window", SamplerOptions{RepeatPenalty: 1.5, RepeatLastN: 1}, []int{1, 4}, []int{1}},
		{"penalty on negative", SamplerOptions{RepeatPenalty: 100, Temperature: 1, TopK: 2}, []int{1, 2}, []int{0, 4}},
		{"top-k 1", SamplerOptions{Temperature: 1, TopK: 1}, nil, []int{1}},
		{"top-k 2", SamplerOptions{Temperature: 1, TopK: 2}, nil, []int{1, 2}},
		{"top-p tiny", SamplerOptions{Temperature: 1, TopP: 0.01}, nil, []int{1}},
		{"top-p 0.9", SamplerOptions{Temperature: 1, TopP: 0.9}, nil, []int{1, 2, 0}},
		{"min-p 1", SamplerOptions{Temperature: 1, MinP: 1}, nil, []int{1}},
		{"min-p 0.5", SamplerOptions{Temperature: 1, MinP: 0.5}, nil, []int{1, 2}},
		{"cold", SamplerOptions{Temperature: 0.01}, nil, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSampler(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for i := 0; i < 2000; i++ {
				id := s.Sample(logits, tc.history)
				if !slices.Contains(tc.allowed, id) {
					t.Fatalf("sampled %d, allowed %v", id, tc.allowed)
				}
				seen[id] = true
			}
			if len(seen) != len(tc.allowed) {
				t.Errorf("sampled %v, expected each of %v", seen, tc.allowed)
			}
		})
	}
}

// TestSamplerDistribution checks that temperature sampling follows the softmax.
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{0, 1, 2, 0.5}
	for _, temp := range []float32{1, 2} {
		s, _ := NewSampler(SamplerOptions{Temperature: temp, Seed: 7})
		const n = 40000
		counts := make([]int, len(logits))
		for i := 0; i < n; i++ {
			counts[s.Sample(logits, nil)]++
		}
		var z float64
		for _, l := range logits {
			z += math.Exp(float64(l / temp))
		}
		for i, l := range logits {
			p := math.Exp(float64(l/temp)) / z
			got := float64(counts[i]) / n
			// 5 standard deviations of a binomial proportion.
			if math.Abs(got-p) > 5*math.Sqrt(p*(1-p)/n) {
				t.Errorf("temperature %v: token %d drawn %.4f of the time, want %.4f", temp, i, got, p)
			}
		}
	}
}

func TestSamplerSeed(t *testing.T) {
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(i%7) * 0.3
	}
	draw := func(seed uint64) []int {
		s, _ := NewSampler(SamplerOptions{Temperature: 1, TopP: 0.95, Seed: seed})
		var ids []int
		for i := 0; i < 64; i++ {
			ids = append(ids, s.Sample(logits, ids))
		}
		return ids
	}
	if a, b := draw(1), draw(1); !slices.Equal(a, b) {
		t.Errorf("seed 1 gave %v then %v", a, b)
	}
	if a, b := draw(1), draw(2); slices.Equal(a, b) {
		t.Errorf("seeds 1 and 2 gave the same %v", a)
	}
}

func TestSamplerOptionErrors(t *testing.T) {
	for _, o := range []SamplerOptions{
		{Temperature: -1}, {Temperature: float32(math.NaN())}, {TopK: -1}, {TopP: 1.5}, {MinP: -0.1},
		{RepeatPenalty: -1}, {RepeatLastN: -2},
	} {
		if _, err := NewSampler(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestTopCands: the k best candidates by heap are the first k of the full
// sort, in its order, ties (equal logits, -Inf) included.
func TestTopCands(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 100, 1000} {
		for _, k := range []int{0, 1, 3, 40, n - 1, n, n + 5} {
			c := make([]cand, n)
			for i := range c {
				v := float32(r.IntN(20)) // many ties
				if r.IntN(10) == 0 {
					v = float32(math.Inf(-1))
				}
				c[i] = cand{i, v}
			}
			want := slices.Clone(c)
			slices.SortStableFunc(want, func(a, b cand) int { return cmp.Compare(b.p, a.p) })
			if k > 0 && k < n {
				want = want[:k]
			}
			if got := topCands(c, k); !slices.Equal(got, want) {
				t.Fatalf("n %d k %d: got %v, want %v", n, k, got[:min(5, len(got))], want[:min(5, len(want))])
			}
		}
	}
}

// BenchmarkSampleTopK is one sampled token over a 32,000-word vocabulary
// with top-k 40, as lowbit run samples when the step's candidates do not
// settle the choice.
func BenchmarkSampleTopK(b *testing.B) {
	s, err := NewSampler(SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64()) * 0.1
	}
	for b.Loop() {
		s.Sample(logits, nil)
	}
}

// TestLogSoftmax: log-probabilities whose exponentials sum to one, the
// same for logits shifted by a constant, and finite for large logits.
func TestLogSoftmax(t *testing.T) {
	for _, x := range [][]float32{{0}, {1, 2, 3}, {-5, 0, 5, 1e4}, {1e30, 1e30}} {
		lp := LogSoftmax(x)
		shifted := make([]float32, len(x))
		for i, v := range x {
			shifted[i] = v - 7
		}
		ls := LogSoftmax(shifted)
		var s float64
		for i, l := range lp {
			if math.IsNaN(l) || l > 0 {
				t.Fatalf("%v: log-probability %v", x, l)
			}
			s += math.Exp(l)
			if math.Abs(l-ls[i]) > 1e-4*math.Max(1, math.Abs(l)) && math.Abs(float64(x[i])) < 1e6 {
				t.Errorf("%v: shifted by 7, %v against %v", x, ls[i], l)
			}
		}
		if math.Abs(s-1) > 1e-9 {
			t.Errorf("%v: probabilities sum to %v", x, s)
		}
	}
}
