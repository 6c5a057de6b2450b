package model

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// The references below are transformers' formulas written out in float64,
// independently of rope.go's float32 steps: Rotary must agree with them to
// float32 rounding (the exponent's and each operation's), far inside what
// any formula mistake would move.

// refPowers is theta^(2i/dim) for each rotated pair.
func refPowers(theta float64, dim int) []float64 {
	p := make([]float64, dim/2)
	for i := range p {
		p[i] = math.Pow(theta, float64(2*i)/float64(dim))
	}
	return p
}

// refDefault is 1 / theta^(2i/dim).
func refDefault(theta float64, dim int) []float64 {
	inv := refPowers(theta, dim)
	for i, p := range inv {
		inv[i] = 1 / p
	}
	return inv
}

// refYarn is YaRN: the correction range from the rotations beta_fast and
// beta_slow over the original length, a linear ramp across it from the
// unscaled frequency (below) to the frequency over factor (above).
func refYarn(theta float64, dim int, factor float64, orig int, betaFast, betaSlow float64, truncate bool) []float64 {
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(orig)/(2*math.Pi*rot)) / (2 * math.Log(theta))
	}
	low, high := corr(betaFast), corr(betaSlow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	inv := refPowers(theta, dim)
	for i, p := range inv {
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		inv[i] = ramp/(factor*p) + (1-ramp)/p
	}
	return inv
}

// refLlama3 is Llama 3.1's blend by wavelength.
func refLlama3(theta float64, dim int, factor, low, high float64, orig int) []float64 {
	inv := refDefault(theta, dim)
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		switch {
		case wavelen < float64(orig)/high:
		case wavelen > float64(orig)/low:
			inv[i] = f / factor
		default:
			s := (float64(orig)/wavelen - low) / (high - low)
			inv[i] = (1-s)*f/factor + s*f
		}
	}
	return inv
}

// refLongrope divides each pair's frequency by its factor.
func refLongrope(theta float64, dim int, ext []float64) []float64 {
	inv := refPowers(theta, dim)
	for i, p := range inv {
		inv[i] = 1 / (ext[i] * p)
	}
	return inv
}

// ramp is n factors from a to b, distinct per pair so that a swapped or
// shifted list shows.
func ramp(n int, a, b float64) []float64 {
	f := make([]float64, n)
	for i := range f {
		f[i] = a + (b-a)*float64(i)/float64(max(n-1, 1))
	}
	return f
}

