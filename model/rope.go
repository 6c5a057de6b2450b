package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Rotary is one layer's rotary embedding: the inverse frequency of each
// rotated pair (RotaryDim/2 of them; nil: the layer does not rotate) and
// the factor cos and sin are multiplied by (yarn's and longrope's attention
// scaling; 1 otherwise).
type Rotary struct {
	InvFreq []float32
	Factor  float32
}

// Rotary is layer's rotation in a session of ctx positions, computed step
// by step in the precision transformers 5 uses (float32 tensors, float64
// Python scalars), so that the rotation, and the logits after it, match
// the reference. Layers in NoRopeLayers do not rotate; sliding-window
// layers with their own base (LocalRopeTheta: Gemma 3) take that base and
// no scaling; every other layer takes RopeTheta and the config's scaling.
// The session length only matters to longrope, which switches from its
// short to its long factors past original_max_position_embeddings (dynamic
// NTK would change only past max_position_embeddings, which a session
// never reaches, so it is the default rotation). It assumes a config that
// passed Check.
func (c Config) Rotary(layer, ctx int) Rotary {
	if slices.Contains(c.NoRopeLayers, layer) {
		return Rotary{}
	}
	dim := c.rotaryDim()
	if layer >= 0 && layer < len(c.LayerWindows) && c.LayerWindows[layer] > 0 && c.LocalRopeTheta > 0 {
		return Rotary{InvFreq: defaultInvFreq(c.LocalRopeTheta, dim), Factor: 1}
	}
	return c.globalRotary(ctx)
}

// globalRotary is the rotation of the layers that take RopeTheta and the
// config's scaling, in a session of ctx positions.
func (c Config) globalRotary(ctx int) Rotary {
	dim := c.rotaryDim()
	s := c.RopeScaling
	if s == nil {
		return Rotary{InvFreq: defaultInvFreq(c.RopeTheta, dim), Factor: 1}
	}
	switch s.Type {
	case "linear":
		inv := defaultInvFreq(c.RopeTheta, dim)
		for i := range inv {
			inv[i] /= float32(s.Factor)
		}
		return Rotary{InvFreq: inv, Factor: 1}
	case "llama3":
		return Rotary{InvFreq: llama3InvFreq(c.RopeTheta, dim, s), Factor: 1}
	case "yarn":
		return yarn(c.RopeTheta, dim, s)
	case "longrope":
		return longrope(c.RopeTheta, dim, ctx, s)
	case "factors":
		return factorRotary(c.RopeTheta, dim, s.ShortFactor)
	}
	return Rotary{InvFreq: defaultInvFreq(c.RopeTheta, dim), Factor: 1}
}

// rotaryDim is how many of a head's dimensions rotate.
func (c Config) rotaryDim() int {
	if c.RotaryDim > 0 {
		return c.RotaryDim
	}
	return c.HeadDim
}

// ropePowers is theta^(2i/dim) for each rotated pair, as transformers
// computes it: the exponent in float32, the power rounded to float32.
func ropePowers(theta float64, dim int) []float32 {
	p := make([]float32, dim/2)
	for i := range p {
		e := float32(2*i) / float32(dim)
		p[i] = float32(math.Pow(theta, float64(e)))
	}
	return p
}

// defaultInvFreq is the unscaled rotation, 1 / theta^(2i/dim).
func defaultInvFreq(theta float64, dim int) []float32 {
	inv := ropePowers(theta, dim)
	for i, p := range inv {
		inv[i] = 1 / p
	}
	return inv
}

// llama3InvFreq keeps the high frequencies, divides the low ones by the
// factor and blends in between (Llama 3.1). transformers computes it on
// float32 tensors, where a Python number over a tensor is the tensor's
// reciprocal times the number: two roundings, kept here.
func llama3InvFreq(theta float64, dim int, s *RopeScaling) []float32 {
	inv := defaultInvFreq(theta, dim)
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWavelen := float32(old / s.LowFreqFactor)
	highWavelen := float32(old / s.HighFreqFactor)
	factor := float32(s.Factor)
	for i, f := range inv {
		wavelen := float32(1/f) * float32(2*math.Pi)
		scaled := f
		if wavelen > lowWavelen {
			scaled = f / factor
		}
		if wavelen < highWavelen || wavelen > lowWavelen {
			inv[i] = scaled
			continue
		}
		smooth := (float32(1/wavelen)*float32(old) - float32(s.LowFreqFactor)) / float32(s.HighFreqFactor-s.LowFreqFactor)
		// The explicit conversions keep each product rounded on its own, as
		// the tensor operations are (no fused multiply-add).
		inv[i] = float32(float32((1-smooth)*scaled)/factor) + float32(smooth*scaled)
	}
	return inv
}

