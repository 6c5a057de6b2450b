// norm.cu: the kernels that reduce a whole row: RMSNorm, the residual add
// fused with RMSNorm, and argmax. Each waits for its predecessors with
// pdl_wait (pdl.cuh), so it may be launched with programmatic dependent
// launch.
//
// At decode a row is one token, a single block, so these kernels are bound
// by memory latency, not bandwidth: every thread loads all its elements
// (16-byte loads, up to NV of them held in registers) before it uses any,
// so a row costs one round trip to memory instead of one per element.
#include <stdint.h>

#include "pdl.cuh"

#define NV 4  // float4s a thread keeps in registers

// row_sum adds v over the block (at most 1024 threads); every thread gets
// the total. red holds 32 floats.
__device__ __forceinline__ float row_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.f;
    const int nw = (blockDim.x + 31) >> 5;
    for (int w = 0; w < nw; w++) v += red[w];
    return v;
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float sq4(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }
__device__ __forceinline__ float4 scale4(float4 a, float q, float4 g, float w_add) {
    return make_float4(a.x * q * (g.x + w_add), a.y * q * (g.y + w_add), a.z * q * (g.z + w_add),
                       a.w * q * (g.w + w_add));
}

// norm_row writes y = x / sqrt(mean(x^2) + eps) * (w + w_add) for one row
// of n (a multiple of 4, buffers 16-byte aligned); with r, x += r first
// (x is updated in place).
__device__ __forceinline__ void norm_row(float* x, const float* r,
                                         const float* __restrict__ w, float* __restrict__ y, int n, float eps,
                                         float w_add) {
    __shared__ float red[32];
    float4* x4 = reinterpret_cast<float4*>(x);
    const float4* r4 = reinterpret_cast<const float4*>(r);
    const int n4 = n >> 2, t = threadIdx.x, nt = blockDim.x;
    float4 v[NV];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = t + k * nt;
        if (i < n4) v[k] = r ? add4(ld_dep(x4 + i), ld_dep(r4 + i)) : ld_dep(x4 + i);
    }
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = t + k * nt;
        if (i < n4) {
            if (r) x4[i] = v[k];
            s += sq4(v[k]);
        }
    }
    for (int i = t + NV * nt; i < n4; i += nt) {  // rows longer than NV*4*blockDim
        const float4 a = r ? add4(ld_dep(x4 + i), ld_dep(r4 + i)) : ld_dep(x4 + i);
        if (r) x4[i] = a;
        s += sq4(a);
    }
    const float q = rsqrtf(row_sum(s, red) / (float)n + eps);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* y4 = reinterpret_cast<float4*>(y);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = t + k * nt;
        if (i < n4) y4[i] = scale4(v[k], q, w4[i], w_add);
    }
    for (int i = t + NV * nt; i < n4; i += nt) y4[i] = scale4(ld_dep(x4 + i), q, w4[i], w_add);
}