func TestRotary(t *testing.T) {
	base := Config{HeadDim: 64, RopeTheta: 10000, MaxPositions: 128}
	with := func(edit func(c *Config)) Config {
		c := base
		edit(&c)
		return c
	}
	no := false
	short, long := ramp(32, 1, 1.5), ramp(32, 1, 6)
	tests := []struct {
		name       string
		cfg        Config
		layer, ctx int
		want       []float64 // nil: the layer does not rotate
		factor     float64
	}{
		{"default", base, 0, 128, refDefault(10000, 64), 1},
		{"dynamic is the default within max positions", with(func(c *Config) { c.RopeScaling = &RopeScaling{Type: "dynamic", Factor: 4} }),
			0, 128, refDefault(10000, 64), 1},
		{"linear", with(func(c *Config) { c.RopeScaling = &RopeScaling{Type: "linear", Factor: 2} }),
			0, 128, func() []float64 {
				r := refDefault(10000, 64)
				for i := range r {
					r[i] /= 2
				}
				return r
			}(), 1},
		{"llama3", with(func(c *Config) {
			c.HeadDim, c.RopeTheta = 128, 500000
			c.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
		}), 0, 128, refLlama3(500000, 128, 8, 1, 4, 8192), 1},
		// Factor 4 over 32 positions, betas 32 and 1: the ramp runs over
		// pairs 0 to 6 (correction dimensions -6.4 and 5.7, floored and
		// ceiled, clamped at 0).
		{"yarn factor 4 original 32", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32}
		}), 0, 128, refYarn(10000, 64, 4, 32, 32, 1, true), 0.1*math.Log(4) + 1},
		{"yarn untruncated, own betas, mscale over mscale_all_dim", with(func(c *Config) {
			c.RopeTheta = 1e6
			c.RopeScaling = &RopeScaling{Type: "yarn", Factor: 8, OriginalMaxPositionEmbeddings: 64, BetaFast: 16, BetaSlow: 2, Mscale: 1, MscaleAllDim: 0.5, Truncate: &no}
		}), 0, 128, refYarn(1e6, 64, 8, 64, 16, 2, false), (0.1*math.Log(8) + 1) / (0.05*math.Log(8) + 1)},
		// Equal betas, untruncated: the range collapses to one point (0.84)
		// and transformers widens it by 0.001 into a step.
		{"yarn collapsed range", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32, BetaFast: 4, BetaSlow: 4, Truncate: &no}
		}), 0, 128, refYarn(10000, 64, 4, 32, 4, 4, false), 0.1*math.Log(4) + 1},
		{"yarn attention_factor given", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32, AttentionFactor: 1.5, Mscale: 1, MscaleAllDim: 0.5}
		}), 0, 128, refYarn(10000, 64, 4, 32, 32, 1, true), 1.5},
		{"yarn factor 1 keeps attention", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "yarn", Factor: 1, OriginalMaxPositionEmbeddings: 128}
		}), 0, 128, refDefault(10000, 64), 1},
		{"longrope short within the original length", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "longrope", Factor: 4, OriginalMaxPositionEmbeddings: 32, ShortFactor: short, LongFactor: long}
		}), 0, 32, refLongrope(10000, 64, short), math.Sqrt(1 + math.Log(4)/math.Log(32))},
		{"longrope long past it", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "longrope", Factor: 4, OriginalMaxPositionEmbeddings: 32, ShortFactor: short, LongFactor: long}
		}), 0, 33, refLongrope(10000, 64, long), math.Sqrt(1 + math.Log(4)/math.Log(32))},
		{"longrope attention_factor given", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "longrope", Factor: 4, OriginalMaxPositionEmbeddings: 32, AttentionFactor: 1.25, ShortFactor: short, LongFactor: long}
		}), 0, 128, refLongrope(10000, 64, long), 1.25},
		{"longrope factor 1 keeps attention", with(func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "longrope", Factor: 1, OriginalMaxPositionEmbeddings: 128, ShortFactor: short, LongFactor: long}
		}), 0, 128, refLongrope(10000, 64, short), 1},
		// Gemma 3: sliding-window layers rotate with their own base and no
		// scaling; global layers with the global base, scaled.
		{"local layer", with(func(c *Config) {
			c.RopeTheta, c.LocalRopeTheta, c.LayerWindows = 1e6, 10000, []int{0, 512}
			c.RopeScaling = &RopeScaling{Type: "linear", Factor: 8}
		}), 1, 128, refDefault(10000, 64), 1},
		{"global layer beside local ones", with(func(c *Config) {
			c.RopeTheta, c.LocalRopeTheta, c.LayerWindows = 1e6, 10000, []int{0, 512}
			c.RopeScaling = &RopeScaling{Type: "linear", Factor: 8}
		}), 0, 128, func() []float64 {
			r := refDefault(1e6, 64)
			for i := range r {
				r[i] /= 8
			}
			return r
		}(), 1},
		{"window without a local base is global", with(func(c *Config) { c.LayerWindows = []int{512} }), 0, 128, refDefault(10000, 64), 1},
		{"no-rope layer", with(func(c *Config) { c.NoRopeLayers = []int{1, 3} }), 3, 128, nil, 0},
		{"beside a no-rope layer", with(func(c *Config) { c.NoRopeLayers = []int{1, 3} }), 2, 128, refDefault(10000, 64), 1},
		{"rotary dim 48 of 64", with(func(c *Config) { c.RotaryDim = 48 }), 0, 128, refDefault(10000, 48), 1},
		{"rotary dim 48 of 64, longrope", with(func(c *Config) {
			c.RotaryDim = 48
			c.RopeScaling = &RopeScaling{Type: "longrope", Factor: 4, OriginalMaxPositionEmbeddings: 32, ShortFactor: ramp(24, 1, 2), LongFactor: ramp(24, 2, 8)}
		}), 0, 128, refLongrope(10000, 48, ramp(24, 2, 8)), math.Sqrt(1 + math.Log(4)/math.Log(32))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.checkRope(); err != nil {
				t.Fatalf("test config refused: %v", err)
			}
			r := tc.cfg.Rotary(tc.layer, tc.ctx)
			if tc.want == nil {
				if r.InvFreq != nil || r.Factor != 0 {
					t.Fatalf("got %+v, want no rotation", r)
				}
				return
			}
			if len(r.InvFreq) != len(tc.want) {
				t.Fatalf("%d frequencies, want %d", len(r.InvFreq), len(tc.want))
			}
			for i, w := range tc.want {
				if got := float64(r.InvFreq[i]); math.Abs(got-w) > 2e-6*w {
					t.Errorf("pair %d: %g, want %g (relative error %.2g)", i, got, w, math.Abs(got-w)/w)
				}
			}
			if math.Abs(float64(r.Factor)-tc.factor) > 1e-6 {
				t.Errorf("factor %v, want %v", r.Factor, tc.factor)
			}
		})
	}
}

