// attn_prefill.cu: causal attention for a prompt (many queries at once),
// flash style: a block takes QT queries of one head and walks the keys in
// tiles of TILE positions staged in shared memory, keeping a running max,
// sum and output (online softmax), so the scores never reach memory.
//
// Four threads share a query: thread s of the four holds the head's
// dimensions 16i+4s..16i+4s+3 of q and of the output, so one float4 read
// of a staged key serves its four FMAs and the four threads of a query
// read 64 consecutive bytes (the other queries of the warp read the same
// bytes: a broadcast). The partial dot products meet by two shuffles.
#include <stdint.h>

#include "kv.cuh"

#define QT 64  // queries a block

// attn_prefill: q and out are [n, heads, hd]; kc and vc the layer's cache
// [max_seq, kv_heads*hd] of type KT (kv.cuh; ksc, vsc the q8 scales
// [max_seq, kv_heads]), already holding this step's keys and values;
// query y sits at position pos[y] and sees positions 0..pos[y] (window > 0:
// only the last window of them). Query head h reads kv head
// h / (heads / kv_heads). Grid: (heads, ceil(n/QT)); block: 4*QT threads.
template <int HD, int KT>
__device__ void attn_prefill(const float* __restrict__ q, const void* __restrict__ kc,
                             const void* __restrict__ vc, const float* __restrict__ ksc,
                             const float* __restrict__ vsc, float* __restrict__ out, int n, int heads,
                             int kv_heads, int max_seq, const int* __restrict__ pos, float scale, float softcap,
                             int window) {
    constexpr int NF = HD / 16;  // float4s of q (and of the output) a thread holds
    constexpr int TILE = HD > 128 ? 16 : 32;  // keys a tile (static shared memory holds 48 KiB)
    __shared__ float4 ks[TILE][HD / 4], vs[TILE][HD / 4];
    const int t = threadIdx.x, s = t & 3, qi = t >> 2;
    const int h = blockIdx.x, kvh = h / (heads / kv_heads), kvdim = kv_heads * HD;
    const int y = blockIdx.y * QT + qi;
    const bool valid = y < n;
    const int p = valid ? pos[y] : -1;
    const int last = pos[min(blockIdx.y * QT + QT - 1, n - 1)];
    const int from = window > 0 ? p - window + 1 : 0;  // this query's first visible position
    const int start = window > 0 ? max(0, pos[blockIdx.y * QT] - window + 1) / TILE * TILE : 0;

    float4 qv[NF], acc[NF];
    const float4* q4 = reinterpret_cast<const float4*>(q + ((size_t)(valid ? y : 0) * heads + h) * HD);
#pragma unroll
    for (int i = 0; i < NF; i++) {
        const float4 a = q4[4 * i + s];
        qv[i] = make_float4(a.x * scale, a.y * scale, a.z * scale, a.w * scale);
        acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float m = -INFINITY, l = 0.f;

    for (int k0 = start; k0 <= last; k0 += TILE) {
        __syncthreads();
        for (int i = t; i < TILE * HD / 4; i += blockDim.x) {
            const int j = i / (HD / 4), c = i % (HD / 4), r = min(k0 + j, max_seq - 1);
            const size_t off = (size_t)r * kvdim + (size_t)kvh * HD + 4 * c;
            float a[4], b[4];
            kv_load<KT, 4>(kc, off, a);
            kv_load<KT, 4>(vc, off, b);
            const float ka = KT == KV_Q8 ? ksc[(size_t)r * kv_heads + kvh] : 1.f;
            const float va = KT == KV_Q8 ? vsc[(size_t)r * kv_heads + kvh] : 1.f;
            ks[j][c] = make_float4(a[0] * ka, a[1] * ka, a[2] * ka, a[3] * ka);
            vs[j][c] = make_float4(b[0] * va, b[1] * va, b[2] * va, b[3] * va);
        }
        __syncthreads();
        float sc[TILE];
        float mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < TILE; j++) {
            float d = 0.f;
#pragma unroll
            for (int i = 0; i < NF; i++) {
                const float4 k = ks[j][4 * i + s];
                d += qv[i].x * k.x + qv[i].y * k.y + qv[i].z * k.z + qv[i].w * k.w;
            }
            d += __shfl_xor_sync(0xffffffffu, d, 1);
            d += __shfl_xor_sync(0xffffffffu, d, 2);
            if (softcap > 0.f) d = softcap * tanhf(d / softcap);  // Gemma 2's capped scores
            sc[j] = k0 + j <= p && k0 + j >= from ? d : -INFINITY;
            mt = fmaxf(mt, sc[j]);
        }
        const float mn = fmaxf(m, mt);
        if (mn == -INFINITY) continue;  // nothing visible yet (a padding query)
        const float alpha = __expf(m - mn);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < NF; i++) acc[i].x *= alpha, acc[i].y *= alpha, acc[i].z *= alpha, acc[i].w *= alpha;
#pragma unroll
        for (int j = 0; j < TILE; j++) {
            const float e = __expf(sc[j] - mn);
            l += e;
#pragma unroll
            for (int i = 0; i < NF; i++) {
                const float4 v = vs[j][4 * i + s];
                acc[i].x += e * v.x, acc[i].y += e * v.y, acc[i].z += e * v.z, acc[i].w += e * v.w;
            }
        }
        m = mn;
    }
    if (!valid) return;
    const float inv = 1.f / l;
    float4* o4 = reinterpret_cast<float4*>(out + ((size_t)y * heads + h) * HD);
#pragma unroll
    for (int i = 0; i < NF; i++) o4[4 * i + s] = make_float4(acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv);
}

// One kernel per head size and cache type (attn_prefill_64, _64_f16, _64_q8, ...).
#define ATTN_PREFILL_KT(HD, KT, kts)                                                                                \
    extern "C" __global__ void __launch_bounds__(4 * QT)                                                           \
        attn_prefill_##HD##kts(const float* q, const void* kc, const void* vc, const float* ksc, const float* vsc, \
                               float* out, int n, int heads, int kv_heads, int max_seq, const int* pos, float scale, \
                               float softcap, int window) {                                                        \
        attn_prefill<HD, KT>(q, kc, vc, ksc, vsc, out, n, heads, kv_heads, max_seq, pos, scale, softcap, window);  \
    }
#define ATTN_PREFILL(HD)                  \
    ATTN_PREFILL_KT(HD, KV_F32, )         \
    ATTN_PREFILL_KT(HD, KV_F16, _f16)     \
    ATTN_PREFILL_KT(HD, KV_Q8, _q8)
ATTN_PREFILL(64)
ATTN_PREFILL(128)
ATTN_PREFILL(256)
