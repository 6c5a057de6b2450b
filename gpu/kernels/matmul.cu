// matmul.cu: prefill products Y[n, rows] = X[n, cols] W^T for every weight
// format. A first, simple tiled kernel: a 64x32 tile of W is dequantized
// into shared memory beside a 32x64 tile of X, and 256 threads each compute
// 4x4 outputs in fp32. (Tensor cores come later.) GGUF's block formats are
// dequantized a weight at a time from their blocks (bval), lowbit's
// super-block formats from theirs and their scale table (sval).
#include <cuda_fp16.h>
#include <stdint.h>

enum { F32 = 0, F16 = 1, Q8 = 2, Q4 = 3, Q2 = 4, Q1 = 5, TQ2 = 6, Q5_0 = 7, Q5_1 = 8, Q2K = 9, Q3K = 10, Q4K = 11, Q5K = 12, Q6K = 13,
       Q2S = 14, Q3S = 15, Q4S = 16 };

#define BM 64
#define BN 64
#define BK 32

// code2 is the 2-bit code of weight c of a q2 or tq2 row (the layout:
// 8 bytes a 32-weight block, bit pair j/8 of byte j%8).
__device__ __forceinline__ int code2(const uint8_t* row, int c) {
    const int b = c >> 5, j = c & 31;
    return (row[b * 8 + (j & 7)] >> (2 * (j >> 3))) & 3;
}

