// matvec.cu: decode matrix-vector products y = W x, one kernel per weight
// format, plus the activation quantizers (int8 absmax, binary signs).
// Every kernel here waits for its predecessors with pdl_wait (pdl.cuh), so
// each may be launched with programmatic dependent launch; what they read
// of other kernels' outputs (x, x2, int8 x and its scale, sign bits) goes
// through plain pointers, never the read-only path (pdl.cuh says why).
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

#define ROWS 4

enum { F32 = 0, F16 = 1, Q8 = 2, Q4 = 3, Q2 = 4, Q1 = 5, TQ2 = 6, Q5_0 = 7, Q5_1 = 8, Q2K = 9, Q3K = 10, Q4K = 11, Q5K = 12, Q6K = 13,
       Q2S = 14, Q3S = 15, Q4S = 16 };

// byte i of u (0..255) as a float plus 2^23.
__device__ __forceinline__ float ub(uint32_t u, int i) {
    return __int_as_float(__byte_perm(u, 0x4Bu, 0x4550 | i));
}

__device__ __forceinline__ uint4 ld16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint2 ld8(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }

// sum of q*x over 4 weights whose codes are the bytes of u, each code
// being (float) byte - off.
__device__ __forceinline__ float dot4(uint32_t u, float off, const float* x) {
    return (ub(u, 0) - off) * x[0] + (ub(u, 1) - off) * x[1] + (ub(u, 2) - off) * x[2] + (ub(u, 3) - off) * x[3];
}

// Dot of one 32-weight block's codes with x[0..31] (without scale and
// min), from the block's bytes already in registers as 32-bit words.
template <int FMT>
__device__ __forceinline__ float block_dot_w(const uint32_t* w, const float* x) {
    float s = 0.f;
    if (FMT == Q8) {
#pragma unroll
        for (int k = 0; k < 8; k++) s += dot4(w[k] ^ 0x80808080u, 8388736.f, x + 4 * k);
    } else if (FMT == Q4) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            s += dot4(w[k] & 0x0F0F0F0Fu, 8388608.f, x + 4 * k);
            s += dot4((w[k] >> 4) & 0x0F0F0F0Fu, 8388608.f, x + 16 + 4 * k);
        }
    } else if (FMT == Q2 || FMT == TQ2) {
        const float off = FMT == Q2 ? 8388608.f : 8388609.f;
#pragma unroll
        for (int k = 0; k < 2; k++)
#pragma unroll
            for (int sh = 0; sh < 4; sh++) s += dot4((w[k] >> (2 * sh)) & 0x03030303u, off, x + 8 * sh + 4 * k);
    } else if (FMT == Q1) {
#pragma unroll
        for (int i = 0; i < 32; i++) s += __int_as_float(__float_as_int(x[i]) ^ ((~w[0] >> i) << 31));
    } else if (FMT == F32) {
#pragma unroll
        for (int i = 0; i < 32; i++) s += __int_as_float(w[i]) * x[i];
    } else if (FMT == F16) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
            float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
            s += f.x * x[2 * j] + f.y * x[2 * j + 1];
        }
    }
    return s;
}

// tq2_scale is the scale of a tq2 row: a float per row where scales is
// set (a matrix joined from parts whose per-tensor scales differ, such as
// BitNet's q, k and v), else the tensor's one.
__device__ __forceinline__ float tq2_scale(const __half* scales, int row, float tscale) {
    return scales != nullptr ? reinterpret_cast<const float*>(scales)[row] : tscale;
}

// store_out writes v to *y, or with accum adds it to *y (the residual
// add). The add is a reduction (red.add: no round trip; each output has
// one writer, so it is the same sum as load, add, store).
__device__ __forceinline__ void store_out(float* y, float v, int accum) {
    if (accum) {
        atomicAdd(y, v);
    } else {
        *y = v;
    }
}

// tq2 with int8 x (BitNet's W2A8), one 16-byte chunk of 64 codes at a
// time. load_x8 reads the chunk's 64 int8 values of x (16 words) from
// stage_x's layout; x8_sum is their sum. Codes u are t + 1, two bits
// each, so sum(t * x) = sum(code * x) - sum(x): tq2_dot8 is the chunk's
// sum(code * x) less xsum. The row loops pass the chunk's x8_sum; a
// product over whole rows (matvec_flat) passes 0 and subtracts sum(x)
// once a row, from stage_x's total (staging each chunk's sum with x would
// take shuffles for every value staged, on the path every product waits
// for, where one subtraction a row costs next to nothing).
__device__ __forceinline__ void load_x8(const uint4* xq, int nch, int c, int (&xw)[16]) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint4 v = xq[q * nch + c];
        xw[4 * q] = v.x, xw[4 * q + 1] = v.y, xw[4 * q + 2] = v.z, xw[4 * q + 3] = v.w;
    }
}
__device__ __forceinline__ int x8_sum(const int (&xw)[16]) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 16; i++) s = __dp4a(0x01010101, xw[i], s);
    return s;
}
// dp4a_us is dp4a with a's bytes unsigned, b's signed.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// Bit pair sh of each byte of code word 2j + k goes with x word 8j + 2sh
// + k (the tq2 layout). Each bit-pair plane is masked in place (code *
// 4^sh, up to 192 a byte, so unsigned-by-signed dp4a) and summed apart; a
// plane's sum is an exact multiple of 4^sh. One mask and one dp4a per
// four weights: shifting each plane down first would add an instruction
// to every four weights of the inner loop.
__device__ __forceinline__ int tq2_dot8(const uint32_t* u, const int (&xw)[16], int xsum) {
    int a[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int k = 0; k < 2; k++)
#pragma unroll
            for (int sh = 0; sh < 4; sh++)
                a[sh] = dp4a_us(u[2 * j + k] & (0x03030303u << (2 * sh)), xw[8 * j + 2 * sh + k], a[sh]);
    return a[0] + (a[1] >> 2) + (a[2] >> 4) + (a[3] >> 6) - xsum;
}

// Dot of one 32-weight block at p (loaded here) with x[0..31].
template <int FMT>
__device__ __forceinline__ float block_dot(const uint8_t* p, const float* x) {
    uint32_t w[FMT == F32 ? 32 : FMT == F16 ? 16 : FMT == Q8 ? 8 : FMT == Q4 ? 4 : FMT == Q1 ? 1 : 2];
    if (FMT == Q1) {
        w[0] = __ldg(reinterpret_cast<const uint32_t*>(p));
    } else if (FMT == Q2 || FMT == TQ2) {
        uint2 a = ld8(p);
        w[0] = a.x, w[1] = a.y;
    } else {
#pragma unroll
        for (int k = 0; k < (int)(sizeof(w) / 16); k++) {
            uint4 a = ld16(p + 16 * k);
            w[4 * k] = a.x, w[4 * k + 1] = a.y, w[4 * k + 2] = a.z, w[4 * k + 3] = a.w;
        }
    }
    return block_dot_w<FMT>(w, x);
}

// Bytes of one 32-weight block.
template <int FMT>
__device__ __forceinline__ int block_bytes() {
    return FMT == F32 ? 128 : FMT == F16 ? 64 : FMT == Q8 ? 32 : FMT == Q4 ? 16 : FMT == Q1 ? 4 : 8;
}

// Sum of v over the block's threads; the result is valid in thread 0.
template <int NT>
__device__ __forceinline__ void block_reduce(float (&v)[ROWS], float (*red)[ROWS]) {
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
    if (NT > 32) {
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < ROWS; r++) red[warp][r] = v[r];
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 1; w < NT / 32; w++)
#pragma unroll
                for (int r = 0; r < ROWS; r++) v[r] += red[w][r];
    }
}

// y[row] = sum over blocks of (d*dot + m*sum(x)) (or tscale*dot for tq2,
// plain dot for floats). nb: 32-weight blocks per row; gb: blocks per group;
// ng: groups per row.
template <int FMT, int NT>
__device__ void matvec(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                       const __half* __restrict__ mins, float tscale, const float* x,
                       float* __restrict__ y, int rows, int nb, int row_bytes, int gb, int ng) {
    __shared__ float red[NT / 32][ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.f;
    for (int b = threadIdx.x; b < nb; b += NT) {
        float xv[32];
        const float4* xp = reinterpret_cast<const float4*>(x + 32 * b);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float4 v = ld_dep(xp + k);
            xv[4 * k] = v.x, xv[4 * k + 1] = v.y, xv[4 * k + 2] = v.z, xv[4 * k + 3] = v.w;
        }
        float xs = 0.f;
        if (FMT == Q4 || FMT == Q2) {
#pragma unroll
            for (int i = 0; i < 32; i++) xs += xv[i];
        }
        const int g = b / gb;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int row = min(row0 + r, rows - 1);
            float s = block_dot<FMT>(W + (size_t)row * row_bytes + (size_t)b * block_bytes<FMT>(), xv);
            if (FMT == Q8 || FMT == Q1) {
                s *= __half2float(scales[(size_t)row * ng + g]);
            } else if (FMT == Q4 || FMT == Q2) {
                size_t i = (size_t)row * ng + g;
                s = __half2float(scales[i]) * s + __half2float(mins[i]) * xs;
            }
            acc[r] += s;
        }
    }
    block_reduce<NT>(acc, red);
    if (threadIdx.x == 0)
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < rows) y[row0 + r] = FMT == TQ2 ? acc[r] * tq2_scale(scales, row0 + r, tscale) : acc[r];
}

// batch_store sums each of a batch kernel's NV*ROWS outputs (vector v's
// row r at acc[v*ROWS + r]) over the block's threads and writes those of
// the nv vectors and the rows that exist into Y[v0 + v, row0 + r].
template <int NT, int NV>
__device__ __forceinline__ void batch_store(float (&acc)[NV * ROWS], float (*red)[NV * ROWS], float* __restrict__ Y,
                                            int rows, int row0, int v0, int nv) {
#pragma unroll
    for (int i = 0; i < NV * ROWS; i++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < NV * ROWS; i++) red[warp][i] = acc[i];
    __syncthreads();
    for (int i = threadIdx.x; i < NV * ROWS; i += NT) {
        const int v = i / ROWS, r = i % ROWS;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < NT / 32; k++) s += red[k][i];
        if (v < nv && row0 + r < rows) Y[(size_t)(v0 + v) * rows + row0 + r] = s;
    }
}

