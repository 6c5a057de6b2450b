package model

// qwen2 reads Qwen2ForCausalLM configs (Qwen2, Qwen2.5): Llama's block with
// biases on q, k and v, and sliding-window attention on the layers
// layer_types names (or, in older configs, the layers from
// max_window_layers on, where use_sliding_window is set).
type qwen2 struct{}

func (qwen2) name() string { return "qwen2" }

func (qwen2) parse(raw hfConfig, c *Config) error {
	c.Activation = "silu"
	c.QKVBias = true
	if err := readLayerWindows(raw, c); err != nil {
		return err
	}
	return checkAct(raw, "hidden_act", "silu")
}
