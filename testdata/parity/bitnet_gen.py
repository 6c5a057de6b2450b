"""Reference logits for lowbit's BitNet b1.58 W2A8 parity test, and the
packed-checkpoint layout cross-check.

Run on a machine with torch and transformers:

    TORCHDYNAMO_DISABLE=1 python3 bitnet_gen.py OUTDIR

How transformers applies BitNet's quantization: BitNetForCausalLM built from
a config without quantization_config (as microsoft/bitnet-b1.58-2B-4T-bf16's
master weights load) uses plain nn.Linear, no quantization at all. With
quantization_config linear_class "autobitlinear", mode "online", each linear
becomes AutoBitLinear, whose forward is
    F.linear(ActQuant(x), WeightQuant(W))
with transformers.integrations.bitnet's WeightQuant (s = 1/max(mean|W|, 1e-5),
W_q = clip(round(W*s), -1, 1)/s, over the whole tensor) and ActQuant
(per token s = 127/max(max|x|, 1e-5), x_q = clip(round(x*s), -128, 127)/s).
This script does exactly that, with those two functions, on every linear of
the decoder layers (q/k/v/o, gate/up/down); the tied embedding/head stays
float32, as lowbit's parity test keeps it. torch.compile is disabled
(TORCHDYNAMO_DISABLE=1) so the functions run eagerly on the CPU.

Outputs:
  bitnet_w2a8.json/.f32   as gen.py's run() writes them, plus per linear
                          tensor the float32 scale mean|W| and the count of
                          -1/0/+1 codes, so the Go side can show its ternary
                          weights are the same.
  bitnet_packed.json      a small ternary matrix, transformers' pack_weights
                          bytes of it, unpack_weights of those bytes, and
                          BitLinear (the class microsoft/bitnet-b1.58-2B-4T's
                          packed checkpoint loads into) applied to two inputs
                          with a given weight_scale.
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import MODELS, build, prompt, run, weights  # noqa: E402

from transformers.integrations.bitnet import (  # noqa: E402
    ActQuant, BitLinear, WeightQuant, pack_weights, unpack_weights)


class W2A8(torch.nn.Module):
    """AutoBitLinear's online forward with the weight quantized once."""

    def __init__(self, lin):
        super().__init__()
        with torch.no_grad():
            w = lin.weight.detach().float()
            self.register_buffer("w", WeightQuant.apply(w))
            s = float(w.abs().mean().clamp(min=1e-5))
            t = torch.round(self.w * (1.0 / torch.tensor(s, dtype=torch.float32))).to(torch.int64)
            self.stats = {"scale": s, "minus": int((t == -1).sum()), "zero": int((t == 0).sum()),
                          "plus": int((t == 1).sum())}

    def forward(self, x):
        return torch.nn.functional.linear(ActQuant.apply(x), self.w)


def w2a8(outdir):
    cfg = dict(MODELS["bitnet"])
    config, model = build("bitnet_w2a8", cfg, "/tmp/paritywork")
    stats = {}
    for li, layer in enumerate(model.model.layers):
        for mod, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                           (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
            for n in names:
                q = W2A8(getattr(mod, n))
                setattr(mod, n, q)
                kind = "self_attn" if mod is layer.self_attn else "mlp"
                stats["model.layers.%d.%s.%s.weight" % (li, kind, n)] = q.stats
    print("replaced", len(stats), "linears", flush=True)
    run("bitnet_w2a8", cfg, model, prompt(cfg["vocab_size"], 9), 32, outdir, {"tq2": stats})


def packed(outdir):
    rows, cols = 16, 40
    w = torch.from_numpy(weights("packed.test", (rows, cols)))
    s = 1.0 / w.abs().mean().clamp(min=1e-5)
    t = (w * s).round().clamp(-1, 1)
    p = pack_weights(t.clone())
    assert p.dtype == torch.uint8 and tuple(p.shape) == (rows // 4, cols), p.shape
    u = unpack_weights(p, dtype=torch.float32)
    assert torch.equal(u, t), "unpack(pack(t)) != t"
    scale = 1.0 / float(w.abs().mean())
    lin = BitLinear(cols, rows, bias=False, dtype=torch.float32)
    with torch.no_grad():
        lin.weight.copy_(p)
        lin.weight_scale.fill_(scale)
    xs = torch.from_numpy(np.stack([weights("packed.x0", (1, cols))[0], weights("packed.x1", (1, cols))[0] * 7]))
    with torch.no_grad():
        y = lin(xs)
    rec = {"rows": rows, "cols": cols, "ternary": t.to(torch.int64).flatten().tolist(),
           "packed": p.flatten().tolist(), "unpacked": u.to(torch.int64).flatten().tolist(),
           "weight_scale": float(lin.weight_scale.float()[0]), "x": xs.flatten().tolist(),
           "y": y.float().flatten().tolist()}
    with open(os.path.join(outdir, "bitnet_packed.json"), "w") as f:
        json.dump(rec, f)
    print("packed", rows, cols, "bytes", p.numel(), "y", y.flatten()[:4].tolist(), flush=True)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    packed(outdir)
    w2a8(outdir)


if __name__ == "__main__":
    main()