// TestYarnBlend pins the yarn blend at pairs worked by hand (factor 4,
// original 32, dim 64, base 10000: the ramp from pair 0 to pair 6): pure
// extrapolation at pair 0, half and half at pair 3, interpolation from
// pair 6 on.
func TestYarnBlend(t *testing.T) {
	c := Config{HeadDim: 64, RopeTheta: 10000, MaxPositions: 128, RopeScaling: &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32}}
	inv := c.Rotary(0, 128).InvFreq
	p := func(i int) float64 { return math.Pow(10000, float64(2*i)/64) }
	for _, w := range []struct {
		i    int
		want float64
	}{{0, 1}, {3, (0.5/4 + 0.5) / p(3)}, {6, 1 / (4 * p(6))}, {31, 1 / (4 * p(31))}} {
		if got := float64(inv[w.i]); math.Abs(got-w.want) > 1e-6*w.want {
			t.Errorf("pair %d: %g, want %g", w.i, got, w.want)
		}
	}
}

func TestParseRopeScaling(t *testing.T) {
	llama := func(extra string) string {
		return `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10` + extra + `}`
	}
	yes, no := true, false
	short, long := ramp(8, 1, 1.5), ramp(8, 1, 6)
	list := func(f []float64) string {
		b, _ := json.Marshal(f)
		return string(b)
	}
	tests := []struct {
		name  string
		json  string
		theta float64
		want  *RopeScaling
	}{
		// Qwen3: the explicit factor holds, whatever max_position_embeddings says.
		{"yarn, explicit factor", llama(`,"max_position_embeddings":40960,"rope_theta":1000000,"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}`),
			1e6, &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32768}},
		{"yarn without an original length takes max_position_embeddings", llama(`,"max_position_embeddings":4096,"rope_scaling":{"type":"yarn","factor":2}`),
			10000, &RopeScaling{Type: "yarn", Factor: 2, OriginalMaxPositionEmbeddings: 4096}},
		{"yarn without a factor takes the ratio of the lengths", llama(`,"max_position_embeddings":8192,"rope_scaling":{"type":"yarn","original_max_position_embeddings":2048}`),
			10000, &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 2048}},
		{"yarn, every parameter", llama(`,"max_position_embeddings":163840,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":0.707,"mscale_all_dim":0.707,"attention_factor":1.2,"truncate":false}`),
			10000, &RopeScaling{Type: "yarn", Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, Mscale: 0.707, MscaleAllDim: 0.707, AttentionFactor: 1.2, Truncate: &no}},
		{"yarn truncate true", llama(`,"rope_scaling":{"type":"yarn","factor":2,"truncate":true}`),
			10000, &RopeScaling{Type: "yarn", Factor: 2, OriginalMaxPositionEmbeddings: 2048, Truncate: &yes}},
		{"transformers 5 yarn in rope_parameters", llama(`,"max_position_embeddings":131072,"rope_parameters":{"rope_type":"yarn","rope_theta":150000,"factor":32,"beta_fast":32,"beta_slow":1,"truncate":false,"original_max_position_embeddings":4096}`),
			150000, &RopeScaling{Type: "yarn", Factor: 32, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, Truncate: &no}},
		{"rope_parameters' theta over the top-level one", llama(`,"rope_theta":10000,"rope_parameters":{"rope_type":"default","rope_theta":500000}`), 500000, nil},
		// Phi-3: the original length at the top level, no factor: the ratio.
		{"phi-3 longrope", llama(`,"max_position_embeddings":131072,"original_max_position_embeddings":4096,"rope_scaling":{"type":"longrope","short_factor":` + list(short) + `,"long_factor":` + list(long) + `}`),
			10000, &RopeScaling{Type: "longrope", Factor: 32, OriginalMaxPositionEmbeddings: 4096, ShortFactor: short, LongFactor: long}},
		{"the top-level original length first", llama(`,"max_position_embeddings":131072,"original_max_position_embeddings":4096,"rope_scaling":{"type":"longrope","original_max_position_embeddings":8192,"short_factor":` + list(short) + `,"long_factor":` + list(long) + `}`),
			10000, &RopeScaling{Type: "longrope", Factor: 32, OriginalMaxPositionEmbeddings: 4096, ShortFactor: short, LongFactor: long}},
		{"su is longrope, explicit factor and attention", llama(`,"max_position_embeddings":131072,"rope_scaling":{"type":"su","factor":16,"attention_factor":1.1,"original_max_position_embeddings":8192,"short_factor":` + list(short) + `,"long_factor":` + list(long) + `}`),
			10000, &RopeScaling{Type: "longrope", Factor: 16, AttentionFactor: 1.1, OriginalMaxPositionEmbeddings: 8192, ShortFactor: short, LongFactor: long}},
		{"longrope in rope_parameters", llama(`,"max_position_embeddings":131072,"rope_parameters":{"rope_type":"longrope","rope_theta":10000,"original_max_position_embeddings":4096,"short_factor":` + list(short) + `,"long_factor":` + list(long) + `}`),
			10000, &RopeScaling{Type: "longrope", Factor: 32, OriginalMaxPositionEmbeddings: 4096, ShortFactor: short, LongFactor: long}},
		{"llama3 without an original length", llama(`,"max_position_embeddings":8192,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4}`),
			10000, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}},
		{"null and empty scaling", llama(`,"rope_scaling":null,"rope_parameters":{}`), 10000, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseHFConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if c.RopeTheta != tc.theta || !reflect.DeepEqual(c.RopeScaling, tc.want) {
				t.Fatalf("theta %v scaling %+v, want %v %+v", c.RopeTheta, c.RopeScaling, tc.theta, tc.want)
			}
			// manifest.json keeps the resolved scaling as it is.
			c.Activation = "silu"
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseConfig(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.RopeScaling, c.RopeScaling) || !reflect.DeepEqual(back.Rotary(0, 64), c.Rotary(0, 64)) {
				t.Errorf("round trip: %+v, want %+v", back.RopeScaling, c.RopeScaling)
			}
		})
	}
}

