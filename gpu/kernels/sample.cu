// sample.cu: the candidates of sampling, found on the device so a sampled
// step copies back a few hundred values instead of the whole vocabulary.
//
// topk: one block of 1024 threads over the logits x[0..n). Each thread
// keeps the LT largest of its strided share (ties: the smaller index); the
// block sorts the 1024*LT kept pairs (bitonic, in shared memory) and writes
// the k largest, by value and then index, as the host's stable sort orders
// them. They are the true k largest unless some thread had to drop a value
// at least as large as the k-th (it kept LT and its smallest kept one
// reaches the k-th): then exact is 0 and the host reads all logits. The
// same pass sums exp((x - max) / temp) over all x in double, each term
// rounded as the host rounds it (float difference and quotient, double
// exp, float result), for the softmax's denominator.
#include <stdint.h>

#include "pdl.cuh"

#define NT 1024
#define LT 4
#define POOL (NT * LT)

// before says whether (va, ia) comes first: larger value, or equal and
// smaller index.
__device__ __forceinline__ bool before(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && ia < ib);
}

// topk writes the k (at most POOL) largest of x[0..n) to val/idx in order,
// stats[0] = exact (1 or 0) and sum[0] = sum of exp((x - max)/temp)
// (temp > 0; NaN logits count for nothing, as the host skips them).
extern "C" __global__ void __launch_bounds__(NT) topk(const float* x, int n, int k, float temp,
                                                      float* __restrict__ val, int* __restrict__ idx,
                                                      int* __restrict__ stats, double* __restrict__ sum) {
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
#pragma unroll
    for (int j = 0; j < LT; j++) sv[t * LT + j] = v[j], si[t * LT + j] = ix[j];
    // the largest value, for the softmax
    float m = v[0];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) fred[warp] = m;
    if (t == 0) bad = 0;
    __syncthreads();
    m = fred[0];
    for (int w = 1; w < NT / 32; w++) m = fmaxf(m, fred[w]);
    // bitonic sort of the pool, first by value descending, then index
    for (int size = 2; size <= POOL; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int p = t; p < POOL / 2; p += NT) {
                const int lo = 2 * p - (p & (stride - 1)), hi = lo + stride;
                const bool desc = (lo & size) == 0;
                const bool swap = desc ? before(sv[hi], si[hi], sv[lo], si[lo]) : before(sv[lo], si[lo], sv[hi], si[hi]);
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
    // exact unless a thread that kept LT of more dropped one that could
    // reach the k-th
    const float kv = sv[k - 1];
    const int ki = si[k - 1];
    if (seen > LT && !before(kv, ki, v[LT - 1], ix[LT - 1])) bad = 1;
    // the softmax's denominator, in double
    double s = 0.0;
    for (int i = t; i < n; i += NT) {
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
