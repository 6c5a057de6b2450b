// attn_decode.cu: attention of one new token over the KV cache, with the
// rotary embedding of q and k folded in, split over the sequence
// (flash-decoding).
//
// Grid: (kv_heads * split, S). Block (blk, s) takes G = heads/kv_heads/
// split of the query heads that share kv head blk/split, over the s-th of
// Su equal slices of the visible positions, Su being one a 256 of them (at
// most S; the blocks past Su return at once, and one slice needs no
// combining pass): every key and value row is read
// once for those G heads (split > 1 spreads a large group over more blocks
// when the model has few kv heads). S is fixed when the step is launched (a CUDA graph replays it for
// every position); the slices' length follows the position, read from
// device memory. With S > 1 each block writes its slice's max, sum and
// unnormalised output, and the last block of a kv head to finish (a
// counter in device memory) combines the S partials and resets the
// counter.
//
// Lanes: a warp's 32 lanes form G2 groups (G rounded up to a power of two)
// of LP = 32/G2 lanes; group g holds query head g, each lane DL = HD/LP of
// its dimensions. A warp scores one position at a time (the G dot products
// at once, log2(LP) shuffles), then sums values the same way.
#include <stdint.h>

#include "pdl.cuh"

#define NW 16  // warps a block

// attn_decode: q [heads, HD] and kcur, vcur [kv_heads, HD] are the step's
// projections (q and k rotated here when rope_cs is given, else already;
// rope_cs[p*HD/2 + j] holds cos and sin of position p's angle j);
// kc, vc the layer's caches [max_seq, kv_heads*HD]; the token sits at
// position pos[0] and sees positions max(0, pos-window+1) (window 0: 0)
// to pos. part holds heads*S*(HD+2) floats, count kv_heads*split ints that
// are zero between launches. Dynamic shared memory: attnDecodeShared (Go).
template <int HD, int G2>
__device__ void attn_decode(const float* __restrict__ q, const float* __restrict__ kcur,
                            const float* __restrict__ vcur, float* __restrict__ kc, float* __restrict__ vc,
                            float* __restrict__ out, float* __restrict__ part, int* __restrict__ count, int heads,
                            int kv_heads, const int* __restrict__ pos, float scale,
                            const float2* __restrict__ rope_cs, int window, int chunk_max) {
    constexpr int LP = 32 / G2, DL = HD / LP;
    static_assert(DL % 2 == 0 && DL <= 64, "lane slice");
    extern __shared__ float sm[];
    __shared__ float stat[2 * G2];
    __shared__ int last;
    // Block blk takes G of its kv head's query heads (the group split in
    // gridDim.x / kv_heads parts): heads blk*G to blk*G + G - 1.
    const int blk = blockIdx.x, split = gridDim.x / kv_heads, kvh = blk / split;
    const int G = heads / kv_heads / split, S = gridDim.y, s = blockIdx.y;
    const int kvdim = kv_heads * HD, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int g = lane / LP, d0 = (lane % LP) * DL;
    const bool active = g < G;
    float* qs = sm;                   // [G][HD] rotated queries
    float* ks = qs + G * HD;          // [HD] the step's rotated key
    float* vs = ks + HD;              // [HD] the step's value
    float* sc = vs + HD;              // [G][chunk_max] scores, then weights
    float* red = sc + G * chunk_max;  // [NW][G][HD] each warp's value sums

    // The next kernel (the o product) may be placed at once: it takes what
    // this one's few blocks leave of the GPU and fetches its first weights.
    pdl_launch_dependents();
    // Read before the wait, as nothing of this step writes them: the
    // position (set before the step began), its rotation, and the warp's
    // first cached keys (earlier positions, stored by earlier steps).
    const int p = pos[0], n = p + 1;
    const int first = window > 0 ? max(0, p - window + 1) : 0;
    const int Su = min(S, (n - first + 255) / 256);  // slices in use at this position
    if (s >= Su) return;
    const int len = (n - first + Su - 1) / Su;  // at most chunk_max (attnDecode.chunk)
    const int lo = first + s * len, hi = min(n, lo + len);
    const bool rot = rope_cs != nullptr && t < (G + 1) * (HD / 2);
    const float2 cs0 = rot ? rope_cs[(size_t)p * (HD / 2) + t % (HD / 2)] : make_float2(1.f, 0.f);
    constexpr int UN = DL <= 16 ? 4 : 2;   // positions a warp loads at once
    constexpr bool KPRE = DL <= 8;         // (registers: UN*DL floats)
    float2 kpre[KPRE ? UN : 1][DL / 2];
    if (KPRE)
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = lo + warp + u * NW;
            if (x < hi && x != p)
#pragma unroll
                for (int i = 0; i < DL / 2; i++)
                    kpre[u][i] = *reinterpret_cast<const float2*>(kc + (size_t)x * kvdim + (size_t)kvh * HD + d0 + 2 * i);
        }
    pdl_wait();
    // Stage q (G heads) and the step's k and v; rotate q and k (HF rotate
    // half: pairs (i, i + HD/2)).
    const float* qg = q + (size_t)blk * G * HD;
    for (int i = t; i < G * HD; i += blockDim.x) qs[i] = qg[i];
    for (int i = t; i < HD; i += blockDim.x) ks[i] = kcur[(size_t)kvh * HD + i], vs[i] = vcur[(size_t)kvh * HD + i];
    __syncthreads();
    if (rope_cs != nullptr) {
        for (int i = t; i < (G + 1) * (HD / 2); i += blockDim.x) {
            const int h = i / (HD / 2), j = i % (HD / 2);
            float* v = h < G ? qs + h * HD : ks;
            const float2 cs = i == t ? cs0 : rope_cs[(size_t)p * (HD / 2) + j];
            const float a = v[j], b = v[j + HD / 2];
            v[j] = a * cs.x - b * cs.y;
            v[j + HD / 2] = b * cs.x + a * cs.y;
        }
        __syncthreads();
    }
    // The slice that holds the token stores its k and v in the caches.
    if (lo <= p && p < hi && blk % split == 0)
        for (int i = t; i < HD; i += blockDim.x) {
            kc[(size_t)p * kvdim + (size_t)kvh * HD + i] = ks[i];
            vc[(size_t)p * kvdim + (size_t)kvh * HD + i] = vs[i];
        }

    // Scores: warp w takes positions lo+w, lo+w+NW, ..., UN at a time
    // (their loads issued together; the first UN's before the wait).
    float qr[DL];