// yarnMscale is YaRN's attention scaling for a context factor (1 when the
// context is not extended).
func yarnMscale(factor, mscale float64) float64 {
	if factor <= 1 {
		return 1
	}
	return float64(0.1*mscale*math.Log(factor)) + 1
}

// yarnAttentionFactor is the factor cos and sin are multiplied by: the
// config's attention_factor, else mscale over mscale_all_dim where both are
// set (DeepSeek), else 0.1 ln(factor) + 1.
func yarnAttentionFactor(s *RopeScaling) float64 {
	switch {
	case s.AttentionFactor > 0:
		return s.AttentionFactor
	case s.Mscale != 0 && s.MscaleAllDim != 0:
		return yarnMscale(s.Factor, s.Mscale) / yarnMscale(s.Factor, s.MscaleAllDim)
	}
	return yarnMscale(s.Factor, 1)
}

// yarnRange is the band of dimensions (of dim, in float64 as Python computes
// it) over which YaRN blends from extrapolation (the high frequencies, that
// turn more than beta_fast times within the original length) to
// interpolation (those that turn less than beta_slow times), widened to
// whole dimensions unless truncate is false.
func yarnRange(theta float64, dim int, s *RopeScaling) (low, high float64) {
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	correction := func(rotations float64) float64 {
		return float64(dim) * math.Log(float64(s.OriginalMaxPositionEmbeddings)/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high = correction(betaFast), correction(betaSlow)
	if s.Truncate == nil || *s.Truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	return max(low, 0), min(high, float64(dim-1))
}

// yarn blends each pair's frequency between 1/theta^(2i/dim) and the same
// over factor along a linear ramp across yarnRange, in float32 as
// transformers does.
func yarn(theta float64, dim int, s *RopeScaling) Rotary {
	low, high := yarnRange(theta, dim, s)
	if low == high {
		high += 0.001 // transformers' guard against a zero-width ramp
	}
	lo, span := float32(low), float32(high-low)
	factor := float32(s.Factor)
	pow := ropePowers(theta, dim)
	inv := make([]float32, len(pow))
	for i, p := range pow {
		ramp := min(max((float32(i)-lo)/span, 0), 1)
		extrapolation := 1 - ramp
		interpolated := 1 / float32(factor*p)
		inv[i] = float32(interpolated*(1-extrapolation)) + float32((1/p)*extrapolation)
	}
	return Rotary{InvFreq: inv, Factor: float32(yarnAttentionFactor(s))}
}

// longrope divides each pair's frequency by its own factor: the short ones
// within the pretraining length, the long ones for a longer session.
func longrope(theta float64, dim, ctx int, s *RopeScaling) Rotary {
	ext := s.ShortFactor
	if ctx > s.OriginalMaxPositionEmbeddings {
		ext = s.LongFactor
	}
	pow := ropePowers(theta, dim)
	inv := make([]float32, len(pow))
	for i, p := range pow {
		f := float32(1) // Check refuses lists of the wrong length
		if i < len(ext) {
			f = float32(ext[i])
		}
		inv[i] = 1 / float32(f*p)
	}
	attention := s.AttentionFactor
	if attention == 0 {
		attention = 1
		if s.Factor > 1 {
			attention = math.Sqrt(1 + math.Log(s.Factor)/math.Log(float64(s.OriginalMaxPositionEmbeddings)))
		}
	}
	return Rotary{InvFreq: inv, Factor: float32(attention)}
}

// factorRotary divides each pair's frequency by its factor, as llama.cpp
// applies a rope_freqs tensor (how GGUF files carry Llama 3.1's scaling).
func factorRotary(theta float64, dim int, factors []float64) Rotary {
	pow := ropePowers(theta, dim)
	inv := make([]float32, len(pow))
	for i, p := range pow {
		inv[i] = 1 / float32(float32(factors[i])*p)
	}
	return Rotary{InvFreq: inv, Factor: 1}
}

// originalMax is the pretraining length a scaling extends, where
// transformers 5 takes it: the top-level original_max_position_embeddings
// first, then the scaling's, then max_position_embeddings.
func (r hfConfig) originalMax(d ropeDict, maxPos int) (int, error) {
	if b, ok := r["original_max_position_embeddings"]; ok && string(b) != "null" {
		var n int
		if err := r.get("original_max_position_embeddings", &n, false); err != nil {
			return 0, err
		}
		if n <= 0 {
			return 0, fmt.Errorf("config.json: field original_max_position_embeddings must be positive, is %d", n)
		}
		return n, nil
	}
	v, ok, err := d.num("original_max_position_embeddings")
	if err != nil || !ok {
		return maxPos, err
	}
	if !(v >= 1 && v <= maxPositions) || v != math.Trunc(v) {
		return 0, fmt.Errorf("config.json: field %s.original_max_position_embeddings must be an integer in [1, %d], is %v", d.name, maxPositions, v)
	}
	return int(v), nil
}

// ropeDict is a rope_scaling or rope_parameters object, read field by
// field so that a value of the wrong kind is refused by its name.
type ropeDict struct {
	name string // where it is in config.json, for errors
	m    map[string]any
}

// num is a numeric field; ok is false where it is absent or null.
func (d ropeDict) num(key string) (v float64, ok bool, err error) {
	x, present := d.m[key]
	if !present || x == nil {
		return 0, false, nil
	}
	f, isNum := x.(float64)
	if !isNum {
		return 0, false, fmt.Errorf("config.json: field %s.%s must be a number, is %v", d.name, key, x)
	}
	return f, true, nil
}

// list is a field holding a list of numbers (nil where absent).
func (d ropeDict) list(key string) ([]float64, error) {
	x, present := d.m[key]
	if !present || x == nil {
		return nil, nil
	}
	items, isList := x.([]any)
	if !isList {
		return nil, fmt.Errorf("config.json: field %s.%s must be a list of numbers", d.name, key)
	}
	out := make([]float64, len(items))
	for i, it := range items {
		f, isNum := it.(float64)
		if !isNum {
			return nil, fmt.Errorf("config.json: field %s.%s[%d] must be a number, is %v", d.name, key, i, it)
		}
		out[i] = f
	}
	return out, nil
}

// kind is the scaling type: rope_type, else the older type.
func (d ropeDict) kind() (string, error) {
	for _, key := range []string{"rope_type", "type"} {
		if x, present := d.m[key]; present && x != nil {
			t, isString := x.(string)
			if !isString {
				return "", fmt.Errorf("config.json: field %s.%s must be a string, is %v", d.name, key, x)
			}
			return t, nil
		}
	}
	return "", nil
}

// sub is a nested object of rope_parameters, keyed by layer type.
func (d ropeDict) sub(key string) (ropeDict, bool, error) {
	x, present := d.m[key]
	if !present || x == nil {
		return ropeDict{}, false, nil
	}
	m, isObject := x.(map[string]any)
	if !isObject {
		return ropeDict{}, false, fmt.Errorf("config.json: field %s.%s must be an object", d.name, key)
	}
	return ropeDict{name: d.name + "." + key, m: m}, true, nil
}

// localTheta reads the sliding-window layers' rotation, which lowbit
// supports unscaled only (as Gemma 3 has it), into LocalRopeTheta.
func (d ropeDict) localTheta(c *Config) error {
	t, err := d.kind()
	if err != nil {
		return err
	}
	if t != "" && t != "default" {
		return fmt.Errorf("config.json: field %s.rope_type %q: scaled sliding-window layers are not supported", d.name, t)
	}
	theta, ok, err := d.num("rope_theta")
	if err != nil {
		return err
	}
	if ok {
		if !(theta > 0) {
			return fmt.Errorf("config.json: field %s.rope_theta must be positive, is %v", d.name, theta)
		}
		c.LocalRopeTheta = theta
	}
	return nil
}

// check refuses scaling parameters Rotary cannot use.
func (s *RopeScaling) check() error {
	// positive reports a parameter that must be a positive number.
	positive := func(field string, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("rope_scaling.%s %v must be positive for %s scaling", field, v, s.Type)
		}
		return nil
	}
	// optional reports a parameter whose 0 means "the default".
	optional := func(field string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("rope_scaling.%s %v must be positive (or absent) for %s scaling", field, v, s.Type)
		}
		return nil
	}
	originalMax := func() error {
		if s.OriginalMaxPositionEmbeddings <= 0 || s.OriginalMaxPositionEmbeddings > maxPositions {
			return fmt.Errorf("rope_scaling.original_max_position_embeddings %d is outside [1, %d]", s.OriginalMaxPositionEmbeddings, maxPositions)
		}
		return nil
	}
	switch s.Type {
	case "linear", "dynamic":
		return positive("factor", s.Factor)
	case "llama3":
		if !(s.Factor > 0) || s.OriginalMaxPositionEmbeddings <= 0 || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) {
			return errors.New("rope_scaling of type llama3 needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings")
		}
		return originalMax()
	case "yarn":
		if err := positive("factor", s.Factor); err != nil {
			return err
		}
		for _, p := range []struct {
			field string
			v     float64
		}{{"beta_fast", s.BetaFast}, {"beta_slow", s.BetaSlow}, {"mscale", s.Mscale}, {"mscale_all_dim", s.MscaleAllDim}, {"attention_factor", s.AttentionFactor}} {
			if err := optional(p.field, p.v); err != nil {
				return err
			}
		}
		return originalMax()
	case "factors":
		if len(s.ShortFactor) == 0 {
			return errors.New("rope_scaling.short_factor is missing for factors scaling")
		}
		for i, f := range s.ShortFactor {
			if f32 := float32(f); !(f32 > 0) || math.IsInf(float64(f32), 0) {
				return fmt.Errorf("rope_scaling.short_factor[%d] %v must be a positive float32", i, f)
			}
		}
		return nil
	case "longrope":
		if err := positive("factor", s.Factor); err != nil {
			return err
		}
		if err := optional("attention_factor", s.AttentionFactor); err != nil {
			return err
		}
		for _, l := range []struct {
			field string
			v     []float64
		}{{"short_factor", s.ShortFactor}, {"long_factor", s.LongFactor}} {
			if len(l.v) == 0 {
				return fmt.Errorf("rope_scaling.%s is missing for longrope scaling", l.field)
			}
			for i, f := range l.v {
				// The frequency is divided by the factor in float32.
				if f32 := float32(f); !(f32 > 0) || math.IsInf(float64(f32), 0) {
					return fmt.Errorf("rope_scaling.%s[%d] %v must be a positive float32", l.field, i, f)
				}
			}
		}
		if s.OriginalMaxPositionEmbeddings == 1 {
			// The derived attention factor divides by its log.
			return errors.New("rope_scaling.original_max_position_embeddings must be over 1 for longrope scaling")
		}
		return originalMax()
	}
	return fmt.Errorf("rope_scaling type %q is not supported (linear, dynamic, llama3, yarn, longrope)", s.Type)
}

