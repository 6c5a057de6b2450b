// attn_decode.cu: attention of one new token over the KV cache, with the
// rotary embedding of q and k folded in, split over the sequence
// (flash-decoding).
//
// Grid: (kv_heads * split, S). Block (blk, s) takes G = heads/kv_heads/
// split of the query heads that share kv head blk/split, over the s-th of
// Su equal slices of the visible positions, Su being one a slice_len of
// them (at most S; the blocks past Su return at once, and one slice needs
// no combining pass): every key and value row is read
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
// its dimensions, in registers from the load to the output. Each warp
// takes its own positions with a softmax of its own (online: its running
// max, sum of weights and weighted values, UN positions at a time); one
// barrier, then the block combines its warps' sums. The rotation pairs a
// lane's dimensions with those of the lane LP/2 away (HF rotate half).
#include <stdint.h>

#include "kv.cuh"
#include "pdl.cuh"

#define NW 16  // warps a block

// attn_decode: q [heads, HD] and kcur, vcur [kv_heads, HD] are the step's
// projections (q and k rotated here when rope_cs is given, else already;
// rope_cs[p*HD/2 + j] holds cos and sin of position p's angle j);
// kc, vc the layer's caches [max_seq, kv_heads*HD] of type KT (kv.cuh;
// ksc, vsc their q8 scales [max_seq, kv_heads], else null), the step's k
// and v stored there as the cache keeps them and attended so too; the token sits at
// position pos[0] and sees positions max(0, pos-window+1) (window 0: 0)
// to pos. part holds heads*S*(HD+2) floats, count kv_heads*split ints that
// are zero between launches. Dynamic shared memory: NW*G*HD floats
// (attnDecode.shared in Go).
template <int HD, int G2, int UNX, bool CAP, int KT>
__device__ void attn_decode(const float* q, const float* kcur, const float* vcur, void* __restrict__ kc, void* __restrict__ vc,
                            float* __restrict__ ksc, float* __restrict__ vsc,
                            float* __restrict__ out, float* __restrict__ part, int* __restrict__ count, int heads,
                            int kv_heads, const int* __restrict__ pos, float scale, float softcap,
                            const float2* __restrict__ rope_cs, int window, int slice_len) {
    constexpr int LP = 32 / G2, DL = HD / LP;
    static_assert(DL % 2 == 0 && DL <= 64 && LP >= 2, "lane slice");
    static_assert(NW <= 32 && HD % 32 == 0, "the combine's factors: a lane a warp, one head a warp");
    extern __shared__ float red[];  // [NW][G][HD] each warp's weighted value sums
    __shared__ float wm[NW][G2], wl[NW][G2], stat[G2];
    __shared__ int last;
    // Block blk takes G of its kv head's query heads (the group split in
    // gridDim.x / kv_heads parts): heads blk*G to blk*G + G - 1.
    const int blk = blockIdx.x, split = gridDim.x / kv_heads, kvh = blk / split;
    const int G = heads / kv_heads / split, S = gridDim.y, s = blockIdx.y;
    const int kvdim = kv_heads * HD, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int g = lane / LP, li = lane % LP, d0 = li * DL;
    const bool active = g < G;

    // The next kernel (the o product) may be placed at once: it takes what
    // this one's few blocks leave of the GPU and fetches its first weights.
    pdl_launch_dependents();
    // Read before the wait, as nothing of this step writes them: the
    // position (set before the step began), its rotation, and the warp's
    // first cached keys and values (earlier positions, stored by earlier
    // steps).
    const int p = pos[0], n = p + 1;
    const int first = window > 0 ? max(0, p - window + 1) : 0;
    const int Su = min(S, (n - first + slice_len - 1) / slice_len);  // slices in use at this position
    if (s >= Su) return;
    const int len = (n - first + Su - 1) / Su;
    const int lo = first + s * len, hi = min(n, lo + len);
    const bool rot = rope_cs != nullptr;
    constexpr bool CSPRE = DL <= 8;  // (registers: DL float2)
    float2 cs[CSPRE ? DL : 1];
    if (CSPRE && rot)
#pragma unroll
        for (int i = 0; i < DL; i++) cs[i] = rope_cs[(size_t)p * (HD / 2) + (d0 + i) % (HD / 2)];
    // UN: positions a warp loads at once (their keys and values: 2*UN*DL
    // registers), or UNX where set (the _un5 kernels below).
    constexpr int UN = UNX > 0 ? UNX : DL <= 2 ? 8 : DL <= 4 ? 4 : DL <= 8 ? 2 : 1;
    constexpr bool KPRE = DL <= 8, VPRE = DL <= 4;  // (registers: UN*DL floats each)
    float2 kpre[KPRE ? UN : 1][DL / 2], vpre[VPRE ? UN : 1][DL / 2];
    const size_t head = (size_t)kvh * HD + d0;  // the lane's first dimension in a cache row
#pragma unroll
    for (int u = 0; u < UN; u++) {
        const int x = lo + warp + u * NW;
        if (x < hi && x != p) {
            if (KPRE) kv_pairs<KT, DL>(kc, (size_t)x * kvdim + head, kpre[u % (KPRE ? UN : 1)]);
            if (VPRE) kv_pairs<KT, DL>(vc, (size_t)x * kvdim + head, vpre[u % (VPRE ? UN : 1)]);
        }
    }
    // Where a lane holds four dimensions (one 128-wide head a block, as
    // for BitNet-2B and Llama-2-7B, or two 64-wide ones), the keys and
    // values of the warp's second round are requested into L1 too, so
    // that round's loads after the wait find them there: a prefetch holds
    // no registers, where loading those values ahead (even as fp16) would
    // take registers from the round in flight. With two dimensions a lane
    // (one 64-wide head a block, as TinyLlama's) a round's loads are half
    // as large, and the prefetches' instructions would cost more than the
    // latency they hide: there are none.
    if (DL == 4)
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = lo + warp + (UN + u) * NW;
            if (x < hi && x != p)
                asm volatile("prefetch.global.L1 [%0];\n\tprefetch.global.L1 [%1];" ::"l"(kv_at<KT>(kc, (size_t)x * kvdim + head)),
                             "l"(kv_at<KT>(vc, (size_t)x * kvdim + head)));
        }
    pdl_wait();
    // The lane's dimensions of its head's q and of the step's k and v,
    // rotated (q and k) with the values of the lane LP/2 away.
    float qr[DL], kr[DL], vr[DL];
    {
        const float* qg = q + ((size_t)blk * G + (active ? g : 0)) * HD + d0;
        const float* kg = kcur + head;
        const float* vg = vcur + head;
#pragma unroll
        for (int i = 0; i < DL; i += 2) {
            const float2 a = ld_dep(reinterpret_cast<const float2*>(qg + i)),
                         b = ld_dep(reinterpret_cast<const float2*>(kg + i)),
                         c = ld_dep(reinterpret_cast<const float2*>(vg + i));
            qr[i] = a.x, qr[i + 1] = a.y, kr[i] = b.x, kr[i + 1] = b.y, vr[i] = c.x, vr[i + 1] = c.y;
        }
    }
    if (rot) {
        const bool upper = li >= LP / 2;  // dimensions HD/2 and up: x[j+HD/2]*cos + x[j]*sin
#pragma unroll
        for (int i = 0; i < DL; i++) {
            const float2 c = CSPRE ? cs[i % (CSPRE ? DL : 1)] : rope_cs[(size_t)p * (HD / 2) + (d0 + i) % (HD / 2)];
            const float qp = __shfl_xor_sync(0xffffffffu, qr[i], LP / 2);
            const float kp = __shfl_xor_sync(0xffffffffu, kr[i], LP / 2);
            qr[i] = upper ? qr[i] * c.x + qp * c.y : qr[i] * c.x - qp * c.y;
            kr[i] = upper ? kr[i] * c.x + kp * c.y : kr[i] * c.x - kp * c.y;
        }
    }
    // The token's k and v as the cache keeps them (a q8 row's scale from
    // its largest magnitude, over the LP lanes that hold the head), which
    // it attends to as later tokens will read them.
    float kscale = 0.f, vscale = 0.f;
    if (KT == KV_Q8) {
        float ka = 0.f, va = 0.f;
#pragma unroll
        for (int i = 0; i < DL; i++) ka = fmaxf(ka, fabsf(kr[i])), va = fmaxf(va, fabsf(vr[i]));
#pragma unroll
        for (int o = LP / 2; o > 0; o >>= 1) {
            ka = fmaxf(ka, __shfl_xor_sync(0xffffffffu, ka, o));
            va = fmaxf(va, __shfl_xor_sync(0xffffffffu, va, o));
        }
        kscale = kv_scale(ka), vscale = kv_scale(va);
    }
