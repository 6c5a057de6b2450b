// attn_decode.cu: attention of one new token over the KV cache, with the
// rotary embedding of q and k folded in, split over the sequence
// (flash-decoding).
//
// Grid: (kv_heads * split, S). Block (blk, s) takes G = heads/kv_heads/
// split of the query heads that share kv head blk/split, over the s-th of
// S equal slices of the visible positions: every key and value row is read
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
#include "attn_decode.cuh"

#define ATTN_DECODE(HD, G2)                                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * NW)                                                    \
        attn_decode_##HD##_##G2(const float* q, const float* kcur, const float* vcur, float* kc, float* vc,   \
                                float* out, float* part, int* count, int heads, int kv_heads, const int* pos, \
                                float scale, const float2* rope_cs, int window, int chunk_max) {              \
        attn_decode<HD, G2>(q, kcur, vcur, kc, vc, out, part, count, heads, kv_heads, pos, scale, rope_cs,    \
                            window, chunk_max, blockIdx.x, gridDim.x, blockIdx.y, gridDim.y);                 \
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
