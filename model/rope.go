package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// check refuses scaling parameters InvFreq cannot use.
func (s *RopeScaling) check() error {
	switch s.Type {
	case "linear", "dynamic":
		if !(s.Factor > 0) {
			return fmt.Errorf("rope_scaling.factor %v must be positive for %s scaling", s.Factor, s.Type)
		}
	case "llama3":
		if !(s.Factor > 0) || s.OriginalMaxPositionEmbeddings <= 0 || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) {
			return errors.New("rope_scaling of type llama3 needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings")
		}
	default:
		return fmt.Errorf("rope_scaling type %q is not supported (linear, dynamic, llama3)", s.Type)
	}
	return nil
}

// InvFreq is the rotary embedding's inverse frequency for each of the
// headDim/2 rotated pairs, with the config's scaling applied, computed in
// float32 as transformers does: 1 / theta^(2i/d), then divided by the
// factor (linear) or smoothly between low and high frequencies (llama3).
// Dynamic NTK scaling changes nothing within max_position_embeddings, and
// a session never runs past it, so it is the default here.
func (c Config) InvFreq() []float32 {
	half := c.HeadDim / 2
	inv := make([]float32, half)
	for i := range inv {
		e := float32(2*i) / float32(c.HeadDim)
		inv[i] = 1 / float32(math.Pow(c.RopeTheta, float64(e)))
	}
	s := c.RopeScaling
	if s == nil {
		return inv
	}
	switch s.Type {
	case "linear":
		for i := range inv {
			inv[i] /= float32(s.Factor)
		}
	case "llama3":
		old := float64(s.OriginalMaxPositionEmbeddings)
		lowWavelen := old / s.LowFreqFactor
		highWavelen := old / s.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / float64(f)
			switch {
			case wavelen < highWavelen:
				// high frequency: kept
			case wavelen > lowWavelen:
				inv[i] = f / float32(s.Factor)
			default:
				smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[i] = float32((1-smooth)*float64(f)/s.Factor + smooth*float64(f))
			}
		}
	}
	return inv
}

// Rotary is one layer's rotary embedding: the inverse frequency of each
// rotated pair (RotaryDim/2 of them; nil: the layer does not rotate) and
// the factor cos and sin are multiplied by (1 without attention scaling).
type Rotary struct {
	InvFreq []float32
	Factor  float32
}

// Rotary is layer's rotation in a session of ctx positions.
func (c Config) Rotary(layer, ctx int) Rotary {
	if slices.Contains(c.NoRopeLayers, layer) {
		return Rotary{}
	}
	d := c.HeadDim
	if c.RotaryDim > 0 {
		d = c.RotaryDim
	}
	local := c.LocalRopeTheta > 0 && c.Window(layer) > 0
	theta := c.RopeTheta
	if local {
		theta = c.LocalRopeTheta
	}
	inv := make([]float32, d/2)
	for i := range inv {
		e := float32(2*i) / float32(d)
		inv[i] = 1 / float32(math.Pow(theta, float64(e)))
	}
	if !local && c.RopeScaling != nil {
		full := c
		full.HeadDim, full.RotaryDim = d, 0
		inv = full.InvFreq()
	}
	return Rotary{InvFreq: inv, Factor: 1}
}