// checkRope refuses rotary settings Rotary cannot use: a rotary dimension
// that is odd or wider than the head, a negative local base, scaling
// parameters out of range, longrope factor lists of another length than
// the rotated pairs, and yarn over a base its correction range cannot be
// computed from (the log of a base of 1 is 0).
func (c Config) checkRope() error {
	if c.RotaryDim < 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0 {
		return fmt.Errorf("config.json: the rotary dimension %d (head_dim times partial_rotary_factor) must be even and at most head_dim %d", c.RotaryDim, c.HeadDim)
	}
	if !(c.LocalRopeTheta >= 0) || math.IsInf(c.LocalRopeTheta, 0) {
		return fmt.Errorf("config.json: the local rope base %v must be positive (or absent)", c.LocalRopeTheta)
	}
	s := c.RopeScaling
	if s == nil {
		return nil
	}
	if err := s.check(); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	half := c.rotaryDim() / 2
	switch s.Type {
	case "factors":
		if len(s.ShortFactor) != half {
			return fmt.Errorf("config.json: rope_scaling.short_factor has %d entries, want %d (one per rotated pair of the %d rotary dimensions)", len(s.ShortFactor), half, c.rotaryDim())
		}
	case "longrope":
		for _, l := range []struct {
			field string
			v     []float64
		}{{"short_factor", s.ShortFactor}, {"long_factor", s.LongFactor}} {
			if len(l.v) != half {
				return fmt.Errorf("config.json: rope_scaling.%s has %d entries, want %d (one per rotated pair of the %d rotary dimensions)", l.field, len(l.v), half, c.rotaryDim())
			}
		}
	case "yarn":
		if !(c.RopeTheta > 1) {
			return fmt.Errorf("config.json: rope_theta %v must be over 1 for yarn scaling", c.RopeTheta)
		}
	}
	return nil
}