// f16at is the fp16 at p (2-byte aligned) as a float.
__device__ __forceinline__ float f16at(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

// bval is weight c of a row of GGUF's block format FMT (their scales are
// inside the blocks), one weight at a time from the layout's definition:
// each format ports quantize's code<Fmt> and scale<Fmt>
// (quantize/<fmt>.go; kScales and q3kScale for the sub-block scales).
template <int FMT>
__device__ __forceinline__ float bval(const uint8_t* row, int c) {
    if (FMT == Q5_0 || FMT == Q5_1) {
        // d (q5_1: then m), qh (bit j: weight j's fifth bit), qs (byte j:
        // weight j's low nibble, weight j+16's high one).
        const int at = FMT == Q5_0 ? 2 : 4, j = c & 31;
        const uint8_t* b = row + (c >> 5) * (FMT == Q5_0 ? 22 : 24);
        const int q = ((b[at + 4 + (j & 15)] >> (j >= 16 ? 4 : 0)) & 15) | ((b[at + (j >> 3)] >> (j & 7)) & 1) << 4;
        return FMT == Q5_0 ? f16at(b) * (float)(q - 16) : f16at(b) * (float)q + f16at(b + 2);
    }
    const int i = c & 255;
    if (FMT == Q4K || FMT == Q5K) {
        // d, dmin, 12 scale bytes, (q5k: qh[32]), qs[128].
        const uint8_t* b = row + (c >> 8) * (FMT == Q4K ? 144 : 176);
        const uint8_t* s = b + 4;
        const int j = i >> 5;
        const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        const int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        int q = (b[(FMT == Q4K ? 16 : 48) + 32 * (i >> 6) + (i & 31)] >> (4 * ((i >> 5) & 1))) & 15;
        if (FMT == Q5K) q |= ((b[16 + (i & 31)] >> j) & 1) << 4;
        return f16at(b) * (float)sc * (float)q - f16at(b + 2) * (float)mn;
    }
    if (FMT == Q6K) {
        // ql[128], qh[64], 16 int8 scales, d.
        const uint8_t* b = row + (c >> 8) * 210;
        const int h = i >> 7, p = (i >> 5) & 3, l = i & 31;
        const int q = ((b[64 * h + l + 32 * (p & 1)] >> (4 * (p >> 1))) & 15) | ((b[128 + 32 * h + l] >> (2 * p)) & 3) << 4;
        return f16at(b + 208) * (float)(int8_t)b[192 + (i >> 4)] * (float)(q - 32);
    }
    if (FMT == Q2K) {
        // 16 scale (low nibble) and minimum (high nibble) bytes, qs[64], d, dmin.
        const uint8_t* b = row + (c >> 8) * 84;
        const int s = b[i >> 4];
        const int q = (b[16 + 32 * (i >> 7) + (i & 31)] >> (2 * ((i >> 5) & 3))) & 3;
        return f16at(b + 80) * (float)(s & 15) * (float)q - f16at(b + 82) * (float)(s >> 4);
    }
    // Q3K: hmask[32], qs[64], 12 scale bytes, d.
    const uint8_t* b = row + (c >> 8) * 110;
    const int k = i >> 4;
    const int s = ((b[96 + (k & 7)] >> (k >= 8 ? 4 : 0)) & 15) | ((b[104 + (k & 3)] >> (2 * (k >> 2))) & 3) << 4;
    const int q = ((b[32 + 32 * (i >> 7) + (i & 31)] >> (2 * ((i >> 5) & 3))) & 3) |
                  ((b[i & 31] >> (4 * (i >> 7) + ((i >> 5) & 3))) & 1) << 2;
    return f16at(b + 108) * (float)(s - 32) * (float)(q - 4);
}

// sval is weight c of a row of lowbit's super-block format FMT
// (quantize/sblock.go): the 32-weight block's byte of c's half (scale
// code k low, zero-point code z high) gives the scale tbl[k] (tbl: the
// sub-block scale of each code) and the minimum -(scale * z*L/15), as
// params computes them; the code is q4s's nibble as q4's, q2s's and q3s's
// two low bits as q2's, q3s's high bit in a little-endian uint32.
template <int FMT>
__device__ __forceinline__ float sval(const uint8_t* row, const float* tbl, int c) {
    constexpr int L = FMT == Q2S ? 3 : FMT == Q3S ? 7 : 15, BB = FMT == Q2S ? 10 : FMT == Q3S ? 14 : 18;
    const uint8_t* b = row + (c >> 5) * BB;
    const int j = c & 31, s = b[j >> 4];
    int q;
    if (FMT == Q4S) {
        q = (b[2 + (j & 15)] >> (4 * (j >> 4))) & 15;
    } else {
        q = (b[2 + (j & 7)] >> (2 * (j >> 3))) & 3;
        if (FMT == Q3S) q |= ((b[10 + (j >> 3)] >> (j & 7)) & 1) << 2;
    }
    const float d = tbl[s & 15], m = -(d * ((float)((s >> 4) * L) / 15.f));
    return d * (float)q + m;
}

// Weight c of a packed row, dequantized (the layout's definition).
template <int FMT>
__device__ __forceinline__ float wval(const uint8_t* row, const __half* sc, const __half* mn, float ts, int c,
                                      int gb) {
    const int b = c >> 5, j = c & 31, g = b / gb;
    if (FMT == F32) return reinterpret_cast<const float*>(row)[c];
    if (FMT == F16) return __half2float(reinterpret_cast<const __half*>(row)[c]);
    if (FMT == Q8) return __half2float(sc[g]) * (float)(int8_t)row[c];
    if (FMT == Q4) {
        uint8_t v = row[b * 16 + (j & 15)];
        return __half2float(sc[g]) * (float)(j >= 16 ? v >> 4 : v & 15) + __half2float(mn[g]);
    }
    if (FMT == Q2) return __half2float(sc[g]) * (float)code2(row, c) + __half2float(mn[g]);
    if (FMT == TQ2) return ts * (float)(code2(row, c) - 1);
    if (FMT >= Q2S) return sval<FMT>(row, reinterpret_cast<const float*>(sc), c);
    if (FMT >= Q5_0) return bval<FMT>(row, c);
    // Q1
    const float d = __half2float(sc[g]);
    return (row[b * 4 + (j >> 3)] >> (j & 7)) & 1 ? d : -d;
}

template <int FMT>
__device__ void matmul(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                       const __half* __restrict__ mins, float tscale, const float* __restrict__ X,
                       float* __restrict__ Y, int rows, int cols, int n, int row_bytes, int gb, int ng) {
    __shared__ float Ws[BK][BM + 4];
    __shared__ float Xs[BK][BN + 4];
    const int t = threadIdx.x;
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * BN;
    const int lm = t >> 2, lk = (t & 3) * 8;
    const int tx = t & 15, ty = t >> 4;
    float acc[4][4] = {};
    const int wr = r0 + lm;
    const uint8_t* wrow = W + (size_t)min(wr, rows - 1) * row_bytes;
    const __half* wsc = scales ? scales + (size_t)min(wr, rows - 1) * ng : nullptr;
    const __half* wmn = mins ? mins + (size_t)min(wr, rows - 1) * ng : nullptr;
    const int xt = t0 + lm;
    for (int c0 = 0; c0 < cols; c0 += BK) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const int c = c0 + lk + kk;
            Ws[lk + kk][lm] = (wr < rows && c < cols) ? wval<FMT>(wrow, wsc, wmn, tscale, c, gb) : 0.f;
            Xs[lk + kk][lm] = (xt < n && c < cols) ? X[(size_t)xt * cols + c] : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < BK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = Ws[k][ty * 4 + i], b[i] = Xs[k][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int tok = t0 + tx * 4 + j;
        if (tok >= n) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = r0 + ty * 4 + i;
            if (r < rows) Y[(size_t)tok * rows + r] = acc[i][j];
        }
    }
}

#define MATMUL(name, FMT)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                                    \
        name(const uint8_t* W, const __half* scales, const __half* mins, float tscale, const float* X,   \
             float* Y, int rows, int cols, int n, int row_bytes, int gb, int ng) {                       \
        matmul<FMT>(W, scales, mins, tscale, X, Y, rows, cols, n, row_bytes, gb, ng);                    \
    }
