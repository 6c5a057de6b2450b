package model

// gemma2 reads Gemma2ForCausalLM configs: Gemma's GeGLU block with a norm
// before and after both attention and the MLP, attention scores and the
// final logits soft-capped (cap * tanh(x / cap)), the attention scale
// from query_pre_attn_scalar, and sliding-window attention on every other
// layer (layer_types; the even layers in configs without it).
type gemma2 struct{}

func (gemma2) name() string { return "gemma2" }

func (gemma2) parse(raw hfConfig, c *Config) error {
	if err := gemmaCommon(raw, c); err != nil {
		return err
	}
	c.SandwichNorms = true
	for _, f := range []struct {
		field string
		dst   *float64
	}{
		{"attn_logit_softcapping", &c.AttnSoftCap}, {"final_logit_softcapping", &c.FinalSoftCap},
		{"query_pre_attn_scalar", &c.QueryPreAttnScalar},
	} {
		if err := raw.get(f.field, f.dst, false); err != nil {
			return err
		}
	}
	return readLayerWindowsPattern(raw, c, 2)
}

// gemmaCommon reads what every Gemma generation shares: GeGLU with the
// tanh GELU, gains applied as 1 + w, embeddings scaled by sqrt(hidden),
// tied embeddings by default.
func gemmaCommon(raw hfConfig, c *Config) error {
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
