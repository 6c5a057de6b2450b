package model

// qwen3 reads Qwen3ForCausalLM configs: Llama's block with an explicit
// head_dim and an RMSNorm of each head of q and k before the rotation
// (q_norm, k_norm), and Qwen2's optional sliding windows.
type qwen3 struct{}

func (qwen3) name() string { return "qwen3" }

func (qwen3) parse(raw hfConfig, c *Config) error {
	c.Activation = "silu"
	c.QKNorm = true
	if err := noAttentionBias(raw); err != nil {
		return err
	}
	if err := readLayerWindows(raw, c); err != nil {
		return err
	}
	return checkAct(raw, "hidden_act", "silu")
}