// matvec_batch: Y[n, rows] = X[n, cols] W^T for a few vectors (a step's
// decode tokens of several sequences), the simple kernel's loop with each
// weight block loaded once for NV vectors: blockIdx.y takes vectors
// NV*y... (the last group may hold fewer). cols is a multiple of 32, so a
// vector's blocks never run into the next one's.
template <int FMT, int NT, int NV>
__device__ void matvec_batch(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                             const __half* __restrict__ mins, const float* X, float* __restrict__ Y, int rows,
                             int nb, int row_bytes, int gb, int ng, int n) {
    constexpr int NWORDS = FMT == Q8 ? 8 : FMT == Q4 ? 4 : FMT == Q1 ? 1 : 2;
    __shared__ float red[NT / 32][NV * ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS, v0 = blockIdx.y * NV, nv = min(NV, n - v0);
    const size_t cols = (size_t)nb * 32;
    float acc[NV * ROWS];
#pragma unroll
    for (int i = 0; i < NV * ROWS; i++) acc[i] = 0.f;
    for (int b = threadIdx.x; b < nb; b += NT) {
        uint32_t w[ROWS][NWORDS];
        float d[ROWS], m[ROWS];
        const int g = b / gb;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int row = min(row0 + r, rows - 1);
            const uint8_t* p = W + (size_t)row * row_bytes + (size_t)b * block_bytes<FMT>();
            if (FMT == Q1) {
                w[r][0] = __ldg(reinterpret_cast<const uint32_t*>(p));
            } else if (FMT == Q2) {
                const uint2 a = ld8(p);
                w[r][0] = a.x, w[r][1] = a.y;
            } else {
#pragma unroll
                for (int k = 0; k < NWORDS / 4; k++) {
                    const uint4 a = ld16(p + 16 * k);
                    w[r][4 * k] = a.x, w[r][4 * k + 1] = a.y, w[r][4 * k + 2] = a.z, w[r][4 * k + 3] = a.w;
                }
            }
            const size_t i = (size_t)row * ng + g;
            d[r] = __half2float(scales[i]);
            m[r] = FMT == Q4 || FMT == Q2 ? __half2float(mins[i]) : 0.f;
        }
#pragma unroll
        for (int v = 0; v < NV; v++) {
            if (v >= nv) break;
            float xv[32];
            const float4* xp = reinterpret_cast<const float4*>(X + (size_t)(v0 + v) * cols + 32 * (size_t)b);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float4 a = ld_dep(xp + k);
                xv[4 * k] = a.x, xv[4 * k + 1] = a.y, xv[4 * k + 2] = a.z, xv[4 * k + 3] = a.w;
            }
            float xs = 0.f;
            if (FMT == Q4 || FMT == Q2) {
#pragma unroll
                for (int i = 0; i < 32; i++) xs += xv[i];
            }
#pragma unroll
            for (int r = 0; r < ROWS; r++) acc[v * ROWS + r] += d[r] * block_dot_w<FMT>(w[r], xv) + m[r] * xs;
        }
    }
    batch_store<NT, NV>(acc, red, Y, rows, row0, v0, nv);
}

#define MATVEC_BATCH(fmt, FMT)                                                                                   \
    extern "C" __global__ void __launch_bounds__(128) matvec_batch_##fmt(                                       \
        const uint8_t* W, const __half* scales, const __half* mins, const float* X, float* Y, int rows, int nb, \
        int row_bytes, int gb, int ng, int n) {                                                                 \
        matvec_batch<FMT, 128, 8>(W, scales, mins, X, Y, rows, nb, row_bytes, gb, ng, n);                       \
    }
MATVEC_BATCH(q8, Q8)
MATVEC_BATCH(q4, Q4)
MATVEC_BATCH(q2, Q2)
MATVEC_BATCH(q1, Q1)

// GGUF's block formats (q5_0, q5_1 and the K-quants q2k ... q6k, the
// layouts of quantize/q5_0.go ... q6k.go), their scales inside each block.
// Their kernels take a row as 32-weight units, as the kernels above take
// 32-weight blocks, so x is read the same way: unit b of a row is unit
// b % UPB of block b / UPB, UPB being a block's units (8 of a K-quant's
// 256-weight super-block, the one of q5_0's and q5_1's 32-weight block).
// unit_load decodes a unit into a byte a weight (its codes) and the scale
// and minimum of each of its halves of 16 weights (q2k's, q3k's and q6k's
// sub-blocks; a 32-weight sub-block gives both halves its own); unit_dot
// takes its dot product with 32 values of x. Each decoder ports the Go
// reference decoder named at it (quantize/<fmt>.go). Codes become floats
// with the 2^23 trick of dot4, the format's code offset (q5_0's 16, q3k's
// 4, q6k's 32) subtracted exactly with 2^23.

// Weights and bytes of a block format's block.
template <int FMT>
__device__ constexpr bool blk_super() { return FMT == Q2S || FMT == Q3S || FMT == Q4S; }
template <int FMT>
__device__ constexpr int blk_weights() { return FMT == Q5_0 || FMT == Q5_1 || blk_super<FMT>() ? 32 : 256; }
template <int FMT>
__device__ constexpr int blk_bytes() {
    return FMT == Q5_0 ? 22 : FMT == Q5_1 ? 24 : FMT == Q2K ? 84 : FMT == Q3K ? 110 : FMT == Q4K ? 144 : FMT == Q5K ? 176
         : FMT == Q2S ? 10 : FMT == Q3S ? 14 : FMT == Q4S ? 18 : 210;
}
// blk_off is the offset the format's codes are stored with (w = d*(q - off)).
template <int FMT>
__device__ constexpr int blk_off() { return FMT == Q5_0 ? 16 : FMT == Q3K ? 4 : FMT == Q6K ? 32 : 0; }
// blk_mins says the format's weights have minimums (w = d*q + m).
template <int FMT>
__device__ constexpr bool blk_mins() { return FMT == Q5_1 || FMT == Q2K || FMT == Q4K || FMT == Q5K || blk_super<FMT>(); }

// ldw reads the little-endian 32-bit word at p, inside a block of format
// FMT (weights: the read-only path). Blocks of a whole number of words
// (q5_1, q2k, q4k, q5k) keep every word 4-byte aligned; q5_0's, q3k's and
// q6k's (22, 110 and 210 bytes) leave every other block only 2-byte
// aligned, so their words are read as two halves (every offset read in
// them is even).
template <int FMT>
__device__ __forceinline__ uint32_t ldw(const uint8_t* p) {
    if (blk_bytes<FMT>() % 4 == 0) return __ldg(reinterpret_cast<const uint32_t*>(p));
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
    return (uint32_t)__ldg(h) | (uint32_t)__ldg(h + 1) << 16;
}

// h16 is the fp16 at p (2-byte aligned) as a float.
__device__ __forceinline__ float h16(const uint8_t* p) {
    return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}

// k6 reads sub-block j's (of 8) 6-bit scale sc and minimum mn of q4k and
// q5k from their 12 scale bytes s (kScales, quantize/q4k.go): for j < 4
// the low 6 bits of s[j] and s[j+4]; for j >= 4 the low and high nibble
// of s[j+4], topped by the high 2 bits of s[j-4] and of s[j].
__device__ __forceinline__ void k6(const uint8_t* s, int j, int& sc, int& mn) {
    if (j < 4) {
        sc = __ldg(s + j) & 63;
        mn = __ldg(s + j + 4) & 63;
    } else {
        const int a = __ldg(s + j + 4);
        sc = (a & 15) | (__ldg(s + j - 4) >> 6) << 4;
        mn = (a >> 4) | (__ldg(s + j) >> 6) << 4;
    }
}

// q3k_scale reads sub-block k's (of 16) 6-bit scale of q3k from its 12
// scale bytes s (q3kScale, quantize/q3k.go): the low nibble of s[k] for
// k < 8, the high nibble of s[k-8] after, topped by bits 2(k/4)..2(k/4)+1
// of s[8 + k%4].
__device__ __forceinline__ int q3k_scale(const uint8_t* s, int k) {
    const int lo = (__ldg(s + (k & 7)) >> (k >= 8 ? 4 : 0)) & 15;
    const int hi = (__ldg(s + 8 + (k & 3)) >> (2 * (k >> 2))) & 3;
    return lo | hi << 4;
}

// bits5 moves bits 0-3 of v to bit 4 of bytes 0-3: the fifth bits of four
// q5_0 or q5_1 weights, placed over their nibbles.
__device__ __forceinline__ uint32_t bits5(uint32_t v) {
    return (v & 1u) << 4 | (v & 2u) << 11 | (v & 4u) << 18 | (v & 8u) << 25;
}

// bits3 moves bits 0-3 of v to bit 2 of bytes 0-3: the third bits of four
// q3s weights, placed over their two low bits.
__device__ __forceinline__ uint32_t bits3(uint32_t v) {
    return (v & 1u) << 2 | (v & 2u) << 9 | (v & 4u) << 16 | (v & 8u) << 23;
}

// unit32 is a decoded 32-weight unit: weight l's code (with the format's
// offset) in byte l % 4 of q[l / 4], and weight l = d[l / 16] * (code -
// blk_off) + m[l / 16].
struct unit32 {
    uint32_t q[8];
    float d[2], m[2];
};

