package model

import (
	"fmt"
	"math"
	"slices"
)

// readLayerWindows reads which layers attend through a sliding window:
// layer_types ("sliding_attention" or "full_attention" per layer, as
// transformers 5 writes it), else Qwen2's use_sliding_window with
// max_window_layers (the layers from that index on slide). Without either
// no layer slides.
func readLayerWindows(raw hfConfig, c *Config) error {
	var use bool
	if err := raw.get("use_sliding_window", &use, false); err != nil {
		return err
	}
	from := c.NumLayers
	if err := raw.get("max_window_layers", &from, false); err != nil {
		return err
	}
	return layerWindows(raw, c, func(l, window int) bool { return use && window > 0 && l >= from })
}

// readLayerWindowsPattern is readLayerWindows for Gemma: without
// layer_types, every pattern-th layer (1-based) is global and the others
// slide, as transformers derives it.
func readLayerWindowsPattern(raw hfConfig, c *Config, pattern int) error {
	return layerWindows(raw, c, func(l, _ int) bool { return (l+1)%pattern != 0 })
}

// layerWindows reads sliding_window and layer_types into LayerWindows;
// without layer_types, slides says which layers slide.
func layerWindows(raw hfConfig, c *Config, slides func(layer, window int) bool) error {
	var window int
	if err := raw.get("sliding_window", &window, false); err != nil {
		return err
	}
	var types []string
	if err := raw.get("layer_types", &types, false); err != nil {
		return err
	}
	if len(types) == 0 {
		for l := range c.NumLayers {
			if slides(l, window) {
				types = append(types, "sliding_attention")
			} else {
				types = append(types, "full_attention")
			}
		}
	}
	return setLayerWindows(c, types, window)
}

// setLayerWindows turns layer types into LayerWindows (nil when no layer
// slides).
func setLayerWindows(c *Config, types []string, window int) error {
	if len(types) != c.NumLayers {
		return fmt.Errorf("config.json: field layer_types has %d entries for %d layers", len(types), c.NumLayers)
	}
	for l, t := range types {
		if t != "sliding_attention" && t != "full_attention" {
			return fmt.Errorf("config.json: field layer_types[%d] = %q is not sliding_attention or full_attention", l, t)
		}
	}
	if !slices.Contains(types, "sliding_attention") {
		return nil
	}
	if window <= 0 || window > maxPositions {
		return fmt.Errorf("config.json: field sliding_window = %d must be in [1, %d] for sliding layers", window, maxPositions)
	}
	c.LayerWindows = make([]int, c.NumLayers)
	for l, t := range types {
		if t == "sliding_attention" {
			c.LayerWindows[l] = window
		}
	}
	return nil
}

// noAttentionBias refuses configs with biases on every attention product
// (attention_bias), which the architecture's forward pass does not apply.
func noAttentionBias(raw hfConfig) error {
	var bias bool
	if err := raw.get("attention_bias", &bias, false); err != nil {
		return err
	}
	if bias {
		return fmt.Errorf("config.json: field attention_bias = true is not supported for this architecture")
	}
	return nil
}

// Window is layer's sliding window (0: it attends to every position).
func (c Config) Window(layer int) int {
	if len(c.LayerWindows) > 0 {
		if layer < len(c.LayerWindows) {
			return c.LayerWindows[layer]
		}
		return 0
	}
	return c.SlidingWindow
}

// AttnScale is the factor of q·k: 1/sqrt(query_pre_attn_scalar) where the
// model sets it (Gemma 2, 3), else 1/sqrt(head_dim).
func (c Config) AttnScale() float32 {
	d := float64(c.HeadDim)
	if c.QueryPreAttnScalar > 0 {
		d = c.QueryPreAttnScalar
	}
	return float32(1 / math.Sqrt(d))
}
