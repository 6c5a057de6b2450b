package model

// gemma reads GemmaForCausalLM configs: GeGLU MLP (tanh-approximated GELU),
// RMSNorm scaling by (1 + w), embeddings multiplied by sqrt(hidden_size),
// tied embeddings, and head_dim given explicitly (256 for Gemma-2B, which is
// not hidden/heads).
type gemma struct{}

func (gemma) name() string { return "gemma" }

func (gemma) parse(raw hfConfig, c *Config) error { return gemmaCommon(raw, c) }