// unit_load decodes unit b of the row at row (format FMT; tbl: a
// super-block format's sub-block scale of each scale code).
template <int FMT>
__device__ __forceinline__ void unit_load(const uint8_t* row, int b, unit32& w, const float* tbl) {
    constexpr int UPB = blk_weights<FMT>() / 32;
    const uint8_t* p = row + (size_t)(b / UPB) * blk_bytes<FMT>();
    const int u = b % UPB;
    w.m[0] = w.m[1] = 0.f;
    if (FMT == Q5_0 || FMT == Q5_1) {
        // dequantizeQ5_0, dequantizeQ5_1: d (q5_1: then m), qh (a
        // little-endian uint32, bit j weight j's fifth bit), qs (byte j:
        // weight j's low nibble, weight j+16's high one).
        const int at = FMT == Q5_0 ? 2 : 4;  // qh
        const uint32_t qh = ldw<FMT>(p + at);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t v = ldw<FMT>(p + at + 4 + 4 * k);
            w.q[k] = (v & 0x0F0F0F0Fu) | bits5(qh >> (4 * k));
            w.q[k + 4] = (v >> 4 & 0x0F0F0F0Fu) | bits5(qh >> (16 + 4 * k));
        }
        w.d[0] = w.d[1] = h16(p);
        if (FMT == Q5_1) w.m[0] = w.m[1] = h16(p + 2);
    } else if (blk_super<FMT>()) {
        // lowbit's super-block formats (quantize/sblock.go, params): the
        // halves' bytes (scale code k low, zero-point code z high), then
        // the codes: q4s's as q4's, q2s's and q3s's low bits as q2's
        // (byte j: weights j, j+8, j+16, j+24), q3s's high bits a
        // little-endian uint32 (bit l weight l's).
        const uint32_t sb = ldw<FMT>(p);
        if (FMT == Q4S) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t v = ldw<FMT>(p + 2 + 4 * k);
                w.q[k] = v & 0x0F0F0F0Fu;
                w.q[k + 4] = v >> 4 & 0x0F0F0F0Fu;
            }
        } else {
            const uint32_t lo[2] = {ldw<FMT>(p + 2), ldw<FMT>(p + 6)};
            const uint32_t hi = FMT == Q3S ? ldw<FMT>(p + 10) : 0u;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                w.q[i] = lo[i & 1] >> (2 * (i >> 1)) & 0x03030303u;
                if (FMT == Q3S) w.q[i] |= bits3(hi >> (4 * i));
            }
        }
        constexpr int L = FMT == Q2S ? 3 : FMT == Q3S ? 7 : 15;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int s = sb >> (8 * h) & 255;
            w.d[h] = tbl[s & 15];
            w.m[h] = -(w.d[h] * ((float)((s >> 4) * L) / 15.f));
        }
    } else if (FMT == Q4K || FMT == Q5K) {
        // dequantizeQ4K, dequantizeQ5K: sub-block u's low bits are the low
        // (u even) or high nibbles of qs[32(u/2)..+32] (qs at 16, q5k's at
        // 48); q5k's fifth bit of weight l is bit u of qh[l] (qh at 16).
        const int sh = 4 * (u & 1);
        const uint8_t* qs = p + (FMT == Q4K ? 16 : 48) + 32 * (u >> 1);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uint32_t v = ldw<FMT>(qs + 4 * k) >> sh & 0x0F0F0F0Fu;
            if (FMT == Q5K) v |= (ldw<FMT>(p + 16 + 4 * k) >> u & 0x01010101u) << 4;
            w.q[k] = v;
        }
        int sc, mn;
        k6(p + 4, u, sc, mn);
        w.d[0] = w.d[1] = h16(p) * (float)sc;
        w.m[0] = w.m[1] = -(h16(p + 2) * (float)mn);
    } else if (FMT == Q6K) {
        // dequantizeQ6K: unit u = 4h + p (half h, quarter p) has its low
        // bits in the low (p < 2) or high nibbles of ql[64h + 32(p%2)..+32],
        // its high bits in bits 2p..2p+1 of qh[32h..+32] (qh at 128); its
        // halves' int8 scales are bytes 192 + 8h + 2p and the next; d at 208.
        const int h = u >> 2, q = u & 3;
        const uint8_t* ql = p + 64 * h + 32 * (q & 1);
        const uint8_t* qh = p + 128 + 32 * h;
#pragma unroll
        for (int k = 0; k < 8; k++)
            w.q[k] = (ldw<FMT>(ql + 4 * k) >> (4 * (q >> 1)) & 0x0F0F0F0Fu) |
                     (ldw<FMT>(qh + 4 * k) >> (2 * q) & 0x03030303u) << 4;
        const float d = h16(p + 208);
#pragma unroll
        for (int i = 0; i < 2; i++) w.d[i] = d * (float)(int8_t)__ldg(p + 192 + 8 * h + 2 * q + i);
    } else if (FMT == Q2K) {
        // dequantizeQ2K: unit u = 4n + j has its codes in bits 2j..2j+1 of
        // qs[32n..+32] (qs at 16); its halves' scale (low nibble) and
        // minimum (high nibble) are bytes 8n + 2j and the next; d at 80,
        // dmin at 82.
        const int n = u >> 2, j = u & 3;
#pragma unroll
        for (int k = 0; k < 8; k++) w.q[k] = ldw<FMT>(p + 16 + 32 * n + 4 * k) >> (2 * j) & 0x03030303u;
        const float d = h16(p + 80), dm = h16(p + 82);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int s = __ldg(p + 8 * n + 2 * j + i);
            w.d[i] = d * (float)(s & 15);
            w.m[i] = -(dm * (float)(s >> 4));
        }
    } else {
        // Q3K, dequantizeQ3K: unit u = 4n + j has its low bits in bits
        // 2j..2j+1 of qs[32n..+32] (qs at 32), its high bit in bit 4n + j
        // of hmask[0..32] (at 0); its halves' scales are sub-blocks 8n + 2j
        // and the next (q3k_scale, at 96); d at 108.
        const int n = u >> 2, j = u & 3;
#pragma unroll
        for (int k = 0; k < 8; k++)
            w.q[k] = (ldw<FMT>(p + 32 + 32 * n + 4 * k) >> (2 * j) & 0x03030303u) |
                     (ldw<FMT>(p + 4 * k) >> (4 * n + j) & 0x01010101u) << 2;
        const float d = h16(p + 108);
#pragma unroll
        for (int i = 0; i < 2; i++) w.d[i] = d * (float)(q3k_scale(p + 96, 8 * n + 2 * j + i) - 32);
    }
}

// unit_dot is the dot product of a decoded unit with x[0..31].
template <int FMT>
__device__ __forceinline__ float unit_dot(const unit32& w, const float* x) {
    const float off = 8388608.f + (float)blk_off<FMT>();
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        s0 += dot4(w.q[k], off, x + 4 * k);
        s1 += dot4(w.q[k + 4], off, x + 16 + 4 * k);
    }
    float r = w.d[0] * s0 + w.d[1] * s1;
    if (blk_mins<FMT>()) {
        float x0 = 0.f, x1 = 0.f;
#pragma unroll
        for (int i = 0; i < 16; i++) x0 += x[i], x1 += x[16 + i];
        r += w.m[0] * x0 + w.m[1] * x1;
    }
    return r;
}

// load_x32 reads x[0..31] (another kernel's output) into registers.
__device__ __forceinline__ void load_x32(const float* x, float (&xv)[32]) {
    const float4* xp = reinterpret_cast<const float4*>(x);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float4 v = ld_dep(xp + k);
        xv[4 * k] = v.x, xv[4 * k + 1] = v.y, xv[4 * k + 2] = v.z, xv[4 * k + 3] = v.w;
    }
}

// matvec_blk is matvec for a block format: nb 32-weight units a row
// (cols / 32: rows are whole blocks), ROWS rows a block, the threads
// striding over the units. It fuses nothing (Go's canFuse says so), so
// the norm before it, a gated activation and a residual add run apart.
template <int FMT, int NT>
__device__ void matvec_blk(const uint8_t* __restrict__ W, const float* __restrict__ tbl, const float* x,
                           float* __restrict__ y, int rows, int nb, int row_bytes) {
    __shared__ float red[NT / 32][ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.f;
    for (int b = threadIdx.x; b < nb; b += NT) {
        float xv[32];
        load_x32(x + 32 * (size_t)b, xv);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            unit32 w;
            unit_load<FMT>(W + (size_t)min(row0 + r, rows - 1) * row_bytes, b, w, tbl);
            acc[r] += unit_dot<FMT>(w, xv);
        }
    }
    block_reduce<NT>(acc, red);
    if (threadIdx.x == 0)
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < rows) y[row0 + r] = acc[r];
}

