// act.cuh: the gated activations of the MLP, act(g) * u, shared by the glu
// kernel and the matvec kernels that apply them while staging x.
#pragma once

// glu_act is act(g) * u for act 0 = SiLU (SwiGLU), 1 = tanh GELU (GeGLU),
// 2 = ReLU^2 (BitNet).
__device__ __forceinline__ float glu_act(float g, float u, int act) {
    float a;
    if (act == 0) {
        a = g / (1.f + expf(-g));
    } else if (act == 1) {
        a = 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
    } else {
        const float r = fmaxf(g, 0.f);
        a = r * r;
    }
    return a * u;
}