// TestParseNestedRopeParameters reads transformers 5's per-layer-type
// rope_parameters (Gemma 3): the full-attention entry is the global
// rotation, the sliding-attention entry's base the local one.
func TestParseNestedRopeParameters(t *testing.T) {
	c, err := ParseHFConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,` +
		`"rope_parameters":{"full_attention":{"rope_type":"linear","factor":8.0,"rope_theta":1000000.0},"sliding_attention":{"rope_type":"default","rope_theta":10000.0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 1e6 || c.LocalRopeTheta != 10000 || !reflect.DeepEqual(c.RopeScaling, &RopeScaling{Type: "linear", Factor: 8}) {
		t.Errorf("theta %v local %v scaling %+v", c.RopeTheta, c.LocalRopeTheta, c.RopeScaling)
	}
}

func TestParseRopeScalingErrors(t *testing.T) {
	llama := func(extra string) string {
		return `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"max_position_embeddings":8192` + extra + `}`
	}
	eight := `[1,1,1,1,1,1,1,1]`
	tests := []struct{ json, want string }{
		{llama(`,"rope_scaling":{"type":"longrope","original_max_position_embeddings":4096,"short_factor":[1,1,1],"long_factor":` + eight + `}`),
			"rope_scaling.short_factor has 3 entries, want 8"},
		{llama(`,"rope_scaling":{"type":"longrope","original_max_position_embeddings":4096,"short_factor":` + eight + `,"long_factor":[1,1,1,1,1,1,1,1,1]}`),
			"rope_scaling.long_factor has 9 entries, want 8"},
		{llama(`,"rope_scaling":{"type":"longrope","short_factor":` + eight + `}`), "rope_scaling.long_factor is missing"},
		{llama(`,"rope_scaling":{"type":"longrope","short_factor":[1,1,"x",1,1,1,1,1],"long_factor":` + eight + `}`), "field rope_scaling.short_factor[2] must be a number"},
		{llama(`,"rope_scaling":{"type":"longrope","short_factor":3,"long_factor":` + eight + `}`), "field rope_scaling.short_factor must be a list of numbers"},
		{llama(`,"rope_scaling":{"type":"longrope","short_factor":[1,1,0,1,1,1,1,1],"long_factor":` + eight + `}`), "rope_scaling.short_factor[2] 0 must be a positive float32"},
		{llama(`,"rope_scaling":{"type":"longrope","short_factor":` + eight + `,"long_factor":[1,1,1,1,1,1,1,1e300]}`), "rope_scaling.long_factor[7] 1e+300 must be a positive float32"},
		{llama(`,"rope_parameters":{"rope_type":"yarn","factor":4,"beta_fast":"fast"}`), "field rope_parameters.beta_fast must be a number"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":4,"beta_slow":-1}`), "rope_scaling.beta_slow -1 must be positive"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":4,"mscale":-1,"mscale_all_dim":1}`), "rope_scaling.mscale -1 must be positive"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":4,"attention_factor":0}`), "field rope_scaling.attention_factor must be positive"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":4,"truncate":"no"}`), "field rope_scaling.truncate must be true or false"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":-4}`), "rope_scaling.factor -4 must be positive"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":4,"original_max_position_embeddings":1.5}`), "field rope_scaling.original_max_position_embeddings must be an integer"},
		{llama(`,"rope_scaling":{"type":"yarn","factor":4,"original_max_position_embeddings":0}`), "field rope_scaling.original_max_position_embeddings must be an integer"},
		{llama(`,"original_max_position_embeddings":"long","rope_scaling":{"type":"yarn","factor":4}`), "field original_max_position_embeddings"},
		{llama(`,"original_max_position_embeddings":-1,"rope_scaling":{"type":"yarn","factor":4}`), "field original_max_position_embeddings must be positive"},
		{llama(`,"rope_theta":1,"rope_scaling":{"type":"yarn","factor":4}`), "rope_theta 1 must be over 1 for yarn"},
		{llama(`,"rope_scaling":{"rope_type":7}`), "field rope_scaling.rope_type must be a string"},
		{llama(`,"rope_scaling":{"rope_type":"linear","factor":"2"}`), "field rope_scaling.factor must be a number"},
		{llama(`,"rope_parameters":{"full_attention":3}`), "field rope_parameters.full_attention must be an object"},
		{llama(`,"rope_parameters":{"sliding_attention":{"rope_type":"yarn","factor":2}}`), "field rope_parameters.sliding_attention.rope_type \"yarn\": scaled sliding-window layers are not supported"},
		{llama(`,"rope_parameters":{"full_attention":{"rope_type":"yarn","factor":2,"beta_fast":"x"}}`), "field rope_parameters.full_attention.beta_fast must be a number"},
	}
	for _, tc := range tests {
		_, err := ParseHFConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.json, err, tc.want)
		}
	}
}