// matvec_batch_blk is matvec_batch for a block format: each unit of the
// block's ROWS rows decoded once for NV vectors.
template <int FMT, int NT, int NV>
__device__ void matvec_batch_blk(const uint8_t* __restrict__ W, const float* __restrict__ tbl, const float* X,
                                 float* __restrict__ Y, int rows, int nb, int row_bytes, int n) {
    __shared__ float red[NT / 32][NV * ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS, v0 = blockIdx.y * NV, nv = min(NV, n - v0);
    const size_t cols = (size_t)nb * 32;
    float acc[NV * ROWS];
#pragma unroll
    for (int i = 0; i < NV * ROWS; i++) acc[i] = 0.f;
    for (int b = threadIdx.x; b < nb; b += NT) {
        unit32 w[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) unit_load<FMT>(W + (size_t)min(row0 + r, rows - 1) * row_bytes, b, w[r], tbl);
#pragma unroll
        for (int v = 0; v < NV; v++) {
            if (v >= nv) break;
            float xv[32];
            load_x32(X + (size_t)(v0 + v) * cols + 32 * (size_t)b, xv);
#pragma unroll
            for (int r = 0; r < ROWS; r++) acc[v * ROWS + r] += unit_dot<FMT>(w[r], xv);
        }
    }
    batch_store<NT, NV>(acc, red, Y, rows, row0, v0, nv);
}

// A block format's kernels, with the arguments of the others (the
// minimums, tensor scale and groups are unused: the blocks hold them; the
// scales are unused too but for a super-block format, whose are its 16
// sub-block scales as floats): matvec_<fmt>_<32|64|128> and
// matvec_batch_<fmt>.
#define MATVEC_BLK1(name, FMT, NT)                                                                             \
    extern "C" __global__ void __launch_bounds__(NT) name(const uint8_t* W, const __half* scales,             \
                                                          const __half* mins, float tscale, const float* x,   \
                                                          float* y, int rows, int nb, int row_bytes, int gb, \
                                                          int ng) {                                          \
        matvec_blk<FMT, NT>(W, reinterpret_cast<const float*>(scales), x, y, rows, nb, row_bytes);           \
    }
#define MATVEC_BLK(fmt, FMT)                                                                                    \
    MATVEC_BLK1(matvec_##fmt##_32, FMT, 32) MATVEC_BLK1(matvec_##fmt##_64, FMT, 64)                             \
    MATVEC_BLK1(matvec_##fmt##_128, FMT, 128)                                                                  \
    extern "C" __global__ void __launch_bounds__(128) matvec_batch_##fmt(                                      \
        const uint8_t* W, const __half* scales, const __half* mins, const float* X, float* Y, int rows, int nb, \
        int row_bytes, int gb, int ng, int n) {                                                                \
        matvec_batch_blk<FMT, 128, 8>(W, reinterpret_cast<const float*>(scales), X, Y, rows, nb, row_bytes, n); \
    }
MATVEC_BLK(q5_0, Q5_0)
MATVEC_BLK(q5_1, Q5_1)
MATVEC_BLK(q2k, Q2K)
MATVEC_BLK(q3k, Q3K)
MATVEC_BLK(q4k, Q4K)
MATVEC_BLK(q5k, Q5K)
MATVEC_BLK(q6k, Q6K)
MATVEC_BLK(q2s, Q2S)
MATVEC_BLK(q3s, Q3S)
MATVEC_BLK(q4s, Q4S)

// The shared-memory kernels (matvecs) take q4k and q6k, llama.cpp's
// Q4_K_M, with the fusions of the other formats: a lane's chunk is one
// 32-weight unit (q4k: two, whose codes share their 32 bytes), its words
// requested a chunk ahead as they lie in the block (raw_load) and decoded
// only when they are used (raw_dot), so the prefetch does not wait for
// them; x is int16 as q4's (stage_i16).
template <int FMT>
__device__ constexpr bool raw_blk() { return FMT == Q4K || FMT == Q6K; }
// raw_words is how many 32-bit words raw_load keeps of a unit.
template <int FMT>
__device__ constexpr int raw_words() { return FMT == Q4K ? 12 : FMT == Q6K ? 21 : 1; }

// raw_load requests the chunk whose first unit is u, of the row at row.
//   q4k (144-byte blocks: rows stay 16-byte aligned): the block's first 16
//   bytes (d, dmin and the 12 scale bytes), then the 32 code bytes of
//   units u and u + 1 (u even: the low and the high nibbles).
//   q6k (210-byte blocks: a block may start 2 bytes past a word): the
//   aligned words that cover its 32 bytes of ql and of qh (nine each), the
//   words holding its two scales and d, and the block's offset past a word
//   (an address, no load: the rows' pointers move on before raw_dot runs),
//   by which raw_dot shifts them into place.
template <int FMT>
__device__ __forceinline__ void raw_load(const uint8_t* row, int u, uint32_t* w) {
    const uint8_t* p = row + (size_t)(u >> 3) * blk_bytes<FMT>();
    const int j = u & 7;
    if (FMT == Q4K) {
        const uint4 h = ld16(p), a = ld16(p + 16 + 32 * (j >> 1)), b = ld16(p + 32 + 32 * (j >> 1));
        w[0] = h.x, w[1] = h.y, w[2] = h.z, w[3] = h.w;
        w[4] = a.x, w[5] = a.y, w[6] = a.z, w[7] = a.w, w[8] = b.x, w[9] = b.y, w[10] = b.z, w[11] = b.w;
    } else if (FMT == Q6K) {
        const int h = j >> 2, q = j & 3;
        const uint32_t* ql = reinterpret_cast<const uint32_t*>((size_t)(p + 64 * h + 32 * (q & 1)) & ~(size_t)3);
        const uint32_t* qh = reinterpret_cast<const uint32_t*>((size_t)(p + 128 + 32 * h) & ~(size_t)3);
#pragma unroll
        for (int k = 0; k < 9; k++) w[k] = __ldg(ql + k), w[9 + k] = __ldg(qh + k);
        w[18] = __ldg(reinterpret_cast<const uint32_t*>((size_t)(p + 192 + 8 * h + 2 * q) & ~(size_t)3));
        w[19] = __ldg(reinterpret_cast<const uint32_t*>((size_t)(p + 208) & ~(size_t)3));
        w[20] = (uint32_t)((size_t)p & 3);
    }
}

// raw_dot is unit u's product with x's block, from raw_load's words w:
// xw the block's 32 int16 values (two a word), xs their scale, xsum the
// sum of the float values (for the minimums).
template <int FMT>
__device__ __forceinline__ float raw_dot(const uint32_t* w, int u, const int (&xw)[16],
                                         float xs, float xsum) {
    const int j = u & 7;
    if (FMT == Q4K) {
        // dequantizeQ4K: unit j's codes are the low (j even) or high
        // nibbles of its 32 bytes; its 6-bit scale and minimum as k6 reads
        // them from the scale bytes (words 1-3).
        const int sh = 4 * (j & 1);
        int sd = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int v = (int)(w[4 + k] >> sh & 0x0F0F0F0Fu);
            sd = __dp2a_lo(xw[2 * k], v, sd);
            sd = __dp2a_hi(xw[2 * k + 1], v, sd);
        }
        const int b = 8 * (j & 3);
        int sc, mn;
        if (j < 4) {
            sc = w[1] >> b & 63;
            mn = w[2] >> b & 63;
        } else {
            const uint32_t a = w[3] >> b;
            sc = (a & 15) | (w[1] >> (b + 6) & 3) << 4;
            mn = (a >> 4 & 15) | (w[2] >> (b + 6) & 3) << 4;
        }
        const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&w[0]));
        return dm.x * (float)sc * (xs * (float)sd) - dm.y * (float)mn * xsum;
    } else {
        // dequantizeQ6K: unit j = 4h + q's codes are the low (q < 2) or
        // high nibbles of ql plus bits 2q..2q+1 of qh, less 32 (vsub4: the
        // bytes stay apart); its halves' int8 scales, then d.
        const int q = j & 3, m = 8 * (int)w[20];
        int sd0 = 0, sd1 = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t lo = __funnelshift_r(w[k], w[k + 1], m), hi = __funnelshift_r(w[9 + k], w[10 + k], m);
            const int v = (int)__vsub4((lo >> (4 * (q >> 1)) & 0x0F0F0F0Fu) | (hi >> (2 * q) & 0x03030303u) << 4,
                                       0x20202020u);
            int& sd = k < 4 ? sd0 : sd1;
            sd = __dp2a_lo(xw[2 * k], v, sd);
            sd = __dp2a_hi(xw[2 * k + 1], v, sd);
        }
        const int ms = 8 * (int)((w[20] + 2 * q) & 3);  // the scales' bytes in their word (192 + 8h: a whole word on)
        const float sc0 = (float)(int8_t)(w[18] >> ms), sc1 = (float)(int8_t)(w[18] >> (ms + 8));
        const float d = __half2float(__ushort_as_half((unsigned short)(w[19] >> m)));
        return d * (xs * (sc0 * (float)sd0 + sc1 * (float)sd1));
    }
}

// Chunk geometry of the fast kernel: a thread reads CHUNK_U4 16-byte words
// of each of its ROWS rows at once, which hold CHUNK_BLOCKS 32-weight blocks.
template <int FMT>
__device__ constexpr int chunk_blocks() {
    return FMT == Q4 || FMT == Q2 || FMT == TQ2 || FMT == Q4K ? 2 : FMT == Q1 ? 4 : 1;
}
template <int FMT>
__device__ constexpr int chunk_u4() { return FMT == F32 ? 8 : FMT == F16 ? 4 : FMT == Q8 || FMT == Q4 ? 2 : 1; }

template <int FMT>
__device__ __forceinline__ void load_chunk(const uint8_t* p, uint32_t* w) {
#pragma unroll
    for (int k = 0; k < chunk_u4<FMT>(); k++) {
        uint4 a = ld16(p + 16 * k);
        w[4 * k] = a.x, w[4 * k + 1] = a.y, w[4 * k + 2] = a.z, w[4 * k + 3] = a.w;
    }
}

// warps_sum reduces the values v[0..nwarps) the block's warps left in
// shared memory (nwarps <= 32): every thread gets the result, from one
// load and a shuffle tree rather than a loop over them.
__device__ __forceinline__ float warps_sum(const float* v, int nwarps) {
    float s = (int)(threadIdx.x & 31) < nwarps ? v[threadIdx.x & 31] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// Staging x (stage_x): each thread owns the float4s i = threadIdx.x +
// j*blockDim.x of x, up to V of them in registers at once (V = the
// kernel's stage_v); an x longer than that is staged V a thread at a
// time, reading x twice when a norm needs its statistics first.
template <int NW>
__device__ constexpr int stage_v() { return NW >= 8 ? 2 : 5; }

// stage_norm holds the RMSNorm's weights (plus w_add) of a thread's first
// V float4s of x: constant, so they are loaded before the kernel waits for
// x (stage_pre).
template <int V>
struct stage_norm {
    float4 g[V];
};

// norm_w is the norm's weights of float4 i of x, plus w_add.
__device__ __forceinline__ float4 norm_w(const float* __restrict__ nw, int i, float w_add) {
    const float4 v = reinterpret_cast<const float4*>(nw)[i];
    return make_float4(v.x + w_add, v.y + w_add, v.z + w_add, v.w + w_add);
}

// stage_pre loads sn (before the kernel waits for x).
template <int V>
__device__ __forceinline__ void stage_pre(stage_norm<V>& sn, const float* __restrict__ nw, float w_add, int nb) {
    if (nw == nullptr) return;
#pragma unroll
    for (int j = 0; j < V; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        sn.g[j] = i < nb * 8 ? norm_w(nw, i, w_add) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// i16_put rounds piece k (values 8k..8k+7, v) of x's 32-weight block b to
// int16 by the block's largest |value| and writes it, the block's scale
// and (q4, q4k) its sum in stage_x's int16 layout at xsh (nb blocks):
// the block's four pieces are four consecutive lanes, which meet by
// shuffles, so every lane of the warp calls it (in: whether its piece is
// real).
template <int FMT>
__device__ __forceinline__ void i16_put(float4* xsh, int nb, int b, int k, const float (&v)[8], bool in) {
    constexpr int CB = chunk_blocks<FMT>();
    constexpr bool SUM = FMT == Q4 || FMT == Q4K;
    const int nch = nb / CB;
    float m = 0.f, sum = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        m = fmaxf(m, fabsf(v[j]));
        if (SUM) sum += v[j];
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (SUM) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    const float inv = m > 0.f ? 32767.f / m : 0.f;
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        w[j] = (uint32_t)(uint16_t)__float2int_rn(v[2 * j] * inv) | ((uint32_t)__float2int_rn(v[2 * j + 1] * inv) << 16);
    if (in) {
        uint4* xq = reinterpret_cast<uint4*>(xsh);
        float* xscale = reinterpret_cast<float*>(xsh + 4 * nb);
        xq[((b % CB) * 4 + k) * nch + b / CB] = make_uint4(w[0], w[1], w[2], w[3]);
        if (k == 0) {
            xscale[(b % CB) * nch + b / CB] = m / 32767.f;
            if (SUM) xscale[nb + (b % CB) * nch + b / CB] = sum;
        }
    }
}

// stage_i16 is stage_x for q4's and q8's int16 x (the layout below): four
// threads a 32-weight block, eight values each, the block's largest
// |value| (and for q4, whose minimums need it, its sum) by shuffles among
// the four; the RMSNorm's statistics in a pass of their own. (Not
// stage_x's way, a thread's whole share of x held in registers from the
// statistics to the writes: those registers would come from the weights
// matvecs requests before the wait, which stay in flight through the
// staging.)
template <int FMT>
__device__ void stage_i16(float4* xsh, const float* x, const float* x2, int act, int cols,
                         const float* __restrict__ nw, float eps, float w_add, int nb) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __shared__ float red[32];
    float rinv = 1.f;
    if (nw != nullptr) {
        float ss = 0.f;
        for (int i = threadIdx.x; i < nb * 8; i += blockDim.x) {
            const float4 v = ld_dep(reinterpret_cast<const float4*>(x) + i);
            const int c = 4 * i;  // past cols: another row's values, not padding
            ss += (c < cols ? v.x * v.x : 0.f) + (c + 1 < cols ? v.y * v.y : 0.f) +
                  (c + 2 < cols ? v.z * v.z : 0.f) + (c + 3 < cols ? v.w * v.w : 0.f);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        rinv = rsqrtf(warps_sum(red, nwarps) / (float)cols + eps);
    }
    // (The loop is uniform, so every lane takes part in the shuffles.)
    for (int i0 = 0; i0 < nb * 4; i0 += blockDim.x) {
        const int i = i0 + threadIdx.x, b = i >> 2, k = i & 3;
        const bool in = i < nb * 4;
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (in) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float4 f = ld_dep(reinterpret_cast<const float4*>(x) + 2 * i + h);
                v[4 * h] = f.x, v[4 * h + 1] = f.y, v[4 * h + 2] = f.z, v[4 * h + 3] = f.w;
            }
            if (act >= 0) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float4 u = ld_dep(reinterpret_cast<const float4*>(x2) + 2 * i + h);
                    const float uu[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int j = 0; j < 4; j++) v[4 * h + j] = glu_act(v[4 * h + j], uu[j], act);
                }
            }
            if (nw != nullptr) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float4 g = reinterpret_cast<const float4*>(nw)[2 * i + h];
                    const float gg[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
                    for (int j = 0; j < 4; j++) v[4 * h + j] = v[4 * h + j] * rinv * (gg[j] + w_add);
                }
            }
#pragma unroll
            for (int j = 0; j < 8; j++)  // past cols: zeros, whatever the buffers hold
                if (8 * i + j >= cols) v[j] = 0.f;
        }
        i16_put<FMT>(xsh, nb, b, k, v, in);
    }
    __syncthreads();
}

