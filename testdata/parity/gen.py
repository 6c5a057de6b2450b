"""Reference logits from HuggingFace transformers for lowbit's parity tests.

Run on a machine with torch and transformers (float32, CPU math is fine):

    python3 gen.py OUTDIR [STORIES_DIR]

For every model below it writes OUTDIR/<name>.json (the config.json it used,
the token ids, the greedy continuation) and OUTDIR/<name>.f32 (little-endian
float32 logits, [len(tokens), vocab], for every position of the tokens).

Random models use the exact hidden/intermediate/head/kv/head_dim/rope/eps/
window settings of the named checkpoints with fewer layers and a small vocab.
Their weights are not stored: every tensor is rebuilt bit for bit from its
name by the generator below, which model/parity_test.go implements again in Go:

    key  = FNV-1a 64 of the tensor name (UTF-8)
    z_i  = splitmix64 finalizer of key + (i+1) * 0x9E3779B97F4A7C15 (mod 2^64),
           i = 0 .. numel-1 over the row-major tensor
    u_i  = (z_i >> 40) * 2^-24                  (exact in float32, in [0, 1))
    v_i  = 2*u_i - 1                             (exact, in [-1, 1))
    1-D tensors (norm gains):  w = 1 + float32(0.1)*v     (float32 arithmetic)
    2-D tensors:               w = v * float32(1/sqrt(cols))

stories260K uses its real weights (STORIES_DIR/model.safetensors).
"""

import json
import math
import os
import sys

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def weights(name, shape):
    n = int(np.prod(shape))
    out = np.empty(n, dtype=np.float32)
    key = np.uint64(fnv1a64(name))
    step = 1 << 24
    with np.errstate(over="ignore"):
        for lo in range(0, n, step):
            i = np.arange(lo + 1, min(lo + step, n) + 1, dtype=np.uint64)
            z = key + i * GOLDEN
            z = (z ^ (z >> np.uint64(30))) * M1
            z = (z ^ (z >> np.uint64(27))) * M2
            z = z ^ (z >> np.uint64(31))
            u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
            out[lo : lo + len(i)] = u * np.float32(2) - np.float32(1)
    if len(shape) == 1:
        out = np.float32(0.1) * out + np.float32(1)
    else:
        out = out * np.float32(1 / math.sqrt(shape[-1]))
    return out.reshape(shape)


def base(arch, model_type, **kw):
    c = {
        "architectures": [arch],
        "model_type": model_type,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    c.update(kw)
    return c


VOCAB = 320

MODELS = {
    # TinyLlama/TinyLlama-1.1B-Chat-v1.0, 2 of 22 layers.
    "tinyllama": base("LlamaForCausalLM", "llama", hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4,
                      vocab_size=VOCAB, max_position_embeddings=2048, rms_norm_eps=1e-5,
                      rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False),
    # mistralai/Mistral-7B-v0.1, 1 of 32 layers.
    "mistral": base("MistralForCausalLM", "mistral", hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=128, vocab_size=VOCAB, max_position_embeddings=32768,
                    rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
                    hidden_act="silu", tie_word_embeddings=False),
    # A small Mistral whose window (5) is shorter than the prompt, so the
    # sliding window is exercised.
    "mistral_window": base("MistralForCausalLM", "mistral", hidden_size=128, intermediate_size=256,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=32, vocab_size=VOCAB, max_position_embeddings=512,
                           rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=5,
                           hidden_act="silu", tie_word_embeddings=False),
    # google/gemma-2b, 1 of 18 layers.
    "gemma": base("GemmaForCausalLM", "gemma", hidden_size=2048, intermediate_size=16384,
                  num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=1,
                  head_dim=256, vocab_size=VOCAB, max_position_embeddings=8192,
                  rms_norm_eps=1e-6, rope_theta=10000.0, hidden_act="gelu_pytorch_tanh",
                  hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                  bos_token_id=2, eos_token_id=1, pad_token_id=0),
    # microsoft/bitnet-b1.58-2B-4T (its bf16 master weights' architecture), 2 of 30 layers.
    "bitnet": base("BitNetForCausalLM", "bitnet", hidden_size=2560, intermediate_size=6912,
                   num_hidden_layers=2, num_attention_heads=20, num_key_value_heads=5,
                   vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-5,
                   rope_theta=500000.0, hidden_act="relu2", tie_word_embeddings=True),
    # Llama-3.1-style rope scaling on a small model.
    "llama3_rope": base("LlamaForCausalLM", "llama", hidden_size=256, intermediate_size=512,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        vocab_size=VOCAB, max_position_embeddings=131072, rms_norm_eps=1e-5,
                        rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=False,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}),
    # Linear rope scaling on a small model.
    "llama_linear_rope": base("LlamaForCausalLM", "llama", hidden_size=128, intermediate_size=256,
                              num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                              vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-5,
                              rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=True,
                              rope_scaling={"type": "linear", "factor": 4.0}),
}


def prompt(vocab, n):
    return [1] + [(i * 37 + 11) % vocab for i in range(n - 1)]


def greedy(model, ids, steps):
    ids = list(ids)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids


def build(name, cfg, workdir):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    config = AutoConfig.from_pretrained(d)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    model.eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights(pname, tuple(p.shape))))
    return config, model


def run(name, cfg, model, tokens, steps, outdir, extra=None):
    full = greedy(model, tokens, steps)
    with torch.no_grad():
        logits = model(torch.tensor([full])).logits[0].float().numpy()
    assert logits.shape == (len(full), cfg["vocab_size"]), logits.shape
    logits.astype("<f4").tofile(os.path.join(outdir, name + ".f32"))
    top2 = np.sort(logits, axis=1)[:, -2:]
    rec = {"config": cfg, "prompt": tokens, "tokens": full,
           "greedy": full[len(tokens):], "min_top2_margin": float((top2[:, 1] - top2[:, 0]).min())}
    if extra:
        rec.update(extra)
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(rec, f)
    print(name, "tokens", len(full), "logits |x|max %.3f" % np.abs(logits).max(),
          "margin %.4g" % rec["min_top2_margin"], "greedy", rec["greedy"], flush=True)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    workdir = "/tmp/paritywork"
    torch.manual_seed(0)
    print(weights("model.norm.weight", (4,)).tolist(), weights("lm_head.weight", (2, 3)).ravel().tolist())
    for name, cfg in MODELS.items():
        config, model = build(name, cfg, workdir)
        rp = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
        act = type(model.model.layers[0].mlp.act_fn).__name__
        print(name, "rope", rp, "act", act, "window", getattr(config, "sliding_window", None), flush=True)
        n = 16 if name == "mistral_window" else 9
        run(name, cfg, model, prompt(cfg["vocab_size"], n), 8, outdir,
            {"transformers_rope": str(rp), "transformers_act": act})
        del model
    if len(sys.argv) > 2:
        sdir = sys.argv[2]
        cfg = json.load(open(os.path.join(sdir, "config.json")))
        model = AutoModelForCausalLM.from_pretrained(sdir, attn_implementation="eager").float()
        model.eval()
        run("stories260K", cfg, model, [1], 64, outdir)
        run("stories260K_prompt", cfg, model, [1, 20, 100, 200, 300, 400, 500, 7, 263], 64, outdir)


if __name__ == "__main__":
    main()
