"""Reference logits from HuggingFace transformers for lowbit's parity tests.

Run from the repository root on the GPU machine (it has torch and
transformers 5.17; float32 CPU math is what runs, the GPU is not needed):

    python3 testdata/parity/gen.py OUTDIR [STORIES_DIR] [--only NAME,...] 2>&1 | tee gen.log

then copy OUTDIR/<name>.json and OUTDIR/<name>.f32 into testdata/parity and
gen.log over testdata/parity/gen.log. Its first line holds generator values
that internal/paritygen's TestGenerator checks the Go generator against.
--only runs the named cases alone (stories260K needs STORIES_DIR).

For every case below it writes OUTDIR/<name>.json (the config.json it used,
the prompt, the tokens, the greedy continuation, the parameters transformers
built, the checks it made) and OUTDIR/<name>.f32 (little-endian float32
logits, [len(tokens), vocab], for every position of the tokens).

The first cases use the exact hidden/intermediate/head/kv/head_dim/rope/eps/
window settings of the named checkpoints with fewer layers and a small vocab.
The family cases after them are small models (hidden 64-96, vocab 320) that
each exercise every feature of one architecture, with a 40-token prompt
longer than their sliding windows (16) and 32 greedy tokens.

Their weights are not stored: every tensor is rebuilt bit for bit from its
name by the generator below, which internal/paritygen implements again in Go:

    key  = FNV-1a 64 of the tensor name (UTF-8)
    z_i  = splitmix64 finalizer of key + (i+1) * 0x9E3779B97F4A7C15 (mod 2^64),
           i = 0 .. numel-1 over the row-major tensor
    u_i  = (z_i >> 40) * 2^-24                  (exact in float32, in [0, 1))
    v_i  = 2*u_i - 1                             (exact, in [-1, 1))
    1-D tensors (norm gains, biases): w = 1 + float32(0.1)*v  (float32 arithmetic)
    2-D tensors:                      w = v * float32(1/sqrt(cols))

(Gemma's norms compute (1 + w), transformers adds the 1; joined tensors such
as Phi-3's qkv_proj are generated under their joined name and shape.)

Each family case checks itself before its files are written: transformers
read the config as intended (layer types, attention scale, rotary factor and
size, tied head, the parameters the feature needs), and every feature bites:
the same weights with that feature switched off give logits at least 1e-3
away (relative L2) from the reference, ten times the parity tests' bound, so
lowbit cannot pass while ignoring it. A case that fails a check is reported
and not written; the script then exits 1 after the others.

stories260K uses its real weights (STORIES_DIR/model.safetensors).
"""

import argparse
import copy
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


class Case:
    """One model: its config.json, the prompt length and greedy steps, and
    for the family cases what it exercises and how that is checked.

    expect holds what transformers must have made of the config:
      layer_types        config.layer_types, as derived by transformers
      scaling            every attention layer's score scale
      attention_scaling  the rotary module's cos/sin factor (YaRN, LongRoPE)
      rotary_len         the rotary module's number of frequencies
      use_rope           every attention layer's use_rope flag (SmolLM3)
      params             parameter-name suffixes that must exist
      caps               (attention cap, final cap): report how often the
                         uncapped values exceed them, and require they do
    ablations maps a label to config changes that switch one feature off
    (None writes JSON null); each must move the logits.
    """

    def __init__(self, name, cfg, prompt_len=9, steps=8, features=(), expect=None, ablations=None):
        self.name = name
        self.cfg = cfg
        self.prompt_len = prompt_len
        self.steps = steps
        self.features = list(features)
        self.expect = expect or {}
        self.ablations = ablations or {}


# The family cases' prompt (longer than every sliding window below) and greedy length.
FAMILY_PROMPT = 40
FAMILY_STEPS = 32
WINDOW = 16
S, F = "sliding_attention", "full_attention"


def longrope_attention_factor(max_pos, original):
    f = max_pos / original
    return 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(original))


def yarn_attention_factor(factor):
    return 0.1 * math.log(factor) + 1.0


def short_factors(n):
    return [round(1.0 + 0.05 * i, 4) for i in range(n)]


def long_factors(n):
    return [round(1.0 + 3.0 * i, 4) for i in range(n)]