// stage_batch is stage_i16 for n <= NV vectors of X (rows of nb*32
// values, nothing fused), vector v at xsh + v*per: every thread's share
// of all of them in one loop, J of its 8-value pieces requested at once,
// so staging NV vectors costs a few round trips to memory, not NV times
// stage_i16's.
template <int FMT, int J>
__device__ void stage_batch(float4* xsh, int per, const float* X, int n, int nb) {
    const int items = n * nb * 4, nt = blockDim.x;
    for (int i0 = 0; i0 < items; i0 += J * nt) {
        float4 f[J][2];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int i = i0 + j * nt + (int)threadIdx.x;
            f[j][0] = f[j][1] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i < items) {
                const float4* p = reinterpret_cast<const float4*>(X) + 2 * (size_t)i;  // rows of whole 32-blocks
                f[j][0] = ld_dep(p);
                f[j][1] = ld_dep(p + 1);
            }
        }
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int i = i0 + j * nt + (int)threadIdx.x, v = i / (nb * 4), r = i % (nb * 4);
            const float e[8] = {f[j][0].x, f[j][0].y, f[j][0].z, f[j][0].w, f[j][1].x, f[j][1].y, f[j][1].z, f[j][1].w};
            i16_put<FMT>(xsh + (size_t)v * per, nb, r >> 2, r & 3, e, i < items);
        }
    }
    __syncthreads();
}

// stage_x writes x into shared memory at xsh in the layout the products
// read it in, after the steps fused before the product: the gated
// activation act(x) * x2 (act >= 0; cols values are real, the rest of the
// last block zero), the RMSNorm x / rms(x) * (nw + w_add) (nw set; over the
// cols values, zeros past them), and, with i8 (tq2 only), BitNet's int8
// rounding by the vector's absmax, after both. Layouts:
//   i8: int8, chunk c's 64 values as 4 uint4 at ((uint4*)xsh)[k*nch + c];
//       returns the scale (x = q * scale);
//   q4, q8: int16 per 32-weight block: uint4 k (values 8k..8k+7) of block b at
//       ((uint4*)xsh)[((b%CB)*4 + k)*nch + b/CB], then nb block scales and
//       (q4) nb float sums, block b's at (b%CB)*nch + b/CB (stage_i16);
//   others: floats, float4 k of block b at xsh[k*nb + (b%CB)*nch + b/CB].
// Returns the factor of the product's outputs: int8 x's scale, else 1;
// with i8 and qsum set, *qsum is the sum of the staged int8 values (an
// integer: the same whatever the order of the adds).
// A thread's values are read at once and kept in registers between the
// statistics and the writes: x was just written by the kernel before, and
// each dependent round trip to it costs the whole block its latency. sn
// holds the norm's weights (stage_pre). Ends with __syncthreads; every
// thread of the block calls it.
template <int FMT, int V>
__device__ float stage_x(float4* xsh, const float* x, const float* x2, int act, int cols,
                         const float* __restrict__ nw, const stage_norm<V>& sn, float eps, float w_add, bool i8,
                         int nb, int* qsum = nullptr) {
    if ((FMT == Q4 || FMT == Q8 || raw_blk<FMT>()) && !i8) {
        stage_i16<FMT>(xsh, x, x2, act, cols, nw, eps, w_add, nb);
        return 1.f;
    }
    constexpr int CB = chunk_blocks<FMT>();
    const int nch = nb / CB, n4 = nb * 8, nt = blockDim.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = nt >> 5;
    const bool norm = nw != nullptr, one = n4 <= V * nt;  // one: every value in registers at once
    __shared__ float red[2][32];
    __shared__ int qtot;  // i8: the sum of the staged values
    if (i8 && threadIdx.x == 0) qtot = 0;  // (set before the statistics' barrier)
    // value is x's float4 i after the gate, zeros past cols.
    auto value = [&](float4 v, float4 u, int i) {
        float e[4] = {v.x, v.y, v.z, v.w};
        const float uu[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) e[k] = 4 * i + k < cols ? (act >= 0 ? glu_act(e[k], uu[k], act) : e[k]) : 0.f;
        return make_float4(e[0], e[1], e[2], e[3]);
    };
    // load reads the thread's float4s i0 + threadIdx.x + j*nt (j < V) of x
    // (and x2), all at once. (Every thread runs the same rounds, so the
    // shuffles below find their whole warp.)
    float4 e[V];
    auto load = [&](int i0) {
        float4 xv[V], uv[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int i = i0 + (int)threadIdx.x + j * nt;
            xv[j] = uv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i < n4) {
                xv[j] = ld_dep(reinterpret_cast<const float4*>(x) + i);
                if (act >= 0) uv[j] = ld_dep(reinterpret_cast<const float4*>(x2) + i);
            }
        }
#pragma unroll
        for (int j = 0; j < V; j++) e[j] = value(xv[j], uv[j], i0 + (int)threadIdx.x + j * nt);
    };
    auto gw = [&](int i0, int j) {  // the norm weight of the thread's float4 j of round i0
        const int i = i0 + (int)threadIdx.x + j * nt;
        return i0 == 0 ? sn.g[j] : i < n4 ? norm_w(nw, i, w_add) : make_float4(0.f, 0.f, 0.f, 0.f);
    };
    // The statistics: the sum of squares (norm) and the largest |x * g|
    // (i8), one block reduction of both.
    float rinv = 1.f, xscale8 = 0.f, sc = 0.f;
    if (norm || i8) {
        float ss = 0.f, am = 0.f;
        for (int i0 = 0; i0 < n4; i0 += V * nt) {
            load(i0);
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float v[4] = {e[j].x, e[j].y, e[j].z, e[j].w};
                float4 g4 = make_float4(1.f, 1.f, 1.f, 1.f);
                if (norm && i8) g4 = gw(i0, j);
                const float g[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
                for (int k = 0; k < 4; k++) ss += v[k] * v[k], am = fmaxf(am, fabsf(v[k] * g[k]));
            }
        }
        // am >= 0: its bits order as the floats do, so the warp's integer
        // reduction takes the largest in one instruction, where a shuffle
        // tree takes five dependent rounds.
        am = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(am)));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) red[0][warp] = ss, red[1][warp] = am;
        __syncthreads();
        ss = warps_sum(red[0], nwarps);
        am = __uint_as_float(__reduce_max_sync(0xffffffffu, lane < nwarps ? __float_as_uint(red[1][lane]) : 0u));
        if (norm) {
            rinv = rsqrtf(ss / (float)cols + eps);
            am *= rinv;
        }
        if (i8) {
            sc = __fdiv_rn(127.f, fmaxf(am, 1e-5f));
            xscale8 = __fdiv_rn(1.f, sc);
        }
    }
    // The writes.
    int qpart = 0;  // i8: the sum of the thread's staged values
    for (int i0 = 0; i0 < n4; i0 += V * nt) {
        if (!one || !(norm || i8)) load(i0);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int i = i0 + (int)threadIdx.x + j * nt;
            float v[4] = {e[j].x, e[j].y, e[j].z, e[j].w};
            if (norm) {
                const float4 g4 = gw(i0, j);
                const float g[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
                for (int k = 0; k < 4; k++) v[k] = v[k] * rinv * g[k];
            }
            if (i8) {
                uint32_t word = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float r = fminf(fmaxf(rintf(__fmul_rn(v[k], sc)), -128.f), 127.f);
                    word |= (uint32_t)(uint8_t)(int8_t)r << (8 * k);
                }
                const int c = i >> 4, o = i & 15;  // chunk, int within its 64 bytes
                if (i < n4) reinterpret_cast<int*>(xsh)[((o >> 2) * nch + c) * 4 + (o & 3)] = (int)word;
                qpart = __dp4a((int)word, 0x01010101, qpart);
            } else if (i < n4) {
                const int b = i >> 3, k = i & 7;
                xsh[k * nb + (b % CB) * nch + b / CB] = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
    }
    if (i8 && qsum != nullptr) {
        qpart = __reduce_add_sync(0xffffffffu, qpart);
        if (lane == 0) atomicAdd(&qtot, qpart);
    }
    __syncthreads();
    if (i8 && qsum != nullptr) *qsum = qtot;
    return i8 ? xscale8 : 1.f;
}

// i16_dot is the integer dot product of a 32-weight block's codes (q8:
// eight words of signed bytes, 32 weights in 16 instructions; q4: four
// words of nibbles, weight j's low and weight j + 16's high) with its 32
// int16 values of x, two a word (stage_i16's layout).
template <int FMT>
__device__ __forceinline__ int i16_dot(const uint32_t* w, const int (&xw)[16]) {
    int sd = 0;
    if (FMT == Q8) {
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int u = (int)w[k];
            sd = __dp2a_lo(xw[2 * k], u, sd);
            sd = __dp2a_hi(xw[2 * k + 1], u, sd);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t u = w[k];
            const int lo = (int)(u & 0x0F0F0F0Fu), hi = (int)((u >> 4) & 0x0F0F0F0Fu);
            sd = __dp2a_lo(xw[2 * k], lo, sd);
            sd = __dp2a_hi(xw[2 * k + 1], lo, sd);
            sd = __dp2a_lo(xw[8 + 2 * k], hi, sd);
            sd = __dp2a_hi(xw[8 + 2 * k + 1], hi, sd);
        }
    }
    return sd;
}

