package model

import "fmt"

// gemma3 reads Gemma3ForCausalLM configs (the text model): Gemma 2's block
// with q/k norms instead of soft-capping, sliding-window layers in a
// pattern (five local to one global in the published models) whose
// rotation has its own base (rope_local_base_freq) and no scaling.
type gemma3 struct{}

func (gemma3) name() string { return "gemma3" }

func (gemma3) parse(raw hfConfig, c *Config) error {
	if err := gemmaCommon(raw, c); err != nil {
		return err
	}
	c.SandwichNorms = true
	c.QKNorm = true
	for _, f := range []struct {
		field string
		dst   *float64
	}{
		{"attn_logit_softcapping", &c.AttnSoftCap}, {"final_logit_softcapping", &c.FinalSoftCap},
		{"query_pre_attn_scalar", &c.QueryPreAttnScalar}, {"rope_local_base_freq", &c.LocalRopeTheta},
	} {
		if err := raw.get(f.field, f.dst, false); err != nil {
			return err
		}
	}
	pattern := 6
	if err := raw.get("sliding_window_pattern", &pattern, false); err != nil {
		return err
	}
	if pattern <= 0 {
		return fmt.Errorf("config.json: field sliding_window_pattern must be positive, is %d", pattern)
	}
	return readLayerWindowsPattern(raw, c, pattern)
}