// TestCheckRope covers what the architecture parsers set after the
// scaling is read (the rotary dimension, the local base), which only Check
// can hold the scaling against.
func TestCheckRope(t *testing.T) {
	base := Config{HiddenSize: 256, IntermediateSize: 512, NumLayers: 2, NumHeads: 4, NumKVHeads: 4, HeadDim: 64, VocabSize: 10,
		MaxPositions: 4096, RMSNormEps: 1e-5, RopeTheta: 10000}
	longrope := func(n int) *RopeScaling {
		return &RopeScaling{Type: "longrope", Factor: 4, OriginalMaxPositionEmbeddings: 1024, ShortFactor: ramp(n, 1, 2), LongFactor: ramp(n, 1, 2)}
	}
	tests := []struct {
		name string
		edit func(c *Config)
		want string // "": accepted
	}{
		{"partial rotary, longrope of its pairs", func(c *Config) { c.RotaryDim, c.RopeScaling = 48, longrope(24) }, ""},
		{"partial rotary, longrope of the head's pairs", func(c *Config) { c.RotaryDim, c.RopeScaling = 48, longrope(32) },
			"rope_scaling.short_factor has 32 entries, want 24 (one per rotated pair of the 48 rotary dimensions)"},
		{"odd rotary dim", func(c *Config) { c.RotaryDim = 47 }, "rotary dimension 47"},
		{"rotary dim over the head", func(c *Config) { c.RotaryDim = 66 }, "rotary dimension 66"},
		{"negative local base", func(c *Config) { c.LocalRopeTheta = -1 }, "local rope base -1"},
		{"unknown type", func(c *Config) { c.RopeScaling = &RopeScaling{Type: "ntk", Factor: 2} }, `rope_scaling type "ntk" is not supported`},
		{"longrope over one position", func(c *Config) {
			c.RopeScaling = longrope(32)
			c.RopeScaling.OriginalMaxPositionEmbeddings = 1
		}, "original_max_position_embeddings must be over 1"},
		{"yarn without an original length", func(c *Config) { c.RopeScaling = &RopeScaling{Type: "yarn", Factor: 2} }, "original_max_position_embeddings 0 is outside"},
	}
	for _, tc := range tests {
		c := base
		tc.edit(&c)
		err := c.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// FuzzRotary feeds manifest architecture blocks: every layer of an accepted
// one must rotate by finite, non-negative frequencies and a positive finite
// factor, at any session length, without panicking.
func FuzzRotary(f *testing.F) {
	m := `"arch":"llama","hidden_size":8,"intermediate_size":16,"num_layers":2,"num_heads":2,"num_kv_heads":1,"head_dim":8,"vocab_size":10,"max_positions":64,"rms_norm_eps":1e-5,"rope_theta":10000,"activation":"silu","tie_embeddings":true`
	f.Add([]byte(`{`+m+`,"rope_scaling":{"type":"yarn","factor":4,"original_max_position_embeddings":16,"beta_fast":16,"beta_slow":2,"mscale":1,"mscale_all_dim":0.5,"truncate":false}}`), 64)
	f.Add([]byte(`{`+m+`,"rotary_dim":4,"local_rope_theta":10000,"layer_windows":[4,0],"no_rope_layers":[1],"rope_scaling":{"type":"longrope","factor":4,"original_max_position_embeddings":16,"short_factor":[1,1.5],"long_factor":[2,8]}}`), 17)
	f.Add([]byte(`{`+m+`,"rope_scaling":{"type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":16}}`), 1)
	f.Fuzz(func(t *testing.T, data []byte, ctx int) {
		c, err := ParseConfig(data)
		if err != nil || c.HeadDim > 4096 || c.NumLayers > 64 {
			return // refused, or valid but large: skip the allocations
		}
		for l := range c.NumLayers {
			r := c.Rotary(l, ctx)
			if r.InvFreq == nil {
				continue
			}
			if len(r.InvFreq) != c.rotaryDim()/2 {
				t.Fatalf("layer %d: %d frequencies for rotary dim %d", l, len(r.InvFreq), c.rotaryDim())
			}
			for i, v := range r.InvFreq {
				if !(v >= 0) || math.IsInf(float64(v), 0) {
					t.Fatalf("layer %d: inverse frequency %d is %v", l, i, v)
				}
			}
			if !(r.Factor > 0) || math.IsInf(float64(r.Factor), 0) {
				t.Fatalf("layer %d: factor %v", l, r.Factor)
			}
		}
	})
}