// matvecs is matvec for rows that are 16-byte aligned and hold whole
// chunks. x (its cols values; zeros past them, whatever its buffer holds
// there) is staged once per block of the grid into shared memory, laid
// out so that the 32 lanes of a warp, each on its own chunk, read
// consecutive 16-byte words (no bank conflicts, and no strided global
// loads); the grid is persistent, each of its blocks looping over groups
// of NW*SROWS rows, so x is staged once per block rather than once per
// rows. Each of the NW warps owns SROWS rows over their whole length and
// reduces with shuffles alone; every lane loads the next chunk of its rows
// (and their scales) before it uses the current one, across row groups
// too, and the first before the kernel waits for x (with PDL, while the
// previous kernel still runs).
// Few rows a warp and many warps a block suit matrices with few,
// long rows; matvecTable (matvec.go) picks by format and shape class.
//
// With act >= 0 the kernel stages act(x) * x2 (act.cuh) instead of x: the
// gated MLP's activation folded into the down projection; cols values are
// real, the rest of the last block zero. With nw it stages RMSNorm(x) (the
// norm before the product; past cols, zeros); with accum it adds its output to y (the
// residual add after the product: each row is read and written by the
// lane that computes it, and no block stages y). With qx (tq2 only) it
// takes x as BitNet's int8 activations, after the gate and the norm (which
// may then both be set). With GO (KS = 1; the kernels named ..._g) the rows are two halves,
// gate then up, and the kernel writes act(gate row i . x) * (up row i . x)
// into y[i] (act = oact, act.cuh): the gated MLP's activation folded into the gate/up product,
// so the down projection stages one vector, not two. A warp's rows are
// then pairs (its first SROWS/2 gate rows, its last the up rows of the
// same pairs), or, one row a warp, warp w and w + RW/2 hold a pair and
// meet in shared memory.
template <int FMT, int SROWS, int NW, int KS = 1, bool GO = false>
__device__ void matvecs(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                        const __half* __restrict__ mins, float tscale, const float* x,
                        float* __restrict__ y, int rows, int nb, int row_bytes, int gb, int ng,
                        const float* x2, int act, int cols, const float* __restrict__ nw,
                        float eps, float w_add, int accum, int qx, int oact) {
    constexpr int CB = chunk_blocks<FMT>(), U = chunk_u4<FMT>(), BW = 4 * U / CB;
    constexpr bool PF = U <= 2;
    constexpr bool SC = FMT == Q8 || FMT == Q4 || FMT == Q2 || FMT == Q1;
    constexpr bool MN = FMT == Q4 || FMT == Q2;
    // q4k and q6k: a chunk is a unit of raw_words (raw_load, raw_dot).
    constexpr bool BLK = raw_blk<FMT>();
    constexpr int NWD = BLK ? raw_words<FMT>() : 4 * U;
    // q4 and q8 take x rounded to int16 per 32-weight block (relative
    // error under 2^-15 of the block's largest value): their codes then
    // multiply as integers (dp2a: two int16-by-int8 products an instruction)
    // without being turned into floats first, and x staged as int16 is half
    // the shared memory to read.
    constexpr bool I16 = FMT == Q4 || FMT == Q8 || BLK;
    // tq2 with qx takes x as BitNet does: int8 by the vector's absmax
    // (after the gate and norm), integer dot products (dp4a).
    const bool I8 = FMT == TQ2 && qx;
    extern __shared__ float4 xsh[];
    // The next kernel may be placed at once: its blocks take what this
    // one leaves of an SM and fetch their first weights while it runs.
    pdl_launch_dependents();
    // With KS > 1, KS warps share each row (warp w takes part w % KS of
    // its chunks) and add their sums through shared memory: a long row's
    // chain of round trips is KS times shorter.
    constexpr int RW = NW / KS;  // warps with rows of their own
    __shared__ float kred[KS > 1 ? NW : 1][SROWS];
    __shared__ int kired[KS > 1 ? NW : 1][SROWS];
    const int nch = nb / CB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS, rwarp = warp / KS;
    const int c0 = lane + 32 * part;  // the warp's first chunk of a row
    static_assert(!GO || KS == 1, "gated output takes whole rows");
    // GO: outputs are pairs of rows, half as many as rows.
    const int half = rows / 2, outs = GO ? half : rows;
    const int groups = GO ? (half + SROWS * RW / 2 - 1) / (SROWS * RW / 2) : (rows + SROWS * RW - 1) / (SROWS * RW);
    // first is the warp's first output of group grp (a row, or GO a pair);
    // its row r has output first + k(r), and row_of is that row.
    auto first = [&](int grp) {
        if (!GO) return grp * SROWS * RW + rwarp * SROWS;
        return SROWS == 1 ? grp * (RW / 2) + rwarp % (RW / 2) : grp * (SROWS * RW / 2) + rwarp * (SROWS / 2);
    };
    auto k_of = [&](int r) { return GO && SROWS > 1 ? r % (SROWS / 2) : r; };
    auto row_of = [&](int f0, int r) {
        const int o = min(f0 + k_of(r), outs - 1);
        const bool up = GO && (SROWS == 1 ? rwarp >= RW / 2 : r >= SROWS / 2);
        return up ? half + o : o;
    };
    const uint8_t* wp[SROWS];
    size_t sb[SROWS];
    // setup points wp and sb at the rows of group grp; false when the warp
    // has none there.
    auto setup = [&](int grp) {
        const int f0 = first(grp);
        if (grp >= groups || f0 >= outs) return false;
#pragma unroll
        for (int r = 0; r < SROWS; r++) {
            const int row = row_of(f0, r);
            wp[r] = W + (size_t)row * row_bytes;
            sb[r] = (size_t)row * ng;
        }
        return true;
    };
    __shared__ float gred[GO && SROWS == 1 ? NW / 2 : 1];  // GO, one row a warp: the up rows' sums
    uint32_t nxt[SROWS][NWD];
    __half nsc[SROWS][CB], nmn[SROWS][CB];
    auto load_all = [&](int cc, uint32_t (&w)[SROWS][NWD], __half (&sc)[SROWS][CB], __half (&mn)[SROWS][CB]) {
#pragma unroll
        for (int r = 0; r < SROWS; r++) {
            if (BLK) {
                raw_load<FMT>(wp[r], cc * CB, w[r]);
                continue;
            }
            load_chunk<FMT>(wp[r] + (size_t)cc * 16 * U, w[r]);
#pragma unroll
            for (int k = 0; k < CB; k++) {
                const int g = (cc * CB + k) / gb;
                if (SC) sc[r][k] = scales[sb[r] + g];
                if (MN) mn[r][k] = mins[sb[r] + g];
            }
        }
    };
    // The first chunk of the first rows is requested before x is staged
    // (and, launched with PDL, while the previous kernel still runs), so
    // the round trips overlap.
    int grp = blockIdx.x;
    bool have = setup(grp), loaded = PF && have && c0 < nch;
    if (loaded) load_all(c0, nxt, nsc, nmn);
    constexpr int V = stage_v<NW>();
    stage_norm<V> sn;
    if (!I16) stage_pre<V>(sn, nw, w_add, nb);  // (q4 and q8 stage x their own way: stage_i16)
    pdl_wait();  // x is the previous kernel's output
    // ys scales every output (int8 x's scale; 1 for float x).
    const float ys = stage_x<FMT, V>(xsh, x, x2, act, cols, nw, sn, eps, w_add, I8, nb);
    for (; grp < groups; grp += gridDim.x) {
        if (grp != (int)blockIdx.x) have = setup(grp);
        // (warps that meet in shared memory go on without rows to the barriers)
        const bool meet = KS > 1 || (GO && SROWS == 1);
        if (!meet && !have) continue;
        const int f0 = first(grp);
        float acc[SROWS];
        int iacc[SROWS];  // I8: integer sums
#pragma unroll
        for (int r = 0; r < SROWS; r++) acc[r] = 0.f, iacc[r] = 0;
        int c = have ? c0 : nch;  // (meet: a warp without rows still meets the barriers below)
        if (PF && !loaded && c < nch) load_all(c, nxt, nsc, nmn);
        loaded = false;
        for (; c < nch; c += 32 * KS) {
            uint32_t cur[SROWS][NWD];
            __half csc[SROWS][CB], cmn[SROWS][CB];
            if (PF) {
#pragma unroll
                for (int r = 0; r < SROWS; r++) {
#pragma unroll
                    for (int i = 0; i < NWD; i++) cur[r][i] = nxt[r][i];
#pragma unroll
                    for (int k = 0; k < CB; k++) csc[r][k] = nsc[r][k], cmn[r][k] = nmn[r][k];
                }
                if (c + 32 * KS < nch) {
                    load_all(c + 32 * KS, nxt, nsc, nmn);
                } else if (setup(grp + gridDim.x) && c0 < nch) {
                    // the next rows' first chunk, while this one is summed
                    load_all(c0, nxt, nsc, nmn);
                    loaded = true;
                }
            } else {
                load_all(c, cur, csc, cmn);
            }
            if (FMT == TQ2 && I8) {
                const uint4* xq = reinterpret_cast<const uint4*>(xsh);
                int xw[16];
                load_x8(xq, nch, c, xw);
                const int xs = x8_sum(xw);
#pragma unroll
                for (int r = 0; r < SROWS; r++) iacc[r] += tq2_dot8(cur[r], xw, xs);
                continue;
            }
            if (I16) {  // q4 with int16 x: integer dot products (dp2a), 8 weights in 6 instructions
                const uint4* xq = reinterpret_cast<const uint4*>(xsh);
                const float* xf = reinterpret_cast<const float*>(xsh + 4 * nb);
#pragma unroll
                for (int kb = 0; kb < CB; kb++) {
                    int xw[16];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const uint4 v = xq[(kb * 4 + q) * nch + c];
                        xw[4 * q] = v.x, xw[4 * q + 1] = v.y, xw[4 * q + 2] = v.z, xw[4 * q + 3] = v.w;
                    }
                    const float xs = xf[kb * nch + c], xsum = MN || FMT == Q4K ? xf[nb + kb * nch + c] : 0.f;
#pragma unroll
                    for (int r = 0; r < SROWS; r++) {
                        if (BLK) {
                            acc[r] += raw_dot<FMT>(cur[r], c * CB + kb, xw, xs, xsum);
                            continue;
                        }
                        const int sd = i16_dot<FMT>(&cur[r][kb * (FMT == Q8 ? 8 : 4)], xw);
                        if (FMT == Q8) {
                            acc[r] += __half2float(csc[r][kb]) * (xs * (float)sd);
                        } else {
                            acc[r] += __half2float(csc[r][kb]) * (xs * (float)sd) + __half2float(cmn[r][kb]) * xsum;
                        }
                    }
                }
                continue;
            }
#pragma unroll
            for (int k = 0; k < CB; k++) {
                float xv[32];
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    float4 v = xsh[q * nb + k * nch + c];
                    xv[4 * q] = v.x, xv[4 * q + 1] = v.y, xv[4 * q + 2] = v.z, xv[4 * q + 3] = v.w;
                }
                float xs = 0.f;
                if (MN) {
#pragma unroll
                    for (int i = 0; i < 32; i++) xs += xv[i];
                }
#pragma unroll
                for (int r = 0; r < SROWS; r++) {
                    float s = block_dot_w<FMT>(&cur[r][k * BW], xv);
                    if (FMT == Q8 || FMT == Q1) {
                        s *= __half2float(csc[r][k]);
                    } else if (MN) {
                        s = __half2float(csc[r][k]) * s + __half2float(cmn[r][k]) * xs;
                    }
                    acc[r] += s;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < SROWS; r++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
                if (I8) iacc[r] += __shfl_xor_sync(0xffffffffu, iacc[r], o);
            }
        if (KS > 1) {  // the row's parts, added in a fixed order
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < SROWS; r++) kred[warp][r] = acc[r], kired[warp][r] = iacc[r];
            __syncthreads();
            if (part == 0)
#pragma unroll
                for (int k = 1; k < KS; k++)
#pragma unroll
                    for (int r = 0; r < SROWS; r++) acc[r] += kred[warp + k][r], iacc[r] += kired[warp + k][r];
            __syncthreads();  // kred is the next rows'
        }
        float v[SROWS] = {};  // the rows' outputs, in lane 0 (the one that writes them)
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < SROWS; r++) {
                const float ts = FMT == TQ2 ? tq2_scale(scales, row_of(f0, r), tscale) : 1.f;
                v[r] = I8 ? (float)iacc[r] * ts * ys : (FMT == TQ2 ? acc[r] * ts : acc[r]) * ys;
            }
        if (!GO) {
            if (lane == 0 && part == 0 && have)
#pragma unroll
                for (int r = 0; r < SROWS; r++)
                    if (f0 + r < rows) store_out(y + f0 + r, v[r], accum);
        } else if (SROWS > 1) {
            if (lane == 0 && have)
#pragma unroll
                for (int r = 0; r < SROWS / 2; r++)
                    if (f0 + r < half) y[f0 + r] = glu_act(v[r], v[r + SROWS / 2], oact);
        } else {
            if (lane == 0 && rwarp >= RW / 2) gred[rwarp - RW / 2] = v[0];
            __syncthreads();
            if (lane == 0 && rwarp < RW / 2 && have) y[f0] = glu_act(v[0], gred[rwarp], oact);
            __syncthreads();  // gred is the next pairs'
        }
    }
}

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
                                  float w_add, int accum, int qx, int oact) {                                 \
        matvecs<FMT, R, W>(W_, scales, mins, tscale, x, y, rows, nb, row_bytes, gb, ng, x2, act, cols, nw, eps, \
                           w_add, accum, qx, oact);                                                           \
    }