#pragma unroll
    for (int i = 0; i < DL; i++) qr[i] = active ? qs[g * HD + d0 + i] * scale : 0.f;
    for (int x0 = lo + warp; x0 < hi; x0 += NW * UN) {
        float2 kv[UN][DL / 2];
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = x0 + u * NW;
            if (x >= hi) break;
            const float* kr = x == p ? ks : kc + (size_t)x * kvdim + (size_t)kvh * HD;
            const bool pre = KPRE && x0 == lo + warp && x != p;
#pragma unroll
            for (int i = 0; i < DL / 2; i++) kv[u][i] = pre ? kpre[u % (KPRE ? UN : 1)][i] : *reinterpret_cast<const float2*>(kr + d0 + 2 * i);
        }
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = x0 + u * NW;
            if (x >= hi) break;
            float d = 0.f;
#pragma unroll
            for (int i = 0; i < DL / 2; i++) d += qr[2 * i] * kv[u][i].x + qr[2 * i + 1] * kv[u][i].y;
#pragma unroll
            for (int o = LP / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            if (active && lane % LP == 0) sc[g * chunk_max + (x - lo)] = d;
        }
    }
    __syncthreads();
    // Per head: the slice's max, then weights exp(score - max) and their sum.
    for (int h = warp; h < G; h += NW) {
        float m = -INFINITY;
        for (int i = lane; i < hi - lo; i += 32) m = fmaxf(m, sc[h * chunk_max + i]);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.f;
        for (int i = lane; i < hi - lo; i += 32) {
            const float e = __expf(sc[h * chunk_max + i] - m);
            sc[h * chunk_max + i] = e;
            l += e;
        }
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        if (lane == 0) stat[h] = m, stat[G2 + h] = l;
    }
    __syncthreads();
    // Values: the same positions per warp, weighted, UN at a time.
    float acc[DL];