# Phi-3 analogues. phi3: the whole sequence (72) stays within
# original_max_position_embeddings (128), so transformers uses the short
# factors throughout. phi3_partial: the prompt (40) is already past it (32),
# so every call of the greedy loop and the reference run use the long ones.
# (transformers picks the factors from the length of the sequence of each
# call; a sequence that crossed the boundary would mix them.)
PHI3_ROT = 32 // 2
PHI3P_ROT = int(32 * 0.75) // 2

CASES = [
    # TinyLlama/TinyLlama-1.1B-Chat-v1.0, 2 of 22 layers.
    Case("tinyllama", base("LlamaForCausalLM", "llama", hidden_size=2048, intermediate_size=5632,
                           num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4,
                           vocab_size=VOCAB, max_position_embeddings=2048, rms_norm_eps=1e-5,
                           rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False)),
    # mistralai/Mistral-7B-v0.1, 1 of 32 layers.
    Case("mistral", base("MistralForCausalLM", "mistral", hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128, vocab_size=VOCAB, max_position_embeddings=32768,
                         rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
                         hidden_act="silu", tie_word_embeddings=False)),
    # A small Mistral whose window (5) is shorter than the prompt, so the
    # sliding window is exercised.
    Case("mistral_window", base("MistralForCausalLM", "mistral", hidden_size=128, intermediate_size=256,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=32, vocab_size=VOCAB, max_position_embeddings=512,
                                rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=5,
                                hidden_act="silu", tie_word_embeddings=False), prompt_len=16),
    # google/gemma-2b, 1 of 18 layers.
    Case("gemma", base("GemmaForCausalLM", "gemma", hidden_size=2048, intermediate_size=16384,
                       num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=1,
                       head_dim=256, vocab_size=VOCAB, max_position_embeddings=8192,
                       rms_norm_eps=1e-6, rope_theta=10000.0, hidden_act="gelu_pytorch_tanh",
                       hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                       bos_token_id=2, eos_token_id=1, pad_token_id=0)),
    # microsoft/bitnet-b1.58-2B-4T (its bf16 master weights' architecture), 2 of 30 layers.
    Case("bitnet", base("BitNetForCausalLM", "bitnet", hidden_size=2560, intermediate_size=6912,
                        num_hidden_layers=2, num_attention_heads=20, num_key_value_heads=5,
                        vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-5,
                        rope_theta=500000.0, hidden_act="relu2", tie_word_embeddings=True)),
    # Llama-3.1-style rope scaling on a small model (the Llama 3.1 case).
    Case("llama3_rope", base("LlamaForCausalLM", "llama", hidden_size=256, intermediate_size=512,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             vocab_size=VOCAB, max_position_embeddings=131072, rms_norm_eps=1e-5,
                             rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=False,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 8192})),
    # Linear rope scaling on a small model.
    Case("llama_linear_rope", base("LlamaForCausalLM", "llama", hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                                   vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-5,
                                   rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=True,
                                   rope_scaling={"type": "linear", "factor": 4.0})),

    # ---- One small model per family, every feature of it exercised. ----

    # YaRN on Llama. With head_dim 32, theta 1e4 and an original length of
    # 32 the correction range is [0, 3]: frequency 0 keeps its value, 1 and 2
    # are on the ramp, 3.. are divided by 4; cos/sin scale by 0.1 ln 4 + 1.
    Case("llama_yarn",
         base("LlamaForCausalLM", "llama", hidden_size=64, intermediate_size=128,
              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
              vocab_size=VOCAB, max_position_embeddings=128, rms_norm_eps=1e-5,
              rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False,
              rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["rope_scaling yarn factor 4, original_max_position_embeddings 32 (ramp over frequencies 0-3)",
                   "YaRN attention factor 0.1 ln 4 + 1 on cos/sin"],
         expect={"scaling": 32 ** -0.5, "attention_scaling": yarn_attention_factor(4.0), "rotary_len": 16},
         ablations={"linear factor 4 (no ramp, no attention factor)": {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
                    "no rope scaling": {"rope_scaling": None}}),

    # Qwen2 (Qwen2.5-style: tied, theta 1e6). Layers at index >=
    # max_window_layers slide (transformers derives layer_types so).
    Case("qwen2",
         base("Qwen2ForCausalLM", "qwen2", hidden_size=96, intermediate_size=192,
              num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
              vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-6,
              rope_theta=1000000.0, hidden_act="silu", tie_word_embeddings=True,
              use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["q/k/v biases", "sliding window 16 on layers 2 and 3 (index >= max_window_layers 2), full attention on 0 and 1",
                   "GQA 6/2, tied embeddings"],
         expect={"layer_types": [F, F, S, S], "scaling": 16 ** -0.5,
                 "params": ["self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"]},
         ablations={"use_sliding_window false": {"use_sliding_window": False},
                    "max_window_layers 0 (every layer slides)": {"max_window_layers": 0}}),

    # Qwen3: head_dim 32 with hidden 64 / 4 heads, q_norm and k_norm, tied.
    Case("qwen3",
         base("Qwen3ForCausalLM", "qwen3", hidden_size=64, intermediate_size=160,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              vocab_size=VOCAB, max_position_embeddings=40960, rms_norm_eps=1e-6,
              rope_theta=1000000.0, hidden_act="silu", tie_word_embeddings=True,
              attention_bias=False, use_sliding_window=False),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["head_dim 32 != hidden/heads 16 (q is 128 wide, hidden 64)", "q_norm/k_norm per head before the rotation",
                   "tied embeddings"],
         expect={"scaling": 32 ** -0.5, "params": ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]}),

    # Gemma 2: soft-capping small enough to bite on these weights (the
    # scores' spread is about 1, the logits' about 1.2), query scale 1/sqrt(48)
    # with head_dim 24, layers 0 and 2 sliding (the alternation
    # transformers derives), sandwich norms, GeGLU, (1 + w) norms, scaled
    # embeddings.
    Case("gemma2",
         base("Gemma2ForCausalLM", "gemma2", hidden_size=64, intermediate_size=128,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
              vocab_size=VOCAB, max_position_embeddings=8192, rms_norm_eps=1e-6,
              rope_theta=10000.0, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
              tie_word_embeddings=True, query_pre_attn_scalar=48, sliding_window=WINDOW,
              attn_logit_softcapping=1.0, final_logit_softcapping=3.0,
              bos_token_id=2, eos_token_id=1, pad_token_id=0),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["attn_logit_softcapping 1.0", "final_logit_softcapping 3.0",
                   "query_pre_attn_scalar 48 != head_dim 24", "sliding window 16 on layers 0 and 2, global 1 and 3",
                   "sandwich norms (pre/post_feedforward_layernorm)", "gelu_pytorch_tanh", "(1 + w) norms, embeddings * sqrt(hidden)",
                   "tied embeddings"],
         expect={"layer_types": [S, F, S, F], "scaling": 48 ** -0.5, "caps": (1.0, 3.0),
                 "params": ["pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"]},
         ablations={"no attention cap": {"attn_logit_softcapping": None},
                    "no final cap": {"final_logit_softcapping": None},
                    "query_pre_attn_scalar = head_dim": {"query_pre_attn_scalar": 24},
                    "window 4096": {"sliding_window": 4096}}),

    # Gemma 3 text (as the 1B, and the 4B+ text stack): q/k norms, local
    # base 1e4 on sliding layers, global theta 1e6 with linear scaling 8 on
    # full ones (as Gemma-3-4B+), sliding_window_pattern 3 over 6 layers.
    Case("gemma3",
         base("Gemma3ForCausalLM", "gemma3_text", hidden_size=64, intermediate_size=128,
              num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              vocab_size=VOCAB, max_position_embeddings=131072, rms_norm_eps=1e-6,
              rope_theta=1000000.0, rope_local_base_freq=10000.0,
              rope_scaling={"rope_type": "linear", "factor": 8.0},
              hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
              query_pre_attn_scalar=48, sliding_window=WINDOW, sliding_window_pattern=3,
              final_logit_softcapping=None, attn_logit_softcapping=None,
              bos_token_id=2, eos_token_id=1, pad_token_id=0),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["q_norm/k_norm ((1 + w))", "sliding_window_pattern 3: layers 2 and 5 global, the others slide over 16",
                   "rope_local_base_freq 1e4 on sliding layers, rope_theta 1e6 with linear factor 8 on global ones",
                   "query_pre_attn_scalar 48 != head_dim 32", "sandwich norms", "gelu_pytorch_tanh",
                   "embeddings * sqrt(hidden)", "tied embeddings"],
         expect={"layer_types": [S, S, F, S, S, F], "scaling": 48 ** -0.5,
                 "params": ["self_attn.q_norm.weight", "self_attn.k_norm.weight",
                            "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"]},
         ablations={"local base = rope_theta": {"rope_local_base_freq": 1000000.0},
                    "no global rope scaling": {"rope_scaling": None},
                    "query_pre_attn_scalar = head_dim": {"query_pre_attn_scalar": 32},
                    "window 4096": {"sliding_window": 4096}}),

    # Phi-3 (mini-128k-like): joined qkv_proj and gate_up_proj, LongRoPE.
    Case("phi3",
         base("Phi3ForCausalLM", "phi3", hidden_size=96, intermediate_size=160,
              num_hidden_layers=4, num_attention_heads=3, num_key_value_heads=3,
              vocab_size=VOCAB, max_position_embeddings=512, original_max_position_embeddings=128,
              rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False,
              sliding_window=None, pad_token_id=0,
              rope_scaling={"type": "longrope", "short_factor": short_factors(PHI3_ROT),
                            "long_factor": long_factors(PHI3_ROT)}),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["joined qkv_proj and gate_up_proj", "longrope, 72 tokens <= original_max_position_embeddings 128: short_factor",
                   "attention factor sqrt(1 + ln(512/128) / ln 128) on cos/sin"],
         expect={"scaling": 32 ** -0.5, "attention_scaling": longrope_attention_factor(512, 128), "rotary_len": PHI3_ROT,
                 "params": ["self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"]},
         ablations={"short_factor all 1": {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * PHI3_ROT,
                                                            "long_factor": long_factors(PHI3_ROT)}},
                    "original = max positions (attention factor 1)": {"original_max_position_embeddings": 512}}),

    # Phi-4-mini-like: partial_rotary_factor 0.75, GQA, tied, LongRoPE past
    # the original length, a window longer than any sequence.
    Case("phi3_partial",
         base("Phi3ForCausalLM", "phi3", hidden_size=96, intermediate_size=160,
              num_hidden_layers=4, num_attention_heads=3, num_key_value_heads=1,
              vocab_size=VOCAB, max_position_embeddings=256, original_max_position_embeddings=32,
              rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=True,
              partial_rotary_factor=0.75, sliding_window=262144, pad_token_id=0,
              rope_scaling={"type": "longrope", "short_factor": short_factors(PHI3P_ROT),
                            "long_factor": long_factors(PHI3P_ROT)}),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["partial_rotary_factor 0.75: 24 of 32 dimensions rotate", "joined qkv_proj (GQA 3/1) and gate_up_proj",
                   "longrope, prompt 40 > original_max_position_embeddings 32: long_factor for every call",
                   "attention factor sqrt(1 + ln(256/32) / ln 32)", "sliding_window 262144 (no effect)", "tied embeddings"],
         expect={"scaling": 32 ** -0.5, "attention_scaling": longrope_attention_factor(256, 32), "rotary_len": PHI3P_ROT,
                 "params": ["self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"]},
         ablations={"long_factor = short_factor": {"rope_scaling": {"type": "longrope", "short_factor": short_factors(PHI3P_ROT),
                                                                    "long_factor": short_factors(PHI3P_ROT)}},
                    "original = max positions (short factors, attention factor 1)": {"original_max_position_embeddings": 256}}),

    # Mistral v0.3 / Nemo: head_dim 24 with hidden 64 / 4 heads, no window.
    Case("mistral_v03",
         base("MistralForCausalLM", "mistral", hidden_size=64, intermediate_size=160,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
              vocab_size=VOCAB, max_position_embeddings=1024000, rms_norm_eps=1e-5,
              rope_theta=1000000.0, sliding_window=None, hidden_act="silu", tie_word_embeddings=False),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["head_dim 24 != hidden/heads 16 (q is 96 wide, hidden 64)", "sliding_window null", "untied"],
         expect={"scaling": 24 ** -0.5}),

    # SmolLM3: no_rope_layers holds 1 for layers that rotate, 0 for NoPE
    # layers; [1, 1, 0, 1] is not the default every-4th pattern, so the list
    # itself is what counts.
    Case("smollm3",
         base("SmolLM3ForCausalLM", "smollm3", hidden_size=64, intermediate_size=128,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=VOCAB, max_position_embeddings=65536, rms_norm_eps=1e-6,
              rope_theta=5000000.0, hidden_act="silu", tie_word_embeddings=True,
              no_rope_layers=[1, 1, 0, 1], use_sliding_window=False, pad_token_id=0),
         FAMILY_PROMPT, FAMILY_STEPS,
         features=["no_rope_layers [1, 1, 0, 1]: layer 2 takes no rotation (1 = uses RoPE)", "tied embeddings"],
         expect={"scaling": 16 ** -0.5, "use_rope": [1, 1, 0, 1]},
         ablations={"every layer rotates": {"no_rope_layers": [1, 1, 1, 1]}}),
]


