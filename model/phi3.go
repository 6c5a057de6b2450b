package model

import "fmt"

// phi3 reads Phi3ForCausalLM configs (Phi-3, Phi-3.5, Phi-4-mini): Llama's
// block with q, k and v stored as one qkv_proj and gate and up as one
// gate_up_proj (split at load), longrope scaling, a partial rotation where
// partial_rotary_factor is below 1, and an optional sliding window.
type phi3 struct{}

func (phi3) name() string { return "phi3" }

func (phi3) parse(raw hfConfig, c *Config) error {
	c.Activation = "silu"
	if err := raw.get("sliding_window", &c.SlidingWindow, false); err != nil {
		return err
	}
	if c.SlidingWindow >= c.MaxPositions {
		c.SlidingWindow = 0 // a window past every position is none
	}
	partial := 1.0
	if err := raw.get("partial_rotary_factor", &partial, false); err != nil {
		return err
	}
	if !(partial > 0 && partial <= 1) {
		return fmt.Errorf("config.json: field partial_rotary_factor = %v is outside (0, 1]", partial)
	}
	if partial < 1 {
		c.RotaryDim = int(float64(c.HeadDim) * partial)
	}
	if err := noAttentionBias(raw); err != nil {
		return err
	}
	return checkAct(raw, "hidden_act", "silu")
}