// norm_row_scalar is norm_row for rows whose length is not a multiple of 4
// or whose buffers are not 16-byte aligned.
__device__ void norm_row_scalar(float* x, const float* r, const float* __restrict__ w,
                                float* __restrict__ y, int n, float eps, float w_add) {
    __shared__ float red[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float a = r ? ld_dep(x + i) + ld_dep(r + i) : ld_dep(x + i);
        if (r) x[i] = a;
        s += a * a;
    }
    const float q = rsqrtf(row_sum(s, red) / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = ld_dep(x + i) * q * (w[i] + w_add);
}

// norm picks norm_row or norm_row_scalar.
__device__ __forceinline__ void norm(float* x, const float* r, const float* w, float* y, int n, float eps,
                                     float w_add) {
    pdl_launch_dependents();
    pdl_wait();
    const uintptr_t a = (uintptr_t)x | (uintptr_t)r | (uintptr_t)w | (uintptr_t)y;
    if ((n & 3) == 0 && (a & 15) == 0)
        norm_row(x, r, w, y, n, eps, w_add);
    else
        norm_row_scalar(x, r, w, y, n, eps, w_add);
}

// rmsnorm: one block per row of n;
// y = x / sqrt(mean(x^2) + eps) * (w + w_add) (w_add is 1 for Gemma, whose
// norm weights are stored minus one).
extern "C" __global__ void __launch_bounds__(1024) rmsnorm(const float* x, const float* __restrict__ w,
                                                           float* __restrict__ y, int n, float eps, float w_add) {
    const size_t off = (size_t)blockIdx.x * n;
    norm(const_cast<float*>(x) + off, nullptr, w, y + off, n, eps, w_add);
}

// add_rmsnorm: the residual add and the RMSNorm after it in one pass, one
// block per row of n: x += r, then
// y = x / sqrt(mean(x^2) + eps) * (w + w_add).
extern "C" __global__ void __launch_bounds__(1024) add_rmsnorm(float* __restrict__ x, const float* r,
                                                               const float* __restrict__ w, float* __restrict__ y,
                                                               int n, float eps, float w_add) {
    const size_t off = (size_t)blockIdx.x * n;
    norm(x + off, r + off, w, y + off, n, eps, w_add);
}

// better reports whether (v, i) beats (bv, bi): larger, or equal and first.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// argmax writes the index of the largest of x[0..n) (the first on ties;
// NaNs never win) to out[0]. With tok set it also chains the next decode
// step (Backend.ChainGreedy): tok[0] becomes the index (0 where none won)
// and pos[0] the next position; with host set (two ints of mapped host
// memory) the index goes to host[pos & 1] too, so no copy follows the
// step. Blocks of AT threads each take a share of x (float4s g, g + G,
// ..., AU of them loaded at once) and write their best to part[block];
// the last block to finish (count, zero between launches) combines them:
// a large vocabulary's logits are read by many SMs at once, not by one
// block's 1024 threads.
#define AT 256
#define AU 4
extern "C" __global__ void __launch_bounds__(AT) argmax(const float* x, int n, int* __restrict__ out,
                                                        int* __restrict__ tok, int* __restrict__ pos,
                                                        int* __restrict__ host, int2* __restrict__ part,
                                                        int* __restrict__ count) {
    __shared__ float bv[AT / 32];
    __shared__ int bi[AT / 32];
    __shared__ int last;
    pdl_launch_dependents();
    pdl_wait();
    float v = -INFINITY;
    int idx = 0x7fffffff;
    const int t = threadIdx.x, g = blockIdx.x * AT + t, G = gridDim.x * AT;
    // x may start mid-float4 (a token's logits inside a larger buffer):
    // the first head elements are read one by one.
    const int head = min(n, (int)(((16 - ((uintptr_t)x & 15)) & 15) >> 2));
    if (g < head && ld_dep(x + g) > v) v = ld_dep(x + g), idx = g;
    const int n4 = (n - head) >> 2;
    const float4* x4 = reinterpret_cast<const float4*>(x + head);
    for (int i0 = g; i0 < n4; i0 += AU * G) {
        float4 a[AU];
#pragma unroll
        for (int k = 0; k < AU; k++)
            if (i0 + k * G < n4) a[k] = ld_dep(x4 + i0 + k * G);
#pragma unroll
        for (int k = 0; k < AU; k++) {
            const int i = head + 4 * (i0 + k * G);
            if (i0 + k * G < n4) {
                if (a[k].x > v) v = a[k].x, idx = i;
                if (a[k].y > v) v = a[k].y, idx = i + 1;
                if (a[k].z > v) v = a[k].z, idx = i + 2;
                if (a[k].w > v) v = a[k].w, idx = i + 3;
            }
        }
    }
    for (int i = head + 4 * n4 + g; i < n; i += G)  // the tail past whole float4s
        if (ld_dep(x + i) > v) v = ld_dep(x + i), idx = i;
    // best_of_block leaves the block's best in (v, idx) of every thread.
    auto best_of_block = [&]() {
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (better(ov, oi, v, idx)) v = ov, idx = oi;
        }
        if ((t & 31) == 0) bv[t >> 5] = v, bi[t >> 5] = idx;
        __syncthreads();
        v = bv[0], idx = bi[0];
        for (int w = 1; w < AT / 32; w++)
            if (better(bv[w], bi[w], v, idx)) v = bv[w], idx = bi[w];
    };
    best_of_block();
    if (gridDim.x > 1) {
        __syncthreads();  // (bv and bi are read again below)
        if (t == 0) {
            part[blockIdx.x] = make_int2(__float_as_int(v), idx);
            __threadfence();
            last = atomicAdd(count, 1) == (int)gridDim.x - 1;
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        v = -INFINITY, idx = 0x7fffffff;
        for (int b = t; b < (int)gridDim.x; b += AT) {
            const int2 p = __ldcg(part + b);
            if (better(__int_as_float(p.x), p.y, v, idx)) v = __int_as_float(p.x), idx = p.y;
        }
        best_of_block();
    }
    if (t == 0) {
        out[0] = idx;
        if (tok != nullptr) {
            const int p = pos[0];
            tok[0] = idx < n ? idx : 0, pos[0] = p + 1;
            // two slots by the position's parity: the host reads one
            // while the next step, already queued, writes the other
            if (host != nullptr) reinterpret_cast<volatile int*>(host)[p & 1] = idx;
        }
        if (gridDim.x > 1) *count = 0;
    }
}