#pragma unroll
    for (int i = 0; i < DL; i++) kr[i] = kv_round<KT>(kr[i], kscale), vr[i] = kv_round<KT>(vr[i], vscale);
    // The slice that holds the token stores its k and v in the caches.
    if (lo <= p && p < hi && blk % split == 0 && warp == 0 && g == 0) {
#pragma unroll
        for (int i = 0; i < DL; i++) {
            kv_put<KT>(kc, (size_t)p * kvdim + head + i, kr[i], kscale);
            kv_put<KT>(vc, (size_t)p * kvdim + head + i, vr[i], vscale);
        }
        if (KT == KV_Q8 && li == 0) ksc[(size_t)p * kv_heads + kvh] = kscale, vsc[(size_t)p * kv_heads + kvh] = vscale;
    }
#pragma unroll
    for (int i = 0; i < DL; i++) qr[i] = active ? qr[i] * scale : 0.f;

    // Warp w takes positions lo+w, lo+w+NW, ..., UN at a time (their keys
    // and values loaded together; the first UN's before the wait): their
    // scores, then the running max m, the sum of weights l and the
    // weighted values acc, rescaled when the max grows.
    float m = -INFINITY, l = 0.f, acc[DL];
#pragma unroll
    for (int i = 0; i < DL; i++) acc[i] = 0.f;
    for (int x0 = lo + warp; x0 < hi; x0 += NW * UN) {
        const bool pre = x0 == lo + warp;
        float2 kv[UN][DL / 2], vv[UN][DL / 2];
        float ks[UN], vs[UN];  // a q8 cache's row scales (1 for the token's own, held as values)
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int x = x0 + u * NW;
            if (x >= hi) break;
            const size_t row = (size_t)x * kvdim + head;
            if (x == p) {
#pragma unroll
                for (int i = 0; i < DL / 2; i++) kv[u][i] = make_float2(kr[2 * i], kr[2 * i + 1]), vv[u][i] = make_float2(vr[2 * i], vr[2 * i + 1]);
            } else {
                if (KPRE && pre) {
#pragma unroll
                    for (int i = 0; i < DL / 2; i++) kv[u][i] = kpre[u % (KPRE ? UN : 1)][i];
                } else {
                    kv_pairs<KT, DL>(kc, row, kv[u]);
                }
                if (VPRE && pre) {
#pragma unroll
                    for (int i = 0; i < DL / 2; i++) vv[u][i] = vpre[u % (VPRE ? UN : 1)][i];
                } else {
                    kv_pairs<KT, DL>(vc, row, vv[u]);
                }
            }
            if (KT == KV_Q8) {
                const size_t r = (size_t)x * kv_heads + kvh;
                ks[u] = x == p ? 1.f : ksc[r], vs[u] = x == p ? 1.f : vsc[r];
            }
        }
        float d[UN], mr = m;
