// ops.cu: the other kernels of the decode step: rotary embedding,
// KV-cache store, attention over the cache, gated activations, residual
// add and embedding lookup (RMSNorm and argmax are in norm.cu). The
// position and the token id are read from device memory, so a captured
// decode step replays for every token without being captured again.
#include <cuda_fp16.h>
#include <stdint.h>

#include "act.cuh"
#include "kv.cuh"

// block_sum and block_max reduce over a block of at most 1024 threads;
// every thread gets the result. red needs 33 floats.
__device__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x + 31) / 32 ? red[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}

__device__ float block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x + 31) / 32 ? red[threadIdx.x] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (threadIdx.x == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}

// rope rotates each head of v [n, heads, hd] in place, token y by position
// pos[y], the HF "rotate half" pairing (i, i + hd/2); table holds each
// pair's frequency (scaling already applied), then the factor of its cos
// and sin. Grid: (heads, n); block: hd/2.
extern "C" __global__ void rope(float* __restrict__ v, int hd, const int* __restrict__ pos,
                                const float* __restrict__ table) {
    const int i = threadIdx.x, half = hd / 2;
    if (i >= half) return;
    float* h = v + ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * hd;
    float s, c;
    sincosf((float)pos[blockIdx.y] * table[i], &s, &c);
    s *= table[half + i], c *= table[half + i];  // yarn's and longrope's attention scaling
    const float a = h[i], b = h[i + half];
    h[i] = a * c - b * s;
    h[i + half] = b * c + a * s;
}

// kv_store copies the step's k and v ([n, kv_heads*hd] each) into rows
// pos[y] of the caches [max_seq, kv_heads*hd] of type KT (kv.cuh; ksc,
// vsc their q8 scales [max_seq, kv_heads]). Grid: (kv_heads, n); block:
// hd threads rounded up to a warp, one a dimension of a head row.
template <int KT>
__device__ void kv_store(const float* __restrict__ k, const float* __restrict__ v, void* __restrict__ kc,
                         void* __restrict__ vc, float* __restrict__ ksc, float* __restrict__ vsc, int kv_heads, int hd,
                         const int* __restrict__ pos) {
    __shared__ float red[33];
    const int h = blockIdx.x, y = blockIdx.y, i = threadIdx.x, kvdim = kv_heads * hd;
    const size_t src = (size_t)y * kvdim + (size_t)h * hd + i;
    const float kx = i < hd ? k[src] : 0.f, vx = i < hd ? v[src] : 0.f;
    float ks = 0.f, vs = 0.f;
    if (KT == KV_Q8) ks = kv_scale(block_max(fabsf(kx), red)), vs = kv_scale(block_max(fabsf(vx), red));
    const size_t o = (size_t)pos[y] * kvdim + (size_t)h * hd + i;
    if (i < hd) kv_put<KT>(kc, o, kx, ks), kv_put<KT>(vc, o, vx, vs);
    if (KT == KV_Q8 && i == 0) ksc[(size_t)pos[y] * kv_heads + h] = ks, vsc[(size_t)pos[y] * kv_heads + h] = vs;
}