# The configs by name, for bitnet_gen.py.
MODELS = {c.name: c.cfg for c in CASES}


def check_cases(cases):
    """Consistency of the table itself (no torch needed)."""
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), names
    for c in cases:
        json.dumps(c.cfg)
        lt = c.expect.get("layer_types")
        if lt is not None:
            assert len(lt) == c.cfg["num_hidden_layers"], c.name
            assert S in lt and F in lt, c.name + ": both layer kinds must occur"
            assert c.prompt_len > c.cfg["sliding_window"], c.name + ": the prompt must outrun the window"
        for label, changes in c.ablations.items():
            assert changes and all(k in c.cfg for k in changes), (c.name, label, "ablations change existing keys")
        rs = c.cfg.get("rope_scaling") or {}
        if rs.get("type") == "longrope":
            hd = c.cfg["hidden_size"] // c.cfg["num_attention_heads"]
            n = int(hd * c.cfg.get("partial_rotary_factor", 1.0)) // 2
            assert len(rs["short_factor"]) == n and len(rs["long_factor"]) == n, c.name
            assert c.expect["rotary_len"] == n, c.name
            total = c.prompt_len + c.steps
            orig = c.cfg["original_max_position_embeddings"]
            assert total <= orig or c.prompt_len > orig, c.name + ": the sequence must not cross the original length"