#pragma unroll
        for (int u = 0; u < UN; u++) {
            d[u] = -INFINITY;
            if (x0 + u * NW >= hi) break;
            float e = 0.f;
#pragma unroll
            for (int i = 0; i < DL / 2; i++) e += qr[2 * i] * kv[u][i].x + qr[2 * i + 1] * kv[u][i].y;
#pragma unroll
            for (int o = LP / 2; o > 0; o >>= 1) e += __shfl_xor_sync(0xffffffffu, e, o);
            if (KT == KV_Q8) e *= ks[u];
            if (CAP) e = softcap * tanhf(e / softcap);  // Gemma 2's capped scores
            d[u] = e, mr = fmaxf(mr, e);
        }
        const float f = __expf(m - mr);  // (m = -inf at first: 0)
        l *= f;
#pragma unroll
        for (int i = 0; i < DL; i++) acc[i] *= f;
#pragma unroll
        for (int u = 0; u < UN; u++) {
            if (x0 + u * NW >= hi) break;
            const float w = __expf(d[u] - mr);
            l += w;
            const float wv = KT == KV_Q8 ? w * vs[u] : w;
#pragma unroll
            for (int i = 0; i < DL / 2; i++) acc[2 * i] += wv * vv[u][i].x, acc[2 * i + 1] += wv * vv[u][i].y;
        }
        m = mr;
    }
    if (active) {
#pragma unroll
        for (int i = 0; i < DL; i++) red[(warp * G + g) * HD + d0 + i] = acc[i];
        if (li == 0) wm[warp][g] = m, wl[warp][g] = l;
    }
    __syncthreads();

    // The block's sums per head: each warp's rescaled to the largest max
    // (a warp without positions has max -inf and adds nothing). One slice:
    // the output; more: the slice's partial (sums, max, sum of weights).
    // Whole warps take outputs, one head a warp (HD is a multiple of 32):
    // lane w < NW computes warp w's factor exp(m_w - M) once and the
    // lanes take it by a shuffle, rather than every thread computing the
    // NW exponentials (the same factors, sums and order as that).
    float* mine = part + ((size_t)blk * S + s) * G * (HD + 2);
    for (int i = t; i < G * HD; i += blockDim.x) {
        const int h = i / HD, j = i % HD;
        const float mw = lane < NW ? wm[lane][h] : -INFINITY;
        float M = mw;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        const float fw = lane < NW ? __expf(mw - M) : 0.f;
        float a = 0.f, L = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float f = __shfl_sync(0xffffffffu, fw, w);
            a += f * red[(w * G + h) * HD + j];
            L += f * wl[w][h];
        }
        if (Su == 1) {
            out[(size_t)blk * G * HD + i] = a / L;
        } else {
            mine[h * (HD + 2) + j] = a;
            if (j == 0) mine[h * (HD + 2) + HD] = M, mine[h * (HD + 2) + HD + 1] = L;
        }
    }
    if (Su == 1) return;
    __threadfence();
    __syncthreads();
    if (t == 0) last = atomicAdd(count + blk, 1) == Su - 1;
    __syncthreads();
    if (!last) return;
    // The last block of this kv head: combine the S partials. First each
    // slice's weight per head, exp(m_s - max m) (into red, free now), and
    // the total sums, then the outputs.
    __threadfence();
    float* sw = red;  // [G][Su]
    const float* all = part + (size_t)blk * S * G * (HD + 2);
    for (int h = warp; h < G; h += NW) {
        float mx = -INFINITY;
        for (int k = lane; k < Su; k += 32) mx = fmaxf(mx, __ldcg(all + (k * G + h) * (HD + 2) + HD));
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
        for (int k = lane; k < Su; k += 32) {
            const float e = __expf(__ldcg(all + (k * G + h) * (HD + 2) + HD) - mx);
            sw[h * Su + k] = e;
            sum += e * __ldcg(all + (k * G + h) * (HD + 2) + HD + 1);
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) stat[h] = 1.f / sum;
    }
    __syncthreads();
    for (int i = t; i < G * HD; i += blockDim.x) {
        const int h = i / HD, j = i % HD;
        float a = 0.f;
        for (int k = 0; k < Su; k++) a += sw[h * Su + k] * __ldcg(all + (k * G + h) * (HD + 2) + j);
        out[(size_t)blk * G * HD + i] = a * stat[h];
    }
    if (t == 0) count[blk] = 0;
}

