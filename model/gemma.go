package model

// gemma reads GemmaForCausalLM configs: GeGLU MLP (tanh-approximated GELU),
// RMSNorm scaling by (1 + w), embeddings multiplied by sqrt(hidden_size),
// tied embeddings, and head_dim given explicitly (256 for Gemma-2B, which is
// not hidden/heads).
type gemma struct{}

func (gemma) name() string { return "gemma" }

func (gemma) parse(raw hfConfig, c *Config) error {
	c.Activation = "gelu_tanh"
	c.NormPlusOne = true
	c.EmbedScale = true
	c.TieEmbeddings = true
	if err := raw.get("tie_word_embeddings", &c.TieEmbeddings, false); err != nil {
		return err
	}
	// transformers uses hidden_activation when given, else hidden_act; both
	// "gelu" and "gelu_pytorch_tanh" run as the tanh approximation in Gemma.
	if err := checkAct(raw, "hidden_activation", "gelu_pytorch_tanh", "gelu"); err != nil {
		return err
	}
	return checkAct(raw, "hidden_act", "gelu_pytorch_tanh", "gelu")
}