def prompt(vocab, n):
    return [1] + [(i * 37 + 11) % vocab for i in range(n - 1)]


def forward(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()


def greedy(model, ids, steps):
    ids = list(ids)
    for _ in range(steps):
        ids.append(int(np.argmax(forward(model, ids)[-1])))
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
    return model.config, model


def rel_l2(a, b):
    return float(np.linalg.norm((a - b).astype(np.float64)) / np.linalg.norm(a.astype(np.float64)))


def check_model(case, config, model):
    """What transformers made of the config: a list of problems (empty: as intended)."""
    ex, cfg = case.expect, case.cfg
    problems = []
    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    if getattr(config, "_attn_implementation", "eager") != "eager":
        problems.append("attention implementation %s, not eager" % config._attn_implementation)
    for suffix in ex.get("params", ()):
        if not any(n.endswith(suffix) for n in params):
            problems.append("no parameter *." + suffix)
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if tied != bool(cfg.get("tie_word_embeddings", False)) or tied == ("lm_head.weight" in params):
        problems.append("tied head %s, config says %s" % (tied, cfg.get("tie_word_embeddings")))
    if "layer_types" in ex and list(getattr(config, "layer_types", None) or []) != ex["layer_types"]:
        problems.append("layer_types %s, want %s" % (getattr(config, "layer_types", None), ex["layer_types"]))
    layers = model.model.layers
    if "scaling" in ex:
        got = [getattr(l.self_attn, "scaling", None) for l in layers]
        if any(s is None or abs(s - ex["scaling"]) > 1e-9 for s in got):
            problems.append("attention scaling %s, want %s" % (got, ex["scaling"]))
    if "use_rope" in ex:
        got = [getattr(l.self_attn, "use_rope", None) for l in layers]
        if [None if g is None else int(g) for g in got] != ex["use_rope"]:
            problems.append("use_rope %s, want %s" % (got, ex["use_rope"]))
    rotary = [m for m in model.modules() if hasattr(m, "attention_scaling") and hasattr(m, "inv_freq")]
    if ("attention_scaling" in ex or "rotary_len" in ex) and not rotary:
        problems.append("no rotary module found to check")
    for m in rotary:
        if "attention_scaling" in ex and abs(float(m.attention_scaling) - ex["attention_scaling"]) > 1e-6:
            problems.append("rotary attention_scaling %s, want %s" % (m.attention_scaling, ex["attention_scaling"]))
        if "rotary_len" in ex and m.inv_freq.shape[-1] != ex["rotary_len"]:
            problems.append("rotary frequencies %d, want %d" % (m.inv_freq.shape[-1], ex["rotary_len"]))
    return problems


def attention_probe(model):
    """Wraps the eager attention of model's attention modules to count the
    scaled scores (allowed by the mask) whose magnitude exceeds the
    attention cap. Returns the counters and a function that unwraps."""
    stats = {"scores": 0, "over": 0, "calls": 0}
    attn = model.model.layers[0].self_attn
    mod = sys.modules[type(attn).__module__]
    orig = getattr(mod, "eager_attention_forward", None)
    if orig is None:
        return stats, lambda: None
    cap = model.config.attn_logit_softcapping

    def wrapped(module, query, key, value, attention_mask, *args, **kw):
        try:
            k = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
            s = torch.matmul(query, k.transpose(2, 3)) * kw.get("scaling", module.scaling)
            allowed = torch.ones_like(s, dtype=torch.bool)
            if attention_mask is not None:
                m = attention_mask[:, :, :, : k.shape[-2]]
                allowed = (m if m.dtype == torch.bool else m == 0).expand_as(s)
            stats["scores"] += int(allowed.sum())
            stats["over"] += int(((s.abs() > cap) & allowed).sum())
            stats["calls"] += 1
        except Exception as e:  # the probe only reports; the run goes on
            stats["error"] = repr(e)
        return orig(module, query, key, value, attention_mask, *args, **kw)

    mod.eager_attention_forward = wrapped
    saved = []
    for layer in model.model.layers:
        a = layer.self_attn
        if "attention_interface" in vars(a):
            saved.append((a, a.attention_interface))
            a.attention_interface = wrapped

    def unwrap():
        mod.eager_attention_forward = orig
        for a, f in saved:
            a.attention_interface = f

    return stats, unwrap


def cap_bites(model, ids, caps):
    """How often the uncapped attention scores and logits exceed the caps."""
    attn_cap, final_cap = caps
    stats, unwrap = attention_probe(model)
    try:
        with torch.no_grad():
            h = model.model(torch.tensor([ids]), use_cache=False).last_hidden_state
            raw = model.lm_head(h)[0].float().numpy()
    finally:
        unwrap()
    out = {"final_cap": final_cap, "final_over": float((np.abs(raw) > final_cap).mean()),
           "final_raw_absmax": float(np.abs(raw).max()), "attn_cap": attn_cap}
    if stats["calls"]:
        out["attn_over"] = stats["over"] / max(stats["scores"], 1)
    else:
        out["attn_over"] = None
        out["attn_probe"] = stats.get("error", "eager attention not reached")
    return out


def run_case(case, workdir, outdir):
    """Builds, checks and runs one case; writes its files when every check holds.
    Returns the problems found."""
    cfg = case.cfg
    config, model = build(case.name, cfg, workdir)
    rp = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    mlp = model.model.layers[0].mlp
    act = type(getattr(mlp, "act_fn", None) or getattr(mlp, "activation_fn")).__name__  # Phi3MLP names it activation_fn
    layer_types = getattr(config, "layer_types", None)
    print(case.name, "rope", rp, "act", act, "window", getattr(config, "sliding_window", None),
          "layer_types", layer_types, flush=True)
    problems = check_model(case, config, model)
    tensors = [{"name": n, "shape": list(p.shape)} for n, p in model.named_parameters()]
    tokens = prompt(cfg["vocab_size"], case.prompt_len)
    full = greedy(model, tokens, case.steps)
    logits = forward(model, full)
    assert logits.shape == (len(full), cfg["vocab_size"]), logits.shape
    checks = {}
    if "caps" in case.expect:
        checks["caps"] = bites = cap_bites(model, full, case.expect["caps"])
        print(case.name, "caps: %.1f%% of attention scores over %.2g, %.2f%% of logits over %.2g (raw |max| %.3g)" % (
            100 * (bites["attn_over"] or 0), bites["attn_cap"], 100 * bites["final_over"], bites["final_cap"],
            bites["final_raw_absmax"]), flush=True)
        if bites["attn_over"] is not None and bites["attn_over"] < 0.05:
            problems.append("attention cap bites on %.2g of the scores, want >= 5%%" % bites["attn_over"])
        if bites["final_over"] < 0.001:
            problems.append("final cap bites on %.2g of the logits, want >= 0.1%%" % bites["final_over"])
    del model
    ablations = {}
    for i, (label, changes) in enumerate(case.ablations.items()):
        variant = copy.deepcopy(cfg)
        variant.update(copy.deepcopy(changes))
        try:
            _, m = build("%s_ablation%d" % (case.name, i), variant, workdir)
            d = rel_l2(logits, forward(m, full))
            del m
        except Exception as e:  # a variant transformers refuses leaves the check unmade, not the data wrong
            checks.setdefault("ablation_errors", {})[label] = repr(e)
            print(case.name, "WARNING: variant without %s not built: %r" % (label, e), flush=True)
            continue
        ablations[label] = d
        print(case.name, "without %s: rel L2 %.3g" % (label, d), flush=True)
        if not d > 1e-3:
            problems.append("switching off %r moves the logits by %.3g only" % (label, d))
    checks["ablations"] = ablations
    if problems:
        for p in problems:
            print(case.name, "CHECK FAILED:", p, flush=True)
        print(case.name, "not written", flush=True)
        return problems
    write(case.name, cfg, tokens, full, logits, outdir, {
        "tensors": tensors, "features": case.features, "checks": checks,
        "transformers_rope": str(rp), "transformers_act": act, "transformers_layer_types": layer_types})
    return problems


def write(name, cfg, tokens, full, logits, outdir, extra=None):
    """Writes OUTDIR/<name>.f32 and OUTDIR/<name>.json."""
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


def run(name, cfg, model, tokens, steps, outdir, extra=None):
    """Writes name's record of a model built elsewhere, unchecked (stories260K, bitnet_gen.py)."""
    full = greedy(model, tokens, steps)
    logits = forward(model, full)
    assert logits.shape == (len(full), cfg["vocab_size"]), logits.shape
    write(name, cfg, tokens, full, logits, outdir, extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("stories_dir", nargs="?", help="stories260K's HF directory (model.safetensors, config.json)")
    ap.add_argument("--only", help="comma-separated case names (stories260K: both stories records)")
    args = ap.parse_args()
    check_cases(CASES)
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - {c.name for c in CASES} - {"stories260K"}
        if unknown:
            sys.exit("unknown cases: %s" % ", ".join(sorted(unknown)))
    os.makedirs(args.outdir, exist_ok=True)
    workdir = "/tmp/paritywork"
    torch.manual_seed(0)
    print(weights("model.norm.weight", (4,)).tolist(), weights("lm_head.weight", (2, 3)).ravel().tolist())
    failed = {}
    for case in CASES:
        if only and case.name not in only:
            continue
        try:
            problems = run_case(case, workdir, args.outdir)
        except Exception as e:  # one broken case must not cost the others their run
            problems = ["%s: %s" % (type(e).__name__, e)]
            print(case.name, "FAILED:", problems[0], flush=True)
        if problems:
            failed[case.name] = problems
    if args.stories_dir and (not only or "stories260K" in only):
        sdir = args.stories_dir
        cfg = json.load(open(os.path.join(sdir, "config.json")))
        model = AutoModelForCausalLM.from_pretrained(sdir, attn_implementation="eager").float()
        model.eval()
        run("stories260K", cfg, model, [1], 64, args.outdir)
        run("stories260K_prompt", cfg, model, [1, 20, 100, 200, 300, 400, 500, 7, 263], 64, args.outdir)
    print("summary:", "all cases written" if not failed else "%d case(s) failed, not written: %s" % (
        len(failed), "; ".join("%s (%s)" % (k, " | ".join(v)) for k, v in failed.items())), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