MATMUL(matmul_f32, F32)
MATMUL(matmul_f16, F16)
MATMUL(matmul_q8, Q8)
MATMUL(matmul_q4, Q4)
MATMUL(matmul_q2, Q2)
MATMUL(matmul_q1, Q1)
MATMUL(matmul_tq2, TQ2)
MATMUL(matmul_q5_0, Q5_0)
MATMUL(matmul_q5_1, Q5_1)
MATMUL(matmul_q2k, Q2K)
MATMUL(matmul_q3k, Q3K)
MATMUL(matmul_q4k, Q4K)
MATMUL(matmul_q5k, Q5K)
MATMUL(matmul_q6k, Q6K)
MATMUL(matmul_q2s, Q2S)
MATMUL(matmul_q3s, Q3S)
MATMUL(matmul_q4s, Q4S)

// Prefill through cuBLAS: a panel of weight rows is dequantized to fp16
// (row-major [rows, cols]) and the activations converted to fp16, then a
// tensor-core GEMM with fp32 accumulation takes the product (gpu/blas.go).

// dequant_f16: rows of W (grid.x = row) to fp16, two weights a thread.
template <int FMT>
__device__ void dequant_f16(const uint8_t* __restrict__ W, const __half* __restrict__ scales,
                            const __half* __restrict__ mins, float tscale, __half* __restrict__ out, int cols,
                            int row_bytes, int gb, int ng) {
    const size_t r = blockIdx.x;
    const uint8_t* row = W + r * row_bytes;
    const __half* sc = scales ? scales + r * ng : nullptr;
    const __half* mn = mins ? mins + r * ng : nullptr;
    __half* o = out + r * cols;
    for (int c = 2 * threadIdx.x; c < cols; c += 2 * blockDim.x) {
        const float a = wval<FMT>(row, sc, mn, tscale, c, gb);
        if (c + 1 < cols && (cols & 1) == 0) {
            const float b = wval<FMT>(row, sc, mn, tscale, c + 1, gb);
            *reinterpret_cast<__half2*>(o + c) = __floats2half2_rn(a, b);
        } else {
            o[c] = __float2half_rn(a);
            if (c + 1 < cols) o[c + 1] = __float2half_rn(wval<FMT>(row, sc, mn, tscale, c + 1, gb));
        }
    }
}

#define DEQUANT(name, FMT)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                                        \
        name(const uint8_t* W, const __half* scales, const __half* mins, float tscale, __half* out, int cols, \
             int row_bytes, int gb, int ng) {                                                                \
        dequant_f16<FMT>(W, scales, mins, tscale, out, cols, row_bytes, gb, ng);                             \
    }
DEQUANT(dequant_f16_q8, Q8)
DEQUANT(dequant_f16_q4, Q4)
DEQUANT(dequant_f16_q2, Q2)
DEQUANT(dequant_f16_q1, Q1)
DEQUANT(dequant_f16_q5_0, Q5_0)
DEQUANT(dequant_f16_q5_1, Q5_1)
DEQUANT(dequant_f16_q2k, Q2K)
DEQUANT(dequant_f16_q3k, Q3K)
DEQUANT(dequant_f16_q4k, Q4K)
DEQUANT(dequant_f16_q5k, Q5K)
DEQUANT(dequant_f16_q6k, Q6K)
DEQUANT(dequant_f16_q2s, Q2S)
DEQUANT(dequant_f16_q3s, Q3S)
DEQUANT(dequant_f16_q4s, Q4S)

// f32_to_f16 converts x[0..n) to fp16 (round to nearest even).
extern "C" __global__ void f32_to_f16(const float* __restrict__ x, __half* __restrict__ y, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn(x[i]);
}

// Ternary prefill through cuBLAS's int8 GEMM (gpu/blas.go): a panel of tq2
// rows is unpacked to int8 weights t in {-1, 0, 1} (dequant_i8_tq2, the
// layout of code2), the GEMM sums t * q over the tokens' int8 activations q
// exactly in int32, and scale_i8_tq2 makes the sums floats as the
// matrix-vector kernels do: sum * the row's scale * the token's scale.
// cols is a multiple of 4 (four weights a thread at once).
extern "C" __global__ void __launch_bounds__(256)
    dequant_i8_tq2(const uint8_t* __restrict__ W, int8_t* __restrict__ out, int cols, int row_bytes) {
    const size_t r = blockIdx.x;
    const uint8_t* row = W + r * row_bytes;
    for (int c = 4 * threadIdx.x; c < cols; c += 4 * blockDim.x) {
        *reinterpret_cast<char4*>(out + r * cols + c) =
            make_char4(code2(row, c) - 1, code2(row, c + 1) - 1, code2(row, c + 2) - 1, code2(row, c + 3) - 1);
    }
}

// scale_i8_tq2 turns y[n, rows], the GEMM's int32 sums, into floats in
// place: y[t, r] = sum * (row_scale ? row_scale[r] : tscale) * xscale[t].
extern "C" __global__ void scale_i8_tq2(float* y, int rows, int n, const float* __restrict__ row_scale, float tscale,
                                        const float* xscale) {
    const size_t total = (size_t)rows * n;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i % rows), t = (int)(i / rows);
        const float ws = row_scale != nullptr ? row_scale[r] : tscale;
        y[i] = (float)reinterpret_cast<const int*>(y)[i] * ws * xscale[t];
    }
}
