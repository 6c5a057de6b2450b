// matvec.cu: decode matrix-vector products y = W x, one kernel per weight
// format, plus the activation quantizers (int8 absmax, binary signs).
// Every kernel here waits for its predecessors with pdl_wait (pdl.cuh), so
// each may be launched with programmatic dependent launch.
//
// Layouts are ARCHITECTURE.md's. A block of the grid owns ROWS rows; its
// threads stride over the row's 32-weight blocks, so the weight loads of a
// warp are contiguous (16 bytes a lane for q4, 32 for q8, 8 for q2/tq2) and
// each x block read serves ROWS rows. x is padded with zeros to whole
// 32-weight blocks, so the padding codes of a short last block add nothing.
// Codes become floats with the 2^23 trick: the byte is placed under the
// exponent of 2^23 (one byte permute), then 2^23 is subtracted.
#include <cuda_fp16.h>
#include <stdint.h>

#include "act.cuh"
#include "pdl.cuh"
#include "matvec.cuh"

#define MATVEC(name, FMT, NT)                                                                                  \
    extern "C" __global__ void __launch_bounds__(NT) name(const uint8_t* W, const __half* scales,             \
                                                          const __half* mins, float tscale, const float* x,   \
                                                          float* y, int rows, int nb, int row_bytes, int gb, \
                                                          int ng) {                                          \
        matvec<FMT, NT>(W, scales, mins, tscale, x, y, rows, nb, row_bytes, gb, ng);                        \
    }
#define MATVECS(fmt, FMT, R, W)                                                                                \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                      \
        matvec_##fmt##_s##R##w##W(const uint8_t* W_, const __half* scales, const __half* mins, float tscale,  \
                                  const float* x, float* y, int rows, int nb, int row_bytes, int gb, int ng,  \
                                  const float* x2, int act, int cols, const float* nw, float eps,             \
                                  float w_add, int accum, int qx) {                                           \
        matvecs<FMT, R, W>(W_, scales, mins, tscale, x, y, rows, nb, row_bytes, gb, ng, x2, act, cols, nw, eps, \
                           w_add, accum, qx);                                                                 \
    }
#define MATVEC_ALL(fmt, FMT)                                                                                  \
    MATVEC(matvec_##fmt##_32, FMT, 32) MATVEC(matvec_##fmt##_64, FMT, 64) MATVEC(matvec_##fmt##_128, FMT, 128) \
    MATVECS(fmt, FMT, 4, 4) MATVECS(fmt, FMT, 2, 4) MATVECS(fmt, FMT, 2, 8) MATVECS(fmt, FMT, 1, 8)           \
    MATVECS(fmt, FMT, 1, 16)

MATVEC_ALL(f32, F32)
MATVEC_ALL(f16, F16)
MATVEC_ALL(q8, Q8)
MATVEC_ALL(q4, Q4)
MATVEC_ALL(q2, Q2)
MATVEC_ALL(q1, Q1)
MATVEC_ALL(tq2, TQ2)

// quantize_i8 quantizes x[0..n) to int8 by absmax, as BitNet does: one
// block of 1024 threads per vector; block b reads x + b*n and writes
// q + b*q_stride and scale_out[b] (several tokens in one launch). scale_out[0] = max(amax, 1e-5)/127 expressed as
// 1/(127/amax), q = clip(rint(x*127/amax), -128, 127) (round half to even).
extern "C" __global__ void __launch_bounds__(1024) quantize_i8(const float* __restrict__ x, int n,
                                                               int8_t* __restrict__ q, float* __restrict__ scale_out,
                                                               int q_stride) {
    __shared__ float red[32];
    pdl_launch_dependents();
    pdl_wait();
    x += (size_t)blockIdx.x * n;
    q += (size_t)blockIdx.x * q_stride;
    scale_out += blockIdx.x;
    float m = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(x[i]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) red[0] = m;
    }
    __syncthreads();
    const float s = __fdiv_rn(127.f, fmaxf(red[0], 1e-5f));
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = rintf(__fmul_rn(x[i], s));
        q[i] = (int8_t)fminf(fmaxf(v, -128.f), 127.f);
    }
    if (threadIdx.x == 0) scale_out[0] = __fdiv_rn(1.f, s);
}

