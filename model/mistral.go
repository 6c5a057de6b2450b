package model

// mistral reads MistralForCausalLM configs: Llama's block with sliding-window
// attention (sliding_window; null or absent means full attention).
type mistral struct{}

func (mistral) name() string { return "mistral" }

func (mistral) parse(raw hfConfig, c *Config) error {
	c.Activation = "silu"
	if err := raw.get("sliding_window", &c.SlidingWindow, false); err != nil {
		return err
	}
	return checkAct(raw, "hidden_act", "silu")
}