// matvec_<fmt>_s1w<W>k2: one row for each two warps (long rows).
#define MATVECK2(fmt, FMT, W)                                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                      \
        matvec_##fmt##_s1w##W##k2(const uint8_t* W_, const __half* scales, const __half* mins, float tscale,  \
                                  const float* x, float* y, int rows, int nb, int row_bytes, int gb, int ng,  \
                                  const float* x2, int act, int cols, const float* nw, float eps,             \
                                  float w_add, int accum, int qx, int oact) {                                 \
        matvecs<FMT, 1, W, 2>(W_, scales, mins, tscale, x, y, rows, nb, row_bytes, gb, ng, x2, act, cols, nw, \
                              eps, w_add, accum, qx, oact);                                                   \
    }
// matvec_<fmt>_s<R>w<W>g: the gated output (GO above).
#define MATVECG(fmt, FMT, R, W)                                                                               \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                      \
        matvec_##fmt##_s##R##w##W##g(const uint8_t* W_, const __half* scales, const __half* mins, float tscale, \
                                     const float* x, float* y, int rows, int nb, int row_bytes, int gb, int ng, \
                                     const float* x2, int act, int cols, const float* nw, float eps,          \
                                     float w_add, int accum, int qx, int oact) {                              \
        matvecs<FMT, R, W, 1, true>(W_, scales, mins, tscale, x, y, rows, nb, row_bytes, gb, ng, x2, act, cols, \
                                    nw, eps, w_add, accum, qx, oact);                                        \
    }
#define MATVEC_ALL(fmt, FMT)                                                                                  \
    MATVEC(matvec_##fmt##_32, FMT, 32) MATVEC(matvec_##fmt##_64, FMT, 64) MATVEC(matvec_##fmt##_128, FMT, 128) \
    MATVEC_SHARED(fmt, FMT)
#define MATVEC_SHARED(fmt, FMT)                                                                               \
    MATVECS(fmt, FMT, 4, 4) MATVECS(fmt, FMT, 2, 4) MATVECS(fmt, FMT, 2, 8) MATVECS(fmt, FMT, 1, 8)           \
    MATVECS(fmt, FMT, 1, 16) MATVECS(fmt, FMT, 1, 32) MATVECK2(fmt, FMT, 16) MATVECK2(fmt, FMT, 32)

MATVEC_ALL(f32, F32)
MATVEC_ALL(f16, F16)
MATVEC_ALL(q8, Q8)
MATVEC_ALL(q4, Q4)
MATVEC_ALL(q2, Q2)
MATVEC_ALL(q1, Q1)
MATVEC_ALL(tq2, TQ2)
// q4k's and q6k's plain kernels are MATVEC_BLK's.
MATVEC_SHARED(q4k, Q4K)
MATVEC_SHARED(q6k, Q6K)
// The gate/up products' kernels (matvecTable in Go) with the gated output;
// Llama-2-7B's q4 gate/up (one row a warp, 32 warps) takes two rows a warp
// and 16 warps instead, its pairs within a warp: with one row a warp a
// pair spans two warps, which meet in shared memory behind a block barrier
// every row group. This list must match matvecGated in matvec.go
// (TestMatvecKernelsBuilt).
MATVECG(q8, Q8, 4, 4) MATVECG(q8, Q8, 1, 16)
MATVECG(q4, Q4, 4, 4) MATVECG(q4, Q4, 1, 16) MATVECG(q4, Q4, 2, 16)
MATVECG(tq2, TQ2, 4, 4) MATVECG(tq2, TQ2, 1, 16)
MATVECG(q4k, Q4K, 4, 4) MATVECG(q4k, Q4K, 1, 16) MATVECG(q4k, Q4K, 2, 16)

// matvec_batchs: Y[n, rows] = X[n, cols] W^T for q4 and q8 over a batch
// of decode tokens, as matvecs takes one: the NV vectors of blockIdx.y's
// group staged once a block in shared memory as int16 (stage_batch), a
// persistent grid over groups of NW*SROWS rows, a
// warp's SROWS rows over their whole length, each chunk of weights loaded
// once for the NV vectors and each staged x word read once for SROWS
// rows. (matvec_batch reads x from global memory for every 4 rows and
// multiplies floats: its instructions, not the weights, bound it.)
template <int FMT, int SROWS, int NW, int NV>
__device__ void matvec_batchs(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                              const __half* __restrict__ mins, const float* X, float* __restrict__ Y, int rows,
                              int nb, int row_bytes, int gb, int ng, int n) {
    constexpr int CB = chunk_blocks<FMT>(), U = chunk_u4<FMT>();
    constexpr bool MN = FMT == Q4;
    static_assert(SROWS * NV == 32, "a warp's sums are one a lane");
    extern __shared__ float4 xsh[];
    pdl_launch_dependents();
    // per: float4s of a staged vector (int16 values, then block scales and sums)
    const int v0 = blockIdx.y * NV, nv = min(NV, n - v0), nch = nb / CB, per = (nb * 72 + 15) / 16;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t cols = (size_t)nb * 32;
    pdl_wait();  // X is the previous kernel's output
    stage_batch<FMT, 8>(xsh, per, X + (size_t)v0 * cols, nv, nb);
    const int groups = (rows + SROWS * NW - 1) / (SROWS * NW);
    for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
        const int r0 = grp * SROWS * NW + warp * SROWS;
        if (r0 >= rows) continue;
        const uint8_t* wp[SROWS];
        size_t sb[SROWS];
#pragma unroll
        for (int r = 0; r < SROWS; r++) {
            const int row = min(r0 + r, rows - 1);
            wp[r] = W + (size_t)row * row_bytes;
            sb[r] = (size_t)row * ng;
        }
        float acc[SROWS][NV];
#pragma unroll
        for (int r = 0; r < SROWS; r++)
#pragma unroll
            for (int v = 0; v < NV; v++) acc[r][v] = 0.f;
        for (int c = lane; c < nch; c += 32) {
            uint32_t w[SROWS][4 * U];
            float sc[SROWS][CB], mn[SROWS][CB];
#pragma unroll
            for (int r = 0; r < SROWS; r++) {
                load_chunk<FMT>(wp[r] + (size_t)c * 16 * U, w[r]);
#pragma unroll
                for (int k = 0; k < CB; k++) {
                    const int g = (c * CB + k) / gb;
                    sc[r][k] = __half2float(scales[sb[r] + g]);
                    mn[r][k] = MN ? __half2float(mins[sb[r] + g]) : 0.f;
                }
            }
#pragma unroll
            for (int v = 0; v < NV; v++) {
                if (v >= nv) break;
                const uint4* xq = reinterpret_cast<const uint4*>(xsh + v * per);
                const float* xf = reinterpret_cast<const float*>(xsh + v * per + 4 * nb);
#pragma unroll
                for (int kb = 0; kb < CB; kb++) {
                    int xw[16];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const uint4 a = xq[(kb * 4 + q) * nch + c];
                        xw[4 * q] = a.x, xw[4 * q + 1] = a.y, xw[4 * q + 2] = a.z, xw[4 * q + 3] = a.w;
                    }
                    const float xs = xf[kb * nch + c], xsum = MN ? xf[nb + kb * nch + c] : 0.f;
#pragma unroll
                    for (int r = 0; r < SROWS; r++) {
                        const int sd = i16_dot<FMT>(&w[r][kb * (FMT == Q8 ? 8 : 4)], xw);
                        acc[r][v] += sc[r][kb] * (xs * (float)sd) + (MN ? mn[r][kb] * xsum : 0.f);
                    }
                }
            }
        }
        // The warp's 32 sums, reduced and scattered at once: each round
        // a lane keeps half its values (the upper half where its bit o is
        // set) and adds its partner's of the same half, so lane l ends
        // with sum l (row l / NV, vector l % NV), in 31 shuffles, not 160.
        float* a = &acc[0][0];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const bool upper = lane & o;
#pragma unroll
            for (int i = 0; i < o; i++) {
                const float send = upper ? a[i] : a[i + o], keep = upper ? a[i + o] : a[i];
                a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        }
        const int r = lane / NV, v = lane % NV;
        if (v < nv && r0 + r < rows) Y[(size_t)(v0 + v) * rows + r0 + r] = a[0];
    }
}

