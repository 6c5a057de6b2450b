package model

import "fmt"

// smollm3 reads SmolLM3ForCausalLM configs: Llama's block where the layers
// no_rope_layers marks with 0 take no rotary embedding.
type smollm3 struct{}

func (smollm3) name() string { return "smollm3" }

func (smollm3) parse(raw hfConfig, c *Config) error {
	c.Activation = "silu"
	var useRope []int
	if err := raw.get("no_rope_layers", &useRope, false); err != nil {
		return err
	}
	if len(useRope) > 0 && len(useRope) != c.NumLayers {
		return fmt.Errorf("config.json: field no_rope_layers has %d entries for %d layers", len(useRope), c.NumLayers)
	}
	for l, u := range useRope {
		if u == 0 {
			c.NoRopeLayers = append(c.NoRopeLayers, l)
		}
	}
	if err := readLayerWindows(raw, c); err != nil {
		return err
	}
	if err := noAttentionBias(raw); err != nil {
		return err
	}
	return checkAct(raw, "hidden_act", "silu")
}
