// layers.cu: the layers of a decode step as one persistent kernel.
//
// A decode step of a small model is a chain of short dependent kernels
// (per layer: q/k/v product, attention, o product, gate/up product, down
// product); each boundary costs microseconds of launch, ramp and drain
// while the products themselves read their weights in a few. Here one
// launch runs a program of those operations (layers.go builds it from the
// step's launches as it is captured): every block of the grid takes its
// share of each operation, exactly as that operation's own kernel would
// (the same device code: matvec.cuh, attn_decode.cuh), then waits at a
// grid-wide barrier for the rest of the grid before the next one.
//
// The grid must be resident at once (layers.go sizes it by the driver's
// occupancy figure), and blocks are 512 threads: the products run with 16
// warps a block and one row a warp (more would not fit in the 128
// registers a thread has at this size), attention with its 16 warps and
// one query head a block.
#include <cuda_fp16.h>
#include <stdint.h>

#include "act.cuh"
#include "pdl.cuh"
#include "matvec.cuh"
#include "attn_decode.cuh"

// Instr is one operation of the program, in 8-byte slots as layers.go
// writes them (floats in the low half of theirs).
struct F8 {
    float v;
    int pad;
};
struct Instr {
    long long kind;  // 0: matrix-vector product (matvecs), 1: decode attention
    long long hd;    // attention: head size (64 or 128), one query head a block
    // product (matvecs' parameters)
    const uint8_t* W;
    const __half* scales;
    const __half* mins;
    const float* x;
    float* y;
    const float* x2;
    const float* nw;
    long long rows, nb, row_bytes, gb, ng, act, cols, accum, qx;
    F8 tscale, eps, w_add;
    // attention (attn_decode's parameters)
    const float* q;
    const float* kcur;
    const float* vcur;
    float* kc;
    float* vc;
    float* out;
    float* part;
    int* count;
    const int* pos;
    const float2* rope_cs;
    F8 scale;
    long long heads, kv_heads, window, chunk_max, nblk, slices;
};
static_assert(sizeof(Instr) == 38 * 8, "Instr layout (layers.go's instr)");

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// grid_sync returns in every block once all blocks of the grid have
// called it; what any block wrote before is visible to all after.
// bar[0] counts arrivals, bar[1] is the generation (it only grows, across
// launches too); gen is the generation this block last saw (thread 0).
__device__ __forceinline__ void grid_sync(unsigned* bar, unsigned& gen) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            st_release(bar + 1, gen + 1);
        } else {
            while (ld_acquire(bar + 1) == gen) {
            }
        }
        __threadfence();
        gen++;
    }
    __syncthreads();
}

template <int FMT>
__device__ __forceinline__ void product(const Instr& in) {
    matvecs<FMT, 1, 16>(in.W, in.scales, in.mins, in.tscale.v, in.x, in.y, (int)in.rows, (int)in.nb,
                            (int)in.row_bytes, (int)in.gb, (int)in.ng, in.x2, (int)in.act, (int)in.cols, in.nw,
                            in.eps.v, in.w_add.v, (int)in.accum, (int)in.qx);
}

// attention runs attn_decode's nblk x S blocks on the grid's blocks, in
// turn where there are more of them (a long context's slices).
template <int HD, int G2>
__device__ __forceinline__ void attention(const Instr& in) {
    const int nblk = (int)in.nblk, S = (int)in.slices;
    for (int v = blockIdx.x; v < nblk * S; v += gridDim.x) {
        if (v != (int)blockIdx.x) __syncthreads();  // shared memory reused
        attn_decode<HD, G2>(in.q, in.kcur, in.vcur, in.kc, in.vc, in.out, in.part, in.count, (int)in.heads,
                            (int)in.kv_heads, in.pos, in.scale.v, in.rope_cs, (int)in.window, (int)in.chunk_max,
                            v % nblk, nblk, v / nblk, S);
    }
}

// run_layers runs the n operations at prog, a grid barrier after each.
template <int FMT>
__device__ void run_layers(const Instr* __restrict__ prog, int n, unsigned* bar) {
    unsigned gen = 0;
    if (threadIdx.x == 0) gen = ld_acquire(bar + 1);
    for (int i = 0; i < n; i++) {
        const Instr& in = prog[i];
        if (in.kind == 0)
            product<FMT>(in);
        else if (in.hd == 64)
            attention<64, 1>(in);
        else
            attention<128, 1>(in);
        if (i + 1 < n) grid_sync(bar, gen);
    }
}

#define LAYERS(fmt, FMT)                                                                                       \
    extern "C" __global__ void __launch_bounds__(512, 1) layers_##fmt(const Instr* prog, int n, unsigned* bar) { \
        run_layers<FMT>(prog, n, bar);                                                                       \
    }
LAYERS(q8, Q8)
LAYERS(q4, Q4)
LAYERS(q2, Q2)
LAYERS(tq2, TQ2)