#define MATVEC_BATCHS(fmt, FMT)                                                                                  \
    extern "C" __global__ void __launch_bounds__(128) matvec_batchs_##fmt(                                      \
        const uint8_t* W, const __half* scales, const __half* mins, const float* X, float* Y, int rows, int nb, \
        int row_bytes, int gb, int ng, int n) {                                                                 \
        matvec_batchs<FMT, 4, 4, 8>(W, scales, mins, X, Y, rows, nb, row_bytes, gb, ng, n);                     \
    }
MATVEC_BATCHS(q8, Q8)
MATVEC_BATCHS(q4, Q4)

// matvec_flat: tq2 products with int8 x (BitNet's short ternary rows, NCH
// chunks of 16 bytes) without a loop over a row. A warp's SR rows are
// PER chunks a lane, all of them requested before the kernel waits for x:
// a product's whole share of the weights is in flight while the kernel
// before ends and x is staged, where the row loops leave a DRAM round
// trip after the wait each pass. Lane l takes chunk 32p + l of every row
// (pass p < FULL), so it reads that chunk of x once for the SR rows,
// then one a lane of the RP*32 (row, chunk) pairs left past the full
// passes; sum(x) is subtracted once a row, after the warp's sum.
// One warp a row group (no grid loop); fusions as matvecs (the gate and
// norm staged, accum, GO: the warp's first SR/2 rows gate and the rest up
// of SR/2 pairs).
template <int NW, int SR, int NCH, bool GO>
__device__ void matvec_flat(const uint8_t* __restrict__ W, const __half* __restrict__ scales, float tscale,
                            const float* x, float* __restrict__ y, int rows, int nb, int row_bytes,
                            const float* x2, int act, int cols, const float* __restrict__ nw, float eps,
                            float w_add, int accum, int oact) {
    constexpr int FULL = NCH / 32, REM = NCH % 32;  // full passes of the lanes over a row; chunks left
    constexpr int RP = (SR * REM + 31) / 32, PER = FULL * SR + RP, RD = REM > 0 ? REM : 1;
    // V: x's float4s a thread holds at once (x is staged in rounds past 3).
    constexpr int V = (NCH * 16 + 32 * NW - 1) / (32 * NW) < 3 ? (NCH * 16 + 32 * NW - 1) / (32 * NW) : 3;
    extern __shared__ float4 xsh[];
    pdl_launch_dependents();
    const int lane = threadIdx.x & 31, grp = blockIdx.x * NW + (threadIdx.x >> 5);
    const int half = rows / 2, outs = GO ? half : rows, per = GO ? SR / 2 : SR;  // per: outputs a warp
    const int f0 = grp * per;
    // row_of is the matrix row of the warp's row r (clamped; GO: pairs).
    auto row_of = [&](int r) {
        if (!GO) return min(f0 + r, rows - 1);
        const int o = min(f0 + r % (SR > 1 ? SR / 2 : 1), half - 1);
        return r < SR / 2 ? o : half + o;
    };
    // Chunk i of the lane: pass i / SR, row i % SR, then pair k of the rest.
    uint4 w[PER];
#pragma unroll
    for (int i = 0; i < FULL * SR; i++)
        w[i] = ld16(W + (size_t)row_of(i % SR) * row_bytes + (size_t)(32 * (i / SR) + lane) * 16);
#pragma unroll
    for (int m = 0; m < RP; m++) {
        const int k = lane + 32 * m;
        if (k < SR * REM) w[FULL * SR + m] = ld16(W + (size_t)row_of(k / RD) * row_bytes + (size_t)(32 * FULL + k % RD) * 16);
    }
    // The rows' scales (lane 0 writes the outputs): constant, so before
    // the wait too; after it they would be a DRAM round trip at the end.
    float ts[SR];
#pragma unroll
    for (int r = 0; r < SR; r++) ts[r] = lane == 0 ? tq2_scale(scales, row_of(r), tscale) : 0.f;
    stage_norm<V> sn;
    stage_pre<V>(sn, nw, w_add, nb);
    pdl_wait();
    int qs;  // sum(x) over the row: subtracted once a row (tq2_dot8)
    const float ys = stage_x<TQ2, V>(xsh, x, x2, act, cols, nw, sn, eps, w_add, true, nb, &qs);
    const uint4* xq = reinterpret_cast<const uint4*>(xsh);
    // iacc[r]: row r's sum(code * x). (tq2_dot8's four plane sums are
    // combined every chunk, not kept apart to the end of the row: four
    // accumulators a row would take registers the weights in flight need.)
    int iacc[SR];
#pragma unroll
    for (int r = 0; r < SR; r++) iacc[r] = 0;
#pragma unroll
    for (int p = 0; p < FULL; p++) {
        int xw[16];
        load_x8(xq, NCH, 32 * p + lane, xw);
#pragma unroll
        for (int r = 0; r < SR; r++) {
            const uint4 c = w[p * SR + r];
            const uint32_t u[4] = {c.x, c.y, c.z, c.w};
            iacc[r] += tq2_dot8(u, xw, 0);
        }
    }
#pragma unroll
    for (int m = 0; m < RP; m++) {
        const int k = lane + 32 * m;
        if (k >= SR * REM) break;
        int xw[16];
        load_x8(xq, NCH, 32 * FULL + k % RD, xw);
        const uint4 c = w[FULL * SR + m];
        const uint32_t u[4] = {c.x, c.y, c.z, c.w};
        const int sd = tq2_dot8(u, xw, 0);
#pragma unroll
        for (int r = 0; r < SR; r++) iacc[r] += k / RD == r ? sd : 0;
    }
#pragma unroll
    for (int r = 0; r < SR; r++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) iacc[r] += __shfl_xor_sync(0xffffffffu, iacc[r], o);
    if (lane != 0 || f0 >= outs) return;
    float v[SR];
#pragma unroll
    for (int r = 0; r < SR; r++) v[r] = (float)(iacc[r] - qs) * ts[r] * ys;
    if (GO) {
#pragma unroll
        for (int k = 0; k < SR / 2; k++)
            if (f0 + k < half) y[f0 + k] = glu_act(v[k], v[k + SR / 2], oact);
    } else {
#pragma unroll
        for (int r = 0; r < SR; r++)
            if (f0 + r < rows) store_out(y + f0 + r, v[r], accum);
    }
}

// matvec_tq2_flat<NCH>[g]: matvec_flat for rows of NCH chunks (64*NCH
// weights), SR rows a warp, NW warps a block, MINB blocks
// an SM (the host reads NW from the launch bounds, Device.maxThreads); g:
// the gated output. Every block stages the whole x, so fewer, larger
// blocks stage it fewer times: 16 warps a block, and 32 for the gated
// output (the gate/up product's many rows: one block an SM). The plain
// products' grids hold one block an SM at most (BitNet's q/k/v 80 blocks,
// o 54), so MINB 1 lets them take 128 registers and more: two blocks an SM
// would cap them at 64, and the weights a lane holds in flight would
// spill. The 2560-weight rows (BitNet-2B's q/k/v and o) take 12 warps: 80
// and 54 blocks rather than 60 and 40, so more SMs fetch weights at once
// while a block still stages x once for many rows.
// These lines must match flatKernels in matvec.go (TestFlatKernels).
#define MATVEC_FLAT(SR, NCH, GO, suffix, NW, MINB)                                                            \
    extern "C" __global__ void __launch_bounds__(32 * NW, MINB) matvec_tq2_flat##NCH##suffix(                 \
        const uint8_t* W, const __half* scales, float tscale, const float* x, float* y, int rows, int nb,      \
        int row_bytes, const float* x2, int act, int cols, const float* nw, float eps, float w_add, int accum, \
        int oact) {                                                                                           \
        matvec_flat<NW, SR, NCH, GO>(W, scales, tscale, x, y, rows, nb, row_bytes, x2, act, cols, nw, eps,    \
                                     w_add, accum, oact);                                                     \
    }
MATVEC_FLAT(4, 32, false, , 16, 1) MATVEC_FLAT(4, 32, true, g, 32, 1)
MATVEC_FLAT(4, 40, false, , 12, 1) MATVEC_FLAT(4, 40, true, g, 32, 1)
MATVEC_FLAT(4, 48, false, , 16, 1) MATVEC_FLAT(4, 48, true, g, 32, 1)
MATVEC_FLAT(4, 64, false, , 16, 1) MATVEC_FLAT(4, 64, true, g, 32, 1)
// matvec_tq2_flat108: rows of 6912 weights (BitNet's down projection), two
// rows a warp, 18 warps a block: 72 blocks for BitNet-2B's 2560 rows, so
// more of them start (and fetch their weights) beside the gate/up product's
// 108, and 576 threads stage x's 1728 float4s in one pass of three each
// (fewer threads would take a second pass, after the wait for x).
MATVEC_FLAT(2, 108, false, , 18, 1)

// quantize_i8 quantizes x[0..n) to int8 by absmax, as BitNet does: one
// block of 1024 threads per vector; block b reads x + b*n and writes
// q + b*q_stride and scale_out[b] (several tokens in one launch). scale_out[0] = max(amax, 1e-5)/127 expressed as
// 1/(127/amax), q = clip(rint(x*127/amax), -128, 127) (round half to even).
extern "C" __global__ void __launch_bounds__(1024) quantize_i8(const float* x, int n,
                                                               int8_t* __restrict__ q, float* __restrict__ scale_out,
                                                               int q_stride) {
    __shared__ float red[32];
    pdl_launch_dependents();
    pdl_wait();
    x += (size_t)blockIdx.x * n;
    q += (size_t)blockIdx.x * q_stride;
    scale_out += blockIdx.x;
    float m = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(ld_dep(x + i)));
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
        float v = rintf(__fmul_rn(ld_dep(x + i), s));
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
                          const int8_t* q, const float* xscale, float* __restrict__ y,
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
        const uint4 q0 = ld_dep(qp), q1 = ld_dep(qp + 1);
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
    if (threadIdx.x == 0) {
        const float xs = ld_dep(xscale);
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < rows) y[row0 + r] = FMT == TQ2 ? acc[r] * tq2_scale(scales, row0 + r, tscale) * xs : acc[r] * xs;
    }
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
extern "C" __global__ void binarize(const float* x, int n, int gs, uint32_t* __restrict__ bits,
                                    float* __restrict__ beta) {
    pdl_launch_dependents();
    pdl_wait();
    const int g = blockIdx.x, lane = threadIdx.x;
    float s = 0.f;
    for (int i0 = g * gs; i0 < (g + 1) * gs; i0 += 32) {
        int i = i0 + lane;
        float v = i < n ? ld_dep(x + i) : -1.f;
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
                              const uint32_t* xb, const float* beta,
                              float* __restrict__ y, int rows, int cols, int nb, int row_bytes, int gb, int ng) {
    __shared__ float red[NT / 32][ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.f;
    for (int b = threadIdx.x; b < nb; b += NT) {
        const uint32_t x = ld_dep(xb + b);
        const int g = b / gb;
        const float bt = ld_dep(beta + g);
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
