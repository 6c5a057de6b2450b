// sample.cu: the candidates of sampling, found on the device so a sampled
// step copies back a few hundred values instead of the whole vocabulary.
//
// topk: one block of 1024 threads over the logits x[0..n). Each thread
// keeps the LT largest of its strided share (ties: the smaller index); for
// up to MERGE_K candidates the warps merge their lanes' lists and one warp
// the warps' runs, else the block sorts the 1024*LT kept pairs (bitonic, in
// shared memory); it writes the k largest, by value and then index, as the
// host's stable sort orders them. They are the true k largest unless some
// thread had to drop a value at least as large as the k-th (it kept LT and
// its smallest kept one reaches the k-th): then exact is 0 and the host
// reads all logits. Where asked, a pass sums exp((x - max) / temp) over
// all x in double, each term rounded as the host rounds it (float
// difference and quotient, double exp, float result), for the softmax's
// denominator.
#include <stdint.h>

#include "pdl.cuh"

#define NT 1024
#define LT 4
#define POOL (NT * LT)
#define MERGE_K 64  // the most candidates merged (a round each, in sequence) rather than sorted

// before says whether (va, ia) comes first: larger value, or equal and
// smaller index.
__device__ __forceinline__ bool before(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && ia < ib);
}

// warp_best leaves in every lane of the warp the best (v, i) of the
// lanes' (before's order; ties of equal pairs to the lower lane, so the
// lanes agree on l, the lane that holds it).
__device__ __forceinline__ void warp_best(float& v, int& i, int& l) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o), ol = __shfl_xor_sync(0xffffffffu, l, o);
        if (before(ov, oi, v, i) || (!before(v, i, ov, oi) && ol < l)) v = ov, i = oi, l = ol;
    }
}

