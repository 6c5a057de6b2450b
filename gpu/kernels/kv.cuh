// kv.cuh: the KV cache's element types, read and written in one place.
//
// A cache row [kv_heads * hd] holds float32 (KV_F32), float16 (KV_F16) or
// int8 codes (KV_Q8) with one float32 scale per head and position in a
// separate array [positions, kv_heads]: value = code * scale, the scale
// being the head row's largest magnitude / 127 (0 for a row of zeros). The
// CPU backend rounds its cache the same way (model/kvcache.go).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#define KV_F32 0
#define KV_F16 1
#define KV_Q8 2

// kv_load reads N (2, 4 or 8) consecutive values of a cache of type KT
// from element i (a multiple of N) as floats: a q8 cache's codes, which
// the caller multiplies by the row's scale.
template <int KT, int N>
__device__ __forceinline__ void kv_load(const void* c, size_t i, float* out) {
    static_assert(N == 2 || N == 4 || N == 8, "kv_load takes 2, 4 or 8 values");
    if constexpr (KT == KV_F32) {
        const float* p = static_cast<const float*>(c) + i;
        if constexpr (N == 2) {
            const float2 v = *reinterpret_cast<const float2*>(p);
            out[0] = v.x, out[1] = v.y;
        } else {
#pragma unroll
            for (int j = 0; j < N; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(p + j);
                out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
            }
        }
    } else if constexpr (KT == KV_F16) {
        const __half* p = static_cast<const __half*>(c) + i;
        if constexpr (N == 2) {
            const float2 v = __half22float2(*reinterpret_cast<const __half2*>(p));
            out[0] = v.x, out[1] = v.y;
        } else if constexpr (N == 4) {
            const uint2 u = *reinterpret_cast<const uint2*>(p);
            const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
            const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
            out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
        } else {
            const uint4 u = *reinterpret_cast<const uint4*>(p);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
                out[2 * j] = a.x, out[2 * j + 1] = a.y;
            }
        }
    } else {
        const int8_t* p = static_cast<const int8_t*>(c) + i;
        if constexpr (N == 2) {
            const char2 v = *reinterpret_cast<const char2*>(p);
            out[0] = v.x, out[1] = v.y;
        } else {
#pragma unroll
            for (int j = 0; j < N; j += 4) {
                const char4 v = *reinterpret_cast<const char4*>(p + j);
                out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
            }
        }
    }
}

// kv_get reads one value of a cache of type KT (a q8 cache's code).
template <int KT>
__device__ __forceinline__ float kv_get(const void* c, size_t i) {
    if constexpr (KT == KV_F32) return static_cast<const float*>(c)[i];
    if constexpr (KT == KV_F16) return __half2float(static_cast<const __half*>(c)[i]);
    return (float)static_cast<const int8_t*>(c)[i];
}

// kv_round is the value a cache of type KT keeps of v, given the row's
// scale for q8 (kv_scale).
template <int KT>
__device__ __forceinline__ float kv_round(float v, float scale) {
    if constexpr (KT == KV_F32) return v;
    if constexpr (KT == KV_F16) return __half2float(__float2half_rn(v));
    return scale > 0.f ? fminf(fmaxf(rintf(v / scale), -127.f), 127.f) * scale : 0.f;
}

// kv_scale is a q8 head row's scale from its largest magnitude.
__device__ __forceinline__ float kv_scale(float amax) { return amax / 127.f; }

// kv_put stores v (one value) at element i of a cache of type KT, with
// the row's scale for q8.
template <int KT>
__device__ __forceinline__ void kv_put(void* c, size_t i, float v, float scale) {
    if constexpr (KT == KV_F32) static_cast<float*>(c)[i] = v;
    else if constexpr (KT == KV_F16) static_cast<__half*>(c)[i] = __float2half_rn(v);
    else static_cast<int8_t*>(c)[i] = (int8_t)(scale > 0.f ? fminf(fmaxf(rintf(v / scale), -127.f), 127.f) : 0.f);
}

// kv_pairs reads DL (an even number) consecutive values from element i
// into pairs, as wide as kv_load reads.
template <int KT, int DL>
__device__ __forceinline__ void kv_pairs(const void* c, size_t i, float2* out) {
    constexpr int N = DL % 8 == 0 ? 8 : DL % 4 == 0 ? 4 : 2;
#pragma unroll
    for (int j = 0; j < DL; j += N) {
        float v[N];
        kv_load<KT, N>(c, i + j, v);
#pragma unroll
        for (int k = 0; k < N; k += 2) out[(j + k) / 2] = make_float2(v[k], v[k + 1]);
    }
}

// kv_at is the address of element i of a cache of type KT.
template <int KT>
__device__ __forceinline__ const void* kv_at(const void* c, size_t i) {
    if constexpr (KT == KV_F32) return static_cast<const float*>(c) + i;
    if constexpr (KT == KV_F16) return static_cast<const __half*>(c) + i;
    return static_cast<const int8_t*>(c) + i;
}