// matvec_i8: W2A8 (tq2) and W8A8 (q8) products with int8 activations q
// (padded with zeros to whole blocks) and their scale xscale[0]; integer
// sums with dp4a. Grid y is the token: its q, scale and y follow the
// previous token's (q rows of nb*32 bytes). tq2 codes are t+1, so sum(t*x) = dp4a(code, x) - sum(x).
template <int FMT, int NT>
__device__ void matvec_i8(const uint8_t* __restrict__ W, const __half* __restrict__ scales, float tscale,
                          const int8_t* __restrict__ q, const float* __restrict__ xscale, float* __restrict__ y,
                          int rows, int nb, int row_bytes, int gb, int ng) {
    __shared__ float red[NT / 32][ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
    int iacc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.f, iacc[r] = 0;
    for (int b = threadIdx.x; b < nb; b += NT) {
        const uint4* qp = reinterpret_cast<const uint4*>(q + 32 * b);
        uint4 q0 = __ldg(qp), q1 = __ldg(qp + 1);
        int xw[8] = {(int)q0.x, (int)q0.y, (int)q0.z, (int)q0.w, (int)q1.x, (int)q1.y, (int)q1.z, (int)q1.w};
        int xs = 0;
        if (FMT == TQ2) {
#pragma unroll
            for (int k = 0; k < 8; k++) xs = __dp4a(0x01010101, xw[k], xs);
        }
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int row = min(row0 + r, rows - 1);
            const uint8_t* p = W + (size_t)row * row_bytes + (size_t)b * (FMT == Q8 ? 32 : 8);
            if (FMT == TQ2) {
                uint2 a = ld8(p);
                uint32_t w[2] = {a.x, a.y};
                int s = -xs;
#pragma unroll
                for (int k = 0; k < 2; k++)
#pragma unroll
                    for (int sh = 0; sh < 4; sh++) s = __dp4a((int)((w[k] >> (2 * sh)) & 0x03030303u), xw[2 * sh + k], s);
                iacc[r] += s;
            } else {
                uint4 a = ld16(p), c = ld16(p + 16);
                int w[8] = {(int)a.x, (int)a.y, (int)a.z, (int)a.w, (int)c.x, (int)c.y, (int)c.z, (int)c.w};
                int s = 0;
#pragma unroll
                for (int k = 0; k < 8; k++) s = __dp4a(w[k], xw[k], s);
                acc[r] += __half2float(scales[(size_t)row * ng + b / gb]) * (float)s;
            }
        }
    }
    if (FMT == TQ2)
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[r] = (float)iacc[r];
    block_reduce<NT>(acc, red);
    if (threadIdx.x == 0)
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < rows)
                y[row0 + r] = FMT == TQ2 ? acc[r] * tq2_scale(scales, row0 + r, tscale) * xscale[0] : acc[r] * xscale[0];
}

#define MATVEC_I8(name, FMT, NT)                                                                             \
    extern "C" __global__ void __launch_bounds__(NT)                                                        \
        name(const uint8_t* W, const __half* scales, float tscale, const int8_t* q, const float* xscale,   \
             float* y, int rows, int nb, int row_bytes, int gb, int ng) {                                   \
        matvec_i8<FMT, NT>(W, scales, tscale, q + (size_t)blockIdx.y * nb * 32, xscale + blockIdx.y,       \
                           y + (size_t)blockIdx.y * rows, rows, nb, row_bytes, gb, ng);                      \
    }
MATVEC_I8(matvec_tq2_i8_32, TQ2, 32)
MATVEC_I8(matvec_tq2_i8_64, TQ2, 64)
MATVEC_I8(matvec_tq2_i8_128, TQ2, 128)
MATVEC_I8(matvec_q8_i8_32, Q8, 32)
MATVEC_I8(matvec_q8_i8_64, Q8, 64)
MATVEC_I8(matvec_q8_i8_128, Q8, 128)

// binarize writes the sign bits of x (bit i of word i/32 set when
// x[i] >= 0; zero past n) and per group the mean |x|. One warp per group,
// grid = groups; gs is the group size (a multiple of 32).
extern "C" __global__ void binarize(const float* __restrict__ x, int n, int gs, uint32_t* __restrict__ bits,
                                    float* __restrict__ beta) {
    pdl_launch_dependents();
    pdl_wait();
    const int g = blockIdx.x, lane = threadIdx.x;
    float s = 0.f;
    for (int i0 = g * gs; i0 < (g + 1) * gs; i0 += 32) {
        int i = i0 + lane;
        float v = i < n ? x[i] : -1.f;
        uint32_t m = __ballot_sync(0xffffffffu, i < n && v >= 0.f);
        if (lane == 0) bits[i0 / 32] = m;
        if (i < n) s += fabsf(v);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) beta[g] = s / (float)(min(n, (g + 1) * gs) - g * gs);
}

// matvec_q1_bin: q1 weights times binarized activations, XNOR and popcount:
// per 32-weight block d*beta*(valid - 2*popc(w ^ x)).
template <int NT>
__device__ void matvec_q1_bin(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                              const uint32_t* __restrict__ xb, const float* __restrict__ beta,
                              float* __restrict__ y, int rows, int cols, int nb, int row_bytes, int gb, int ng) {
    __shared__ float red[NT / 32][ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.f;
    for (int b = threadIdx.x; b < nb; b += NT) {
        const uint32_t x = __ldg(xb + b);
        const int g = b / gb;
        const float bt = __ldg(beta + g);
        const int valid = min(32, cols - 32 * b);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int row = min(row0 + r, rows - 1);
            uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(W + (size_t)row * row_bytes) + b);
            acc[r] += __half2float(scales[(size_t)row * ng + g]) * bt * (float)(valid - 2 * __popc(w ^ x));
        }
    }
    block_reduce<NT>(acc, red);
    if (threadIdx.x == 0)
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < rows) y[row0 + r] = acc[r];
}

#define MATVEC_BIN(NT)                                                                                        \
    extern "C" __global__ void __launch_bounds__(NT)                                                         \
        matvec_q1_bin_##NT(const uint8_t* W, const __half* scales, const uint32_t* xb, const float* beta,    \
                           float* y, int rows, int cols, int nb, int row_bytes, int gb, int ng) {           \
        matvec_q1_bin<NT>(W, scales, xb, beta, y, rows, cols, nb, row_bytes, gb, ng);                       \
    }
MATVEC_BIN(32)
MATVEC_BIN(64)
MATVEC_BIN(128)