// topk writes the k (at most POOL) largest of x[0..n) to val/idx in order,
// stats[0] = exact (1 or 0) and, with want_sum, sum[0] = sum of
// exp((x - max)/temp) (temp > 0; NaN logits count for nothing, as the host
// skips them; 0 without want_sum).
extern "C" __global__ void __launch_bounds__(NT) topk(const float* x, int n, int k, float temp,
                                                      float* __restrict__ val, int* __restrict__ idx,
                                                      int* __restrict__ stats, double* __restrict__ sum,
                                                      int want_sum) {
    extern __shared__ float sh[];
    float* sv = sh;                                   // [POOL] values
    int* si = reinterpret_cast<int*>(sh + POOL);      // [POOL] indices
    __shared__ double dred[32];
    __shared__ float fred[32];
    __shared__ int bad;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    pdl_launch_dependents();
    pdl_wait();
    float v[LT];
    int ix[LT];
#pragma unroll
    for (int j = 0; j < LT; j++) v[j] = -INFINITY, ix[j] = 0x7fffffff;
    int seen = 0;  // values this thread looked at (not NaN)
    for (int i = t; i < n; i += NT) {
        const float a = ld_dep(x + i);
        if (a != a) continue;  // NaN
        seen++;
        if (!before(a, i, v[LT - 1], ix[LT - 1])) continue;
        // insert, keeping v sorted (by value, then index)
        float cv = a;
        int ci = i;
#pragma unroll
        for (int j = 0; j < LT; j++) {
            if (before(cv, ci, v[j], ix[j])) {
                const float tv = v[j];
                const int ti = ix[j];
                v[j] = cv, ix[j] = ci;
                cv = tv, ci = ti;
            }
        }
    }
    // the largest value, for the softmax
    float m = v[0];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) fred[warp] = m;
    if (t == 0) bad = 0;
    __syncthreads();
    m = fred[0];
    for (int w = 1; w < NT / 32; w++) m = fmaxf(m, fred[w]);
    const float lastv = v[LT - 1];  // the thread's last kept, for the exactness check
    const int lasti = ix[LT - 1];
    __shared__ float kth_v;
    __shared__ int kth_i;
    if (k <= MERGE_K) {
        // A few candidates (sampling's): each warp merges its lanes' sorted
        // lists into its best kw (kw rounds of a warp-wide best, the
        // winning lane dropping its head), then warp 0 merges the 32 warps'
        // runs into the k best: no block-wide barrier per step, where a
        // sort of the whole pool takes 78.
        const int kw = min(k, 32 * LT);
        for (int r = 0; r < kw; r++) {
            float bv = v[0];
            int bi = ix[0], bl = lane;
            warp_best(bv, bi, bl);
            if (lane == 0) sv[warp * kw + r] = bv, si[warp * kw + r] = bi;
            if (lane == bl) {
#pragma unroll
                for (int j = 0; j < LT - 1; j++) v[j] = v[j + 1], ix[j] = ix[j + 1];
                v[LT - 1] = -INFINITY, ix[LT - 1] = 0x7fffffff;
            }
        }
        __syncthreads();
        if (warp == 0) {
            int ptr = 0;  // lane w's place in warp w's run
            for (int r = 0; r < k; r++) {
                float bv = ptr < kw ? sv[lane * kw + ptr] : -INFINITY;
                int bi = ptr < kw ? si[lane * kw + ptr] : 0x7fffffff, bl = lane;
                warp_best(bv, bi, bl);
                if (lane == 0) {
                    val[r] = bv, idx[r] = bi;
                    if (r == k - 1) kth_v = bv, kth_i = bi;
                }
                if (lane == bl) ptr++;
            }
        }
        __syncthreads();
    } else {
#pragma unroll
        for (int j = 0; j < LT; j++) sv[t * LT + j] = v[j], si[t * LT + j] = ix[j];
        // bitonic sort of the pool, first by value descending, then index
        for (int size = 2; size <= POOL; size <<= 1) {
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                __syncthreads();
                for (int p = t; p < POOL / 2; p += NT) {
                    const int lo = 2 * p - (p & (stride - 1)), hi = lo + stride;
                    const bool desc = (lo & size) == 0;
                    const bool swap =
                        desc ? before(sv[hi], si[hi], sv[lo], si[lo]) : before(sv[lo], si[lo], sv[hi], si[hi]);
                    if (swap) {
                        const float tv = sv[lo];
                        const int ti = si[lo];
                        sv[lo] = sv[hi], si[lo] = si[hi];
                        sv[hi] = tv, si[hi] = ti;
                    }
                }
            }
        }
        __syncthreads();
        for (int j = t; j < k; j += NT) val[j] = sv[j], idx[j] = si[j];
        if (t == 0) kth_v = sv[k - 1], kth_i = si[k - 1];
        __syncthreads();
    }
    // exact unless a thread that kept LT of more dropped one that could
    // reach the k-th
    if (seen > LT && !before(kth_v, kth_i, lastv, lasti)) bad = 1;
    // the softmax's denominator, in double (a pass of double exponentials
    // over the vocabulary: only where the caller needs it)
    double s = 0.0;
    for (int i = t; want_sum && i < n; i += NT) {
        const float a = ld_dep(x + i);
        if (a != a) continue;
        s += (double)(float)exp((double)__fdiv_rn(__fsub_rn(a, m), temp));
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) dred[warp] = s;
    __syncthreads();
    if (t == 0) {
        double tot = 0.0;
        for (int w = 0; w < NT / 32; w++) tot += dred[w];
        sum[0] = tot;
        stats[0] = bad ? 0 : 1;
    }
}

// penalize applies the repetition penalty to x[0..n) (a copy of the
// logits) as the host's sampler does: the logit of each distinct token
// among recent[0..min(count[0], w)) is divided by penalty when positive,
// multiplied by it otherwise. One block; thread j takes recent[j] unless
// an earlier entry holds the same token, so each token is penalized once.
extern "C" __global__ void __launch_bounds__(1024) penalize(float* __restrict__ x, int n, const int* recent,
                                                            const int* count, int w, float penalty) {
    extern __shared__ int ids[];  // [w]
    pdl_launch_dependents();
    pdl_wait();
    const int m = min(ld_dep(count), w);
    for (int j = threadIdx.x; j < m; j += blockDim.x) ids[j] = ld_dep(recent + j);
    __syncthreads();
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
        const int id = ids[j];
        if (id < 0 || id >= n) continue;
        bool dup = false;
        for (int i = 0; i < j && !dup; i++) dup = ids[i] == id;
        if (dup) continue;
        const float v = x[id];
        x[id] = v > 0.f ? __fdiv_rn(v, penalty) : __fmul_rn(v, penalty);
    }
}