// One kernel per head size, group and cache type; the soft-cap's test is
// taken out of the scores' loop (a body with and one without it).
// blockIdx.z takes sequence z of a batch of decode tokens (one each, in
// consecutive rows of q, kcur, vcur and out, positions pos[z]), in cache
// slot slots[z]: its caches lie slots[z] * stride bytes past kc, vc, ksc
// and vsc (slots null: one sequence); each has its own partials and
// counters.
#define ATTN_DECODE_KT(HD, G2, UNX, suffix, KT, kts)                                                                \
    extern "C" __global__ void __launch_bounds__(32 * NW, 1)                                                         \
        attn_decode_##HD##_##G2##suffix##kts(const float* q, const float* kcur, const float* vcur, void* kc,        \
                                             void* vc, float* ksc, float* vsc, float* out, float* part, int* count, \
                                             int heads, int kv_heads, const int* pos, float scale, float softcap,    \
                                             const float2* rope_cs, int window, int slice_len, const int* slots,     \
                                             long long stride) {                                                     \
        const int z = blockIdx.z;                                                                                    \
        if (slots != nullptr) {                                                                                      \
            const long long off = (long long)slots[z] * stride;                                                      \
            kc = (char*)kc + off, vc = (char*)vc + off;                                                              \
            if (ksc != nullptr) ksc = (float*)((char*)ksc + off), vsc = (float*)((char*)vsc + off);                  \
            q += (size_t)z * heads * HD, out += (size_t)z * heads * HD;                                              \
            kcur += (size_t)z * kv_heads * HD, vcur += (size_t)z * kv_heads * HD, pos += z;                          \
            part += (size_t)z * heads * gridDim.y * (HD + 2), count += (size_t)z * gridDim.x;                        \
        }                                                                                                            \
        if (softcap > 0.f)                                                                                           \
            attn_decode<HD, G2, UNX, true, KT>(q, kcur, vcur, kc, vc, ksc, vsc, out, part, count, heads, kv_heads,  \
                                               pos, scale, softcap, rope_cs, window, slice_len);                     \
        else                                                                                                         \
            attn_decode<HD, G2, UNX, false, KT>(q, kcur, vcur, kc, vc, ksc, vsc, out, part, count, heads, kv_heads, \
                                                pos, scale, softcap, rope_cs, window, slice_len);                    \
    }
#define ATTN_DECODE_UN(HD, G2, UNX, suffix)                   \
    ATTN_DECODE_KT(HD, G2, UNX, suffix, KV_F32, )             \
    ATTN_DECODE_KT(HD, G2, UNX, suffix, KV_F16, _f16)         \
    ATTN_DECODE_KT(HD, G2, UNX, suffix, KV_Q8, _q8)
#define ATTN_DECODE(HD, G2) ATTN_DECODE_UN(HD, G2, 0, )
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
// attn_decode_<hd>_<g2>_un5: where a lane holds four dimensions, a warp
// loads five positions at once rather than four: 128 registers and no
// spills, 80 positions a round, so decode from position 64 to 79 takes
// one round, not two. newAttnDecode (attn_decode.go) picks them when the
// grid fits in one wave: then each block's rounds are the kernel's time,
// and fewer rounds shorten it; over a grid of several waves (many kv
// heads, as Llama-2-7B's) the extra registers cost blocks an SM, more than
// the rounds saved. Five is the most that fits in 128 registers: six
// would spill.
ATTN_DECODE_UN(64, 2, 5, _un5)
ATTN_DECODE_UN(128, 1, 5, _un5)