// attention: one block per query head and token y over cache rows
// 0..pos[y] (causal; window > 0: only the last window of them): scores in shared memory (dynamic, max_seq floats),
// softmax, weighted sum of values. Query head h reads kv head
// h / (heads / kv_heads). q and out are [n, heads, hd]; the caches are of
// type KT (kv.cuh). Grid: (heads, n);
// block: 1024 threads. Each warp scores one position at a time (lanes split
// the head, coalesced); for the values the block splits into
// blockDim/hd groups of hd threads that take every group-th position, and
// the groups' sums are added in shared memory. Decode (one token) may pass
// the step's k and v as kcur, vcur: the kv store happens here (the first
// query head of each kv head writes its cache row) and position pos[0]
// reads kcur/vcur as the cache keeps them, so no block waits on another's
// write. Otherwise (null) kv_store ran before.
template <int KT>
__device__ void attention(const float* __restrict__ q, void* __restrict__ kc, void* __restrict__ vc,
                          float* __restrict__ ksc, float* __restrict__ vsc, float* __restrict__ out, int heads,
                          int kv_heads, int hd, const int* __restrict__ pos, float scale, float softcap, int window,
                          const float* __restrict__ kcur, const float* __restrict__ vcur) {
    extern __shared__ float sc[];
    __shared__ float red[33];
    __shared__ float part[1024];
    const int h = blockIdx.x, kvh = h / (heads / kv_heads), kvdim = kv_heads * hd;
    const int n = pos[blockIdx.y] + 1;
    const int first = window > 0 ? max(0, n - window) : 0;  // the sliding window's first position
    q += (size_t)blockIdx.y * heads * hd;
    out += (size_t)blockIdx.y * heads * hd;
    const float* qh = q + (size_t)h * hd;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    // The step's k and v rows' q8 scales (every block of the kv head finds the same).
    float kcs = 0.f, vcs = 0.f;
    if (kcur != nullptr && KT == KV_Q8) {
        float ka = 0.f, va = 0.f;
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            ka = fmaxf(ka, fabsf(kcur[(size_t)kvh * hd + i])), va = fmaxf(va, fabsf(vcur[(size_t)kvh * hd + i]));
        kcs = kv_scale(block_max(ka, red)), vcs = kv_scale(block_max(va, red));
    }
    if (kcur != nullptr && h % (heads / kv_heads) == 0) {
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            kv_put<KT>(kc, (size_t)(n - 1) * kvdim + (size_t)kvh * hd + i, kcur[(size_t)kvh * hd + i], kcs);
            kv_put<KT>(vc, (size_t)(n - 1) * kvdim + (size_t)kvh * hd + i, vcur[(size_t)kvh * hd + i], vcs);
        }
        if (KT == KV_Q8 && threadIdx.x == 0)
            ksc[(size_t)(n - 1) * kv_heads + kvh] = kcs, vsc[(size_t)(n - 1) * kv_heads + kvh] = vcs;
    }
    for (int t = first + warp; t < n; t += nw) {
        const bool cur = kcur != nullptr && t == n - 1;
        const size_t row = (size_t)t * kvdim + (size_t)kvh * hd;
        float s = 0.f;
        for (int i = lane; i < hd; i += 32)
            s += qh[i] * (cur ? kv_round<KT>(kcur[(size_t)kvh * hd + i], kcs) : kv_get<KT>(kc, row + i));
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (KT == KV_Q8 && !cur) s *= ksc[(size_t)t * kv_heads + kvh];
        s *= scale;
        if (softcap > 0.f) s = softcap * tanhf(s / softcap);  // Gemma 2's capped scores
        if (lane == 0) sc[t] = s;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int t = first + threadIdx.x; t < n; t += blockDim.x) m = fmaxf(m, sc[t]);
    m = block_max(m, red);
    float sum = 0.f;
    for (int t = first + threadIdx.x; t < n; t += blockDim.x) {
        const float e = __expf(sc[t] - m);
        sc[t] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    const float inv = 1.f / sum;
    // value t of dimension i, as the cache keeps it
    auto val = [&](int t, int i) {
        if (kcur != nullptr && t == n - 1) return kv_round<KT>(vcur[(size_t)kvh * hd + i], vcs);
        const float x = kv_get<KT>(vc, (size_t)t * kvdim + (size_t)kvh * hd + i);
        return KT == KV_Q8 ? x * vsc[(size_t)t * kv_heads + kvh] : x;
    };
    if (hd <= (int)blockDim.x && blockDim.x <= 1024) {
        const int groups = blockDim.x / hd, g = threadIdx.x / hd, i = threadIdx.x % hd;
        if (g < groups) {
            float a = 0.f;
            for (int t = first + g; t < n; t += groups) a += sc[t] * val(t, i);
            part[threadIdx.x] = a;
        }
        __syncthreads();
        if (threadIdx.x < hd) {
            float a = 0.f;
            for (int gg = 0; gg < groups; gg++) a += part[gg * hd + threadIdx.x];
            out[(size_t)h * hd + threadIdx.x] = a * inv;
        }
        return;
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.f;
        for (int t = first; t < n; t++) a += sc[t] * val(t, i);
        out[(size_t)h * hd + i] = a * inv;
    }
}

// The kv store and the attention for each cache type: kv_store and
// attention for float32, kv_store_f16 and attention_f16, kv_store_q8 and
// attention_q8.
#define KV_KERNELS(KT, kts)                                                                                        \
    extern "C" __global__ void kv_store##kts(const float* k, const float* v, void* kc, void* vc, float* ksc,      \
                                             float* vsc, int kv_heads, int hd, const int* pos) {                  \
        kv_store<KT>(k, v, kc, vc, ksc, vsc, kv_heads, hd, pos);                                                   \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(1024)                                                             \
        attention##kts(const float* q, void* kc, void* vc, float* ksc, float* vsc, float* out, int heads,         \
                       int kv_heads, int hd, const int* pos, float scale, float softcap, int window,              \
                       const float* kcur, const float* vcur) {                                                     \
        attention<KT>(q, kc, vc, ksc, vsc, out, heads, kv_heads, hd, pos, scale, softcap, window, kcur, vcur);     \
    }
KV_KERNELS(KV_F32, )
KV_KERNELS(KV_F16, _f16)
KV_KERNELS(KV_Q8, _q8)

// glu: out = act(g) * u (act.cuh).
extern "C" __global__ void glu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out, int n,
                               int act) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = glu_act(g[i], u[i], act);
}

// add: x += y (the residual).
extern "C" __global__ void add(float* __restrict__ x, const float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

// softcap: x = cap * tanh(x / cap) (Gemma 2's final logits).
extern "C" __global__ void softcap(float* __restrict__ x, int n, float cap) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

// add_rows: each row of x [n / cols, cols] += b [cols] (a product's bias).
extern "C" __global__ void add_rows(float* __restrict__ x, const float* __restrict__ b, int n, int cols) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b[i % cols];
}

// embed_f32 and embed_q8 copy row tok[y] of the embedding table into row y
// of out [n, dim], dequantizing q8 rows (fp16 scale per group of gs), times
// scale (Gemma's sqrt(hidden); 1 for the others), as the CPU does.
// Grid: (dim/256 rounded up, n).
extern "C" __global__ void embed_f32(const float* __restrict__ table, const int* __restrict__ tok,
                                     float* __restrict__ out, int stride, int dim, float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim) return;
    const float v = table[(size_t)tok[blockIdx.y] * stride + i];
    out[(size_t)blockIdx.y * dim + i] = scale != 1.f ? v * scale : v;
}

extern "C" __global__ void embed_q8(const int8_t* __restrict__ q, const __half* __restrict__ scales, int row_bytes,
                                    int gs, int ng, const int* __restrict__ tok, float* __restrict__ out, int dim,
                                    float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim) return;
    const size_t r = (size_t)tok[blockIdx.y];
    const float v = __half2float(scales[r * ng + i / gs]) * (float)q[r * row_bytes + i];
    out[(size_t)blockIdx.y * dim + i] = scale != 1.f ? v * scale : v;
}
