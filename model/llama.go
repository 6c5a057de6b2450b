package model

import "fmt"

// llama reads LlamaForCausalLM configs (TinyLlama, Llama-2, Llama-3):
// RMSNorm, SwiGLU MLP, rotary embeddings, grouped-query attention.
type llama struct{}

func (llama) name() string { return "llama" }

func (llama) parse(raw hfConfig, c *Config) error {
	c.Activation = "silu"
	return checkAct(raw, "hidden_act", "silu")
}

// checkAct refuses an activation the architecture's forward pass does not implement.
func checkAct(raw hfConfig, field string, want ...string) error {
	var act string
	if err := raw.get(field, &act, false); err != nil || act == "" {
		return err
	}
	for _, w := range want {
		if act == w {
			return nil
		}
	}
	return fmt.Errorf("config.json: field %s = %q is not supported for this architecture (want %v)", field, act, want)
}