// draw_uniform is the uniform in [0, 1) of draw number i of a seed:
// splitmix64 of seed + (i+1) * golden ratio, its top 53 bits (the host's
// sampler computes the same, model/sample.go).
__device__ __forceinline__ double draw_uniform(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

// draw picks the next token from topk's k candidates (val, idx, stats,
// sumexp: its output) as the host's sampler picks from them
// (Sampler.pick): softmax at temp (over the whole vocabulary when
// partial, the candidates being its head), top-p, min-p, then the
// uniform of draw counter[0] of seed. The id goes to out[0], or -1 where
// the candidates do not settle the draw (not exact, or a filter or the
// draw reaching past them): the host then samples from all logits. With
// tok set it chains the next step as argmax does: tok[0] the id (0 for
// none), pos[0] the next position, host[pos & 1] the id, the draw counter
// advanced and the id appended to the ring of recent tokens (recent[w],
// count[0] entries so far). One warp: the exponentials spread over its
// lanes, the sums taken by one lane in the host's order. Dynamic shared
// memory: k floats.
extern "C" __global__ void __launch_bounds__(32) draw(const float* val, const int* idx, const int* stats,
                                                      const double* sumexp, int k, int partial, float temp, float topp,
                                                      float minp, unsigned long long seed,
                                                      unsigned long long* __restrict__ counter, int* __restrict__ out,
                                                      int* __restrict__ tok, int* __restrict__ pos,
                                                      int* __restrict__ host, int* __restrict__ recent,
                                                      int* __restrict__ count, int w) {
    extern __shared__ float p[];  // [k]
    pdl_launch_dependents();
    pdl_wait();
    const int lane = threadIdx.x;
    const float top = ld_dep(val);
    for (int i = lane; i < k; i += 32) p[i] = (float)exp((double)__fdiv_rn(__fsub_rn(ld_dep(val + i), top), temp));
    __syncwarp();
    if (lane != 0) return;
    int id = -1;
    if (ld_dep(stats) == 1) {
        double sum = 0.0;
        for (int i = 0; i < k; i++) sum += (double)p[i];
        const double head = sum, all = ld_dep(sumexp);
        if (partial) sum = all;
        for (int i = 0; i < k; i++) p[i] = (float)((double)p[i] / sum);
        int n = k;
        bool part = partial, ok = true;
        if (topp > 0.f && topp < 1.f) {
            float cum = 0.f;
            bool reached = false;
            for (int i = 0; i < n; i++) {
                cum = __fadd_rn(cum, p[i]);
                if (cum >= topp) {
                    n = i + 1, reached = true;
                    break;
                }
            }
            ok = !(part && !reached);
            part = part && !reached;
        }
        if (ok && minp > 0.f) {
            const float limit = __fmul_rn(minp, p[0]);
            int m = 1;
            while (m < n && p[m] >= limit) m++;
            ok = !(part && m == n);
            n = m, part = false;
        }
        if (ok) {
            double total = 0.0;
            for (int i = 0; i < n; i++) total += (double)p[i];
            if (part) total += fmax(0.0, (all - head) / all);
            double r = draw_uniform(seed, *counter) * total;
            for (int i = 0; i < n && id < 0; i++) {
                r -= (double)p[i];
                if (r < 0.0) id = ld_dep(idx + i);
            }
            if (id < 0 && !part) id = ld_dep(idx + n - 1);
            if (id == 0x7fffffff) id = -1;  // fewer candidates than k (NaN logits): the host's
        }
    }
    out[0] = id;
    if (tok != nullptr) {
        const int q = pos[0];
        tok[0] = id >= 0 ? id : 0, pos[0] = q + 1;
        reinterpret_cast<volatile int*>(host)[q & 1] = id;
        *counter += 1;
        const int c = *count;
        recent[c % w] = id;
        *count = c + 1;
    }
}