#pragma unroll
    for (int i = 0; i < DL; i++) acc[i] = 0.f;
    for (int x0 = lo + warp; x0 < hi; x0 += NW * UN) {
        float2 vv[UN][DL / 2];
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = x0 + u * NW;
            if (x >= hi) break;
            const float* vr = x == p ? vs : vc + (size_t)x * kvdim + (size_t)kvh * HD;
#pragma unroll
            for (int i = 0; i < DL / 2; i++) vv[u][i] = *reinterpret_cast<const float2*>(vr + d0 + 2 * i);
        }
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = x0 + u * NW;
            if (x >= hi) break;
            const float w = active ? sc[g * chunk_max + (x - lo)] : 0.f;
#pragma unroll
            for (int i = 0; i < DL / 2; i++) acc[2 * i] += w * vv[u][i].x, acc[2 * i + 1] += w * vv[u][i].y;
        }
    }
    if (active)
#pragma unroll
        for (int i = 0; i < DL; i++) red[(warp * G + g) * HD + d0 + i] = acc[i];
    __syncthreads();

    // The block's sums per head; one slice: the output.
    if (Su == 1) {
        for (int i = t; i < G * HD; i += blockDim.x) {
            float a = 0.f;
#pragma unroll
            for (int w = 0; w < NW; w++) a += red[w * G * HD + i];
            out[(size_t)blk * G * HD + i] = a / stat[G2 + i / HD];
        }
        return;
    }
    float* mine = part + ((size_t)blk * S + s) * G * (HD + 2);
    for (int i = t; i < G * HD; i += blockDim.x) {
        float a = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++) a += red[w * G * HD + i];
        const int h = i / HD, j = i % HD;
        mine[h * (HD + 2) + j] = a;
        if (j == 0) mine[h * (HD + 2) + HD] = stat[h], mine[h * (HD + 2) + HD + 1] = stat[G2 + h];
    }
    __threadfence();
    __syncthreads();
    if (t == 0) last = atomicAdd(count + blk, 1) == Su - 1;
    __syncthreads();
    if (!last) return;
    // The last block of this kv head: combine the S partials. First each
    // slice's weight per head, exp(m_s - max m) (sc is free now), and the
    // total sums, then the outputs.
    __threadfence();
    const float* all = part + (size_t)blk * S * G * (HD + 2);
    for (int h = warp; h < G; h += NW) {
        float m = -INFINITY;
        for (int k = lane; k < Su; k += 32) m = fmaxf(m, __ldcg(all + (k * G + h) * (HD + 2) + HD));
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.f;
        for (int k = lane; k < Su; k += 32) {
            const float e = __expf(__ldcg(all + (k * G + h) * (HD + 2) + HD) - m);
            sc[h * Su + k] = e;
            l += e * __ldcg(all + (k * G + h) * (HD + 2) + HD + 1);
        }
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        if (lane == 0) stat[h] = 1.f / l;
    }
    __syncthreads();
    for (int i = t; i < G * HD; i += blockDim.x) {
        const int h = i / HD, j = i % HD;
        float a = 0.f;
        for (int k = 0; k < Su; k++) a += sc[h * Su + k] * __ldcg(all + (k * G + h) * (HD + 2) + j);
        out[(size_t)blk * G * HD + i] = a * stat[h];
    }
    if (t == 0) count[blk] = 0;
}

#define ATTN_DECODE(HD, G2)                                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * NW)                                                    \
        attn_decode_##HD##_##G2(const float* q, const float* kcur, const float* vcur, float* kc, float* vc,   \
                                float* out, float* part, int* count, int heads, int kv_heads, const int* pos, \
                                float scale, const float2* rope_cs, int window, int chunk_max) {              \
        attn_decode<HD, G2>(q, kcur, vcur, kc, vc, out, part, count, heads, kv_heads, pos, scale, rope_cs,    \
                            window, chunk_max);                                                               \
    }
ATTN_DECODE(64, 1)
ATTN_DECODE(64, 2)
ATTN_DECODE(64, 4)
ATTN_DECODE(64, 8)
ATTN_DECODE(64, 16)
ATTN_DECODE(128, 1)
ATTN_DECODE(128, 2)
ATTN_DECODE(128, 4)
ATTN_DECODE(128, 8)
ATTN_DECODE(128, 16)
ATTN_DECODE(256, 1)
ATTN_DECODE(256, 2)
ATTN_DECODE(256, 4)
ATTN_DECODE(256, 8)
