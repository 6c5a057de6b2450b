package model

// bitnet reads BitNetForCausalLM configs (microsoft/bitnet-b1.58-2B-4T):
// Llama's attention with attn_sub_norm before o_proj, a squared-ReLU gated
// MLP with ffn_sub_norm before down_proj, and ternary weights whose
// activations are quantized to int8 per token.
type bitnet struct{}

func (bitnet) name() string { return "bitnet" }

func (bitnet) parse(raw hfConfig, c *Config) error {
	c.Activation = "relu2"
	c.SubNorms = true
	return checkAct(raw, "hidden_act", "relu2")
}
