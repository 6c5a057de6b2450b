package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"lowbit/model"
)

// samplingFlags are the sampler's flags, the same for run and bench.
type samplingFlags struct {
	temp, topP, minP, repeat float32
	topK, repeatLastN        int
}

// register adds the flags to fl, with temp as --temp's default.
func (s *samplingFlags) register(fl *pflag.FlagSet, temp float32, tempHelp string) {
	fl.Float32Var(&s.temp, "temp", temp, tempHelp)
	fl.IntVar(&s.topK, "top-k", 40, "keep the K most likely tokens (0: all)")
	fl.Float32Var(&s.topP, "top-p", 0.95, "keep the most likely tokens up to this probability (1: all)")
	fl.Float32Var(&s.minP, "min-p", 0.05, "drop tokens less likely than this times the most likely (0: none)")
	fl.Float32Var(&s.repeat, "repeat-penalty", 1.0, "penalty for tokens seen in the last --repeat-last-n (1: none)")
	fl.IntVar(&s.repeatLastN, "repeat-last-n", 64, "history window of the repeat penalty (0: none, -1: all)")
}

// options checks the flags and returns the sampler's settings (Seed unset);
// a value out of range is refused by its flag's name.
func (s samplingFlags) options() (model.SamplerOptions, error) {
	bad := func(flag string, v any, want string) (model.SamplerOptions, error) {
		return model.SamplerOptions{}, fmt.Errorf("%s %v: want %s", flag, v, want)
	}
	switch {
	case !(s.temp >= 0):
		return bad("--temp", s.temp, "0 (greedy) or more")
	case s.topK < 0:
		return bad("--top-k", s.topK, "0 (all) or more")
	case !(s.topP >= 0 && s.topP <= 1):
		return bad("--top-p", s.topP, "0 to 1")
	case !(s.minP >= 0 && s.minP <= 1):
		return bad("--min-p", s.minP, "0 to 1")
	case !(s.repeat > 0):
		return bad("--repeat-penalty", s.repeat, "more than 0 (1: none)")
	case s.repeatLastN < -1:
		return bad("--repeat-last-n", s.repeatLastN, "-1 (all), 0 (none) or more")
	}
	penalty := s.repeat
	if s.repeatLastN == 0 { // the sampler reads a window of 0 as its default
		penalty = 1
	}
	return model.SamplerOptions{Temperature: s.temp, TopK: s.topK, TopP: s.topP, MinP: s.minP,
		RepeatPenalty: penalty, RepeatLastN: s.repeatLastN}, nil
}
