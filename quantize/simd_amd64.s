#include "textflag.h"

// func asymCodesAVX2(w *float32, n int, m, inv, top float32, codes *int32) (sq, sqq int32, sqw float32)
// For n (a multiple of 8) weights: q = int32(clamp((w-m)*inv, 0, top) + 0.5)
// into codes, and the sums of q, q² and q·w.
TEXT ·asymCodesAVX2(SB), NOSPLIT, $0-52
	MOVQ w+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ codes+32(FP), DI
	VBROADCASTSS m+16(FP), Y1
	VBROADCASTSS inv+20(FP), Y2
	VBROADCASTSS top+24(FP), Y3
	VXORPS Y4, Y4, Y4
	MOVL $0x3f000000, AX        // 0.5
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	VPXOR Y8, Y8, Y8            // Σq
	VPXOR Y9, Y9, Y9            // Σq²
	VXORPS Y10, Y10, Y10        // Σq·w
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y0
	VSUBPS Y1, Y0, Y6
	VMULPS Y2, Y6, Y6
	VMAXPS Y4, Y6, Y6
	VMINPS Y3, Y6, Y6
	VADDPS Y5, Y6, Y6
	VCVTTPS2DQ Y6, Y7
	VMOVDQU Y7, (DI)
	VPADDD Y7, Y8, Y8
	VPMULLD Y7, Y7, Y11
	VPADDD Y11, Y9, Y9
	VCVTDQ2PS Y7, Y12
	VFMADD231PS Y0, Y12, Y10
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loop

done:
	VEXTRACTI128 $1, Y8, X13
	VPADDD X13, X8, X8
	VPHADDD X8, X8, X8
	VPHADDD X8, X8, X8
	VMOVD X8, AX
	MOVL AX, sq+40(FP)
	VEXTRACTI128 $1, Y9, X13
	VPADDD X13, X9, X9
	VPHADDD X9, X9, X9
	VPHADDD X9, X9, X9
	VMOVD X9, AX
	MOVL AX, sqq+44(FP)
	VEXTRACTF128 $1, Y10, X13
	VADDPS X13, X10, X10
	VHADDPS X10, X10, X10
	VHADDPS X10, X10, X10
	VZEROUPPER
	MOVSS X10, sqw+48(FP)
	RET

// KSUB accumulates the products of 32 unsigned codes (bytes of yq, xq its
// low half) with the 32 floats at xoff(DI) into Y13, scaled by soff(BX),
// and their sum of x into Y14, scaled by soff(DX). It uses Y3-Y12.
#define KSUB(yq, xq, xoff, soff) \
	VPMOVZXBD xq, Y3; \
	VPSRLDQ $8, xq, X4; \
	VPMOVZXBD X4, Y4; \
	VEXTRACTI128 $1, yq, X5; \
	VPMOVZXBD X5, Y6; \
	VPSRLDQ $8, X5, X5; \
	VPMOVZXBD X5, Y7; \
	VCVTDQ2PS Y3, Y3; \
	VCVTDQ2PS Y4, Y4; \
	VCVTDQ2PS Y6, Y6; \
	VCVTDQ2PS Y7, Y7; \
	VMOVUPS xoff(DI), Y8; \
	VMOVUPS xoff+32(DI), Y9; \
	VMOVUPS xoff+64(DI), Y10; \
	VMOVUPS xoff+96(DI), Y11; \
	VMULPS Y8, Y3, Y3; \
	VFMADD231PS Y9, Y4, Y3; \
	VMULPS Y10, Y6, Y6; \
	VFMADD231PS Y11, Y7, Y6; \
	VADDPS Y6, Y3, Y3; \
	VADDPS Y9, Y8, Y8; \
	VADDPS Y11, Y10, Y10; \
	VADDPS Y10, Y8, Y8; \
	VBROADCASTSS soff(BX), Y12; \
	VFMADD231PS Y12, Y3, Y13; \
	VBROADCASTSS soff(DX), Y12; \
	VFMADD231PS Y12, Y8, Y14

// func dotQ4KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32
// For n q4k super-blocks at q (144 bytes each) and 256n floats at x:
// Σ sub-blocks sc[j]*Σ code·x - mn[j]*Σ x, with sc and mn the sub-blocks'
// scales d*sc and minimums dmin*m (8 a super-block), as dotQ4KGo.
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $0-44
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), BX
	MOVQ mn+24(FP), DX
	MOVQ n+32(FP), CX
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15       // nibble mask
	VXORPS Y13, Y13, Y13        // Σ sc·Σ code·x
	VXORPS Y14, Y14, Y14        // Σ mn·Σ x
	TESTQ CX, CX
	JZ   k4done

k4block:
	MOVQ $4, R8
	LEAQ 16(SI), R9             // qs

k4chunk:
	VMOVDQU (R9), Y0
	VPAND   Y15, Y0, Y1         // low nibbles: weights 0..31 of the chunk
	VPSRLW  $4, Y0, Y2
	VPAND   Y15, Y2, Y2         // high nibbles: weights 32..63
	KSUB(Y1, X1, 0, 0)
	KSUB(Y2, X2, 128, 4)
	ADDQ $32, R9
	ADDQ $256, DI
	ADDQ $8, BX
	ADDQ $8, DX
	DECQ R8
	JNZ  k4chunk
	ADDQ $144, SI
	DECQ CX
	JNZ  k4block

k4done:
	VSUBPS Y14, Y13, Y13
	VEXTRACTF128 $1, Y13, X12
	VADDPS X12, X13, X13
	VHADDPS X13, X13, X13
	VHADDPS X13, X13, X13
	VZEROUPPER
	MOVSS X13, ret+40(FP)
	RET

// func dotQ5KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32
// dotQ4KAVX2 for q5k super-blocks (176 bytes each), each code's fifth bit
// taken from qh: bit 2c (low nibbles) and 2c+1 (high) of qh[l] in chunk c.
TEXT ·dotQ5KAVX2(SB), NOSPLIT, $0-44
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), BX
	MOVQ mn+24(FP), DX
	MOVQ n+32(FP), CX
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15       // nibble mask
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	TESTQ CX, CX
	JZ   k5done

k5block:
	MOVQ $4, R8
	LEAQ 48(SI), R9             // qs
	VMOVDQU 16(SI), Y0          // qh, shifted right by 2 after each chunk

k5chunk:
	VMOVDQU (R9), Y2
	MOVL $0x01010101, AX
	VMOVD AX, X1
	VPBROADCASTD X1, Y1
	VPAND   Y0, Y1, Y1          // fifth bits of the low nibbles
	VPSLLW  $4, Y1, Y1
	VPAND   Y15, Y2, Y3
	VPOR    Y3, Y1, Y1          // codes 0..31 of the chunk
	MOVL $0x02020202, AX
	VMOVD AX, X3
	VPBROADCASTD X3, Y3
	VPAND   Y0, Y3, Y3          // fifth bits of the high nibbles
	VPSLLW  $3, Y3, Y3
	VPSRLW  $4, Y2, Y2
	VPAND   Y15, Y2, Y2
	VPOR    Y3, Y2, Y2          // codes 32..63
	VPSRLW  $2, Y0, Y0
	KSUB(Y1, X1, 0, 0)
	KSUB(Y2, X2, 128, 4)
	ADDQ $32, R9
	ADDQ $256, DI
	ADDQ $8, BX
	ADDQ $8, DX
	DECQ R8
	JNZ  k5chunk
	ADDQ $176, SI
	DECQ CX
	JNZ  k5block

k5done:
	VSUBPS Y14, Y13, Y13
	VEXTRACTF128 $1, Y13, X12
	VADDPS X12, X13, X13
	VHADDPS X13, X13, X13
	VHADDPS X13, X13, X13
	VZEROUPPER
	MOVSS X13, ret+40(FP)
	RET

// Q6SUB accumulates into Y13 the products of 32 signed codes (bytes of
// yq, xq its low half) with the 32 floats at xoff(DI): the first 16 scaled
// by soff(BX), the next 16 by soff+4(BX). It uses Y4-Y8.
#define Q6SUB(yq, xq, xoff, soff) \
	VPMOVSXBD xq, Y4; \
	VPSRLDQ $8, xq, X5; \
	VPMOVSXBD X5, Y5; \
	VEXTRACTI128 $1, yq, X6; \
	VPMOVSXBD X6, Y7; \
	VPSRLDQ $8, X6, X6; \
	VPMOVSXBD X6, Y6; \
	VCVTDQ2PS Y4, Y4; \
	VCVTDQ2PS Y5, Y5; \
	VCVTDQ2PS Y7, Y7; \
	VCVTDQ2PS Y6, Y6; \
	VMULPS xoff(DI), Y4, Y4; \
	VFMADD231PS xoff+32(DI), Y5, Y4; \
	VMULPS xoff+64(DI), Y7, Y7; \
	VFMADD231PS xoff+96(DI), Y6, Y7; \
	VBROADCASTSS soff(BX), Y8; \
	VFMADD231PS Y8, Y4, Y13; \
	VBROADCASTSS soff+4(BX), Y8; \
	VFMADD231PS Y8, Y7, Y13

// func dotQ6KAVX2(q *byte, x *float32, sc *float32, n int) float32
// For n q6k super-blocks at q (210 bytes each) and 256n floats at x:
// Σ sub-blocks sc[k]*Σ (code-32)·x, with sc the sub-blocks' scales d*sc
// (16 a super-block), as dotQ6KGo.
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $0-36
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), BX
	MOVQ n+24(FP), CX
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15       // low nibble
	MOVL $0x30303030, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14       // bits 4-5
	MOVL $0x20202020, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12       // 32, the codes' offset
	VXORPS Y13, Y13, Y13
	TESTQ CX, CX
	JZ   k6done

k6block:
	MOVQ $2, R8
	MOVQ SI, R9                 // ql
	LEAQ 128(SI), R10           // qh

k6half:
	VMOVDQU (R9), Y0            // ql[l]
	VMOVDQU 32(R9), Y1          // ql[l+32]
	VMOVDQU (R10), Y2           // qh[l]

	VPAND   Y15, Y0, Y3         // p = 0: low nibble of ql[l], bits 0-1 of qh[l]
	VPSLLW  $4, Y2, Y9
	VPAND   Y14, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	Q6SUB(Y3, X3, 0, 0)

	VPAND   Y15, Y1, Y3         // p = 1: low nibble of ql[l+32], bits 2-3
	VPSLLW  $2, Y2, Y9
	VPAND   Y14, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	Q6SUB(Y3, X3, 128, 8)

	VPSRLW  $4, Y0, Y3          // p = 2: high nibble of ql[l], bits 4-5
	VPAND   Y15, Y3, Y3
	VPAND   Y14, Y2, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	Q6SUB(Y3, X3, 256, 16)

	VPSRLW  $4, Y1, Y3          // p = 3: high nibble of ql[l+32], bits 6-7
	VPAND   Y15, Y3, Y3
	VPSRLW  $2, Y2, Y9
	VPAND   Y14, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	Q6SUB(Y3, X3, 384, 24)

	ADDQ $64, R9
	ADDQ $32, R10
	ADDQ $512, DI
	ADDQ $32, BX
	DECQ R8
	JNZ  k6half
	ADDQ $210, SI
	DECQ CX
	JNZ  k6block

k6done:
	VEXTRACTF128 $1, Y13, X11
	VADDPS X11, X13, X13
	VHADDPS X13, X13, X13
	VHADDPS X13, X13, X13
	VZEROUPPER
	MOVSS X13, ret+32(FP)
	RET

// K16SUB is KSUB for 16-weight sub-blocks: of the 32 unsigned codes in yq,
// the first 16 are scaled by soff(BX) (their Σ x by soff(DX)), the next
// 16 by soff+4(BX) (soff+4(DX)). It uses Y3-Y12.
#define K16SUB(yq, xq, xoff, soff) \
	VPMOVZXBD xq, Y3; \
	VPSRLDQ $8, xq, X4; \
	VPMOVZXBD X4, Y4; \
	VEXTRACTI128 $1, yq, X5; \
	VPMOVZXBD X5, Y6; \
	VPSRLDQ $8, X5, X5; \
	VPMOVZXBD X5, Y7; \
	VCVTDQ2PS Y3, Y3; \
	VCVTDQ2PS Y4, Y4; \
	VCVTDQ2PS Y6, Y6; \
	VCVTDQ2PS Y7, Y7; \
	VMOVUPS xoff(DI), Y8; \
	VMOVUPS xoff+32(DI), Y9; \
	VMOVUPS xoff+64(DI), Y10; \
	VMOVUPS xoff+96(DI), Y11; \
	VMULPS Y8, Y3, Y3; \
	VFMADD231PS Y9, Y4, Y3; \
	VMULPS Y10, Y6, Y6; \
	VFMADD231PS Y11, Y7, Y6; \
	VADDPS Y9, Y8, Y8; \
	VADDPS Y11, Y10, Y10; \
	VBROADCASTSS soff(BX), Y12; \
	VFMADD231PS Y12, Y3, Y13; \
	VBROADCASTSS soff+4(BX), Y12; \
	VFMADD231PS Y12, Y6, Y13; \
	VBROADCASTSS soff(DX), Y12; \
	VFMADD231PS Y12, Y8, Y14; \
	VBROADCASTSS soff+4(DX), Y12; \
	VFMADD231PS Y12, Y10, Y14

// func dotQ2KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32
// For n q2k super-blocks at q (84 bytes each) and 256n floats at x:
// Σ sub-blocks sc[k]*Σ code·x - mn[k]*Σ x, with sc and mn the sub-blocks'
// scales d*sc and minimums dmin*m (16 a super-block), as dotQ2KGo.
TEXT ·dotQ2KAVX2(SB), NOSPLIT, $0-44
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), BX
	MOVQ mn+24(FP), DX
	MOVQ n+32(FP), CX
	MOVL $0x03030303, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15       // two bits
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	TESTQ CX, CX
	JZ   k2done

k2block:
	MOVQ $2, R8
	LEAQ 16(SI), R9             // qs

k2half:
	VMOVDQU (R9), Y0
	VPAND   Y15, Y0, Y1         // weights l: bits 0-1
	K16SUB(Y1, X1, 0, 0)
	VPSRLW  $2, Y0, Y1          // weights 32+l: bits 2-3
	VPAND   Y15, Y1, Y1
	K16SUB(Y1, X1, 128, 8)
	VPSRLW  $4, Y0, Y1          // weights 64+l: bits 4-5
	VPAND   Y15, Y1, Y1
	K16SUB(Y1, X1, 256, 16)
	VPSRLW  $6, Y0, Y1          // weights 96+l: bits 6-7
	VPAND   Y15, Y1, Y1
	K16SUB(Y1, X1, 384, 24)
	ADDQ $32, R9
	ADDQ $512, DI
	ADDQ $32, BX
	ADDQ $32, DX
	DECQ R8
	JNZ  k2half
	ADDQ $84, SI
	DECQ CX
	JNZ  k2block

k2done:
	VSUBPS Y14, Y13, Y13
	VEXTRACTF128 $1, Y13, X12
	VADDPS X12, X13, X13
	VHADDPS X13, X13, X13
	VHADDPS X13, X13, X13
	VZEROUPPER
	MOVSS X13, ret+40(FP)
	RET

// func dotQ3KAVX2(q *byte, x *float32, sc *float32, n int) float32
// For n q3k super-blocks at q (110 bytes each) and 256n floats at x:
// Σ sub-blocks sc[k]*Σ (code-4)·x, with sc the sub-blocks' scales
// d*(s-32) (16 a super-block), as dotQ3KGo. The high bits come from hmask,
// shifted right by one after each group of 32 weights.
TEXT ·dotQ3KAVX2(SB), NOSPLIT, $0-36
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), BX
	MOVQ n+24(FP), CX
	MOVL $0x03030303, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15       // two bits
	MOVL $0x01010101, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14       // one bit
	MOVL $0x04040404, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12       // 4, the codes' offset
	VXORPS Y13, Y13, Y13
	TESTQ CX, CX
	JZ   k3done

k3block:
	MOVQ $2, R8
	LEAQ 32(SI), R9             // qs
	VMOVDQU (SI), Y2            // hmask

k3half:
	VMOVDQU (R9), Y0

	VPAND   Y15, Y0, Y3         // weights l: bits 0-1, high bit 4n
	VPAND   Y14, Y2, Y9
	VPSLLW  $2, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	VPSRLW  $1, Y2, Y2
	Q6SUB(Y3, X3, 0, 0)

	VPSRLW  $2, Y0, Y3          // weights 32+l: bits 2-3, high bit 4n+1
	VPAND   Y15, Y3, Y3
	VPAND   Y14, Y2, Y9
	VPSLLW  $2, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	VPSRLW  $1, Y2, Y2
	Q6SUB(Y3, X3, 128, 8)

	VPSRLW  $4, Y0, Y3          // weights 64+l: bits 4-5, high bit 4n+2
	VPAND   Y15, Y3, Y3
	VPAND   Y14, Y2, Y9
	VPSLLW  $2, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	VPSRLW  $1, Y2, Y2
	Q6SUB(Y3, X3, 256, 16)

	VPSRLW  $6, Y0, Y3          // weights 96+l: bits 6-7, high bit 4n+3
	VPAND   Y15, Y3, Y3
	VPAND   Y14, Y2, Y9
	VPSLLW  $2, Y9, Y9
	VPOR    Y9, Y3, Y3
	VPSUBB  Y12, Y3, Y3
	VPSRLW  $1, Y2, Y2
	Q6SUB(Y3, X3, 384, 24)

	ADDQ $32, R9
	ADDQ $512, DI
	ADDQ $32, BX
	DECQ R8
	JNZ  k3half
	ADDQ $110, SI
	DECQ CX
	JNZ  k3block

k3done:
	VEXTRACTF128 $1, Y13, X11
	VADDPS X11, X13, X13
	VHADDPS X13, X13, X13
	VHADDPS X13, X13, X13
	VZEROUPPER
	MOVSS X13, ret+32(FP)
	RET

// func asymCodesWeightedAVX2(w, imp *float32, n int, m, inv, top float32, codes *int32) (sq, sqq, sqw float32)
// asymCodesAVX2 with the sums weighted by imp: Σimp·q, Σimp·q² and Σimp·q·w.
TEXT ·asymCodesWeightedAVX2(SB), NOSPLIT, $0-60
	MOVQ w+0(FP), SI
	MOVQ imp+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ codes+40(FP), DI
	VBROADCASTSS m+24(FP), Y1
	VBROADCASTSS inv+28(FP), Y2
	VBROADCASTSS top+32(FP), Y3
	VXORPS Y4, Y4, Y4
	MOVL $0x3f000000, AX        // 0.5
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	VXORPS Y8, Y8, Y8           // Σimp·q
	VXORPS Y9, Y9, Y9           // Σimp·q²
	VXORPS Y10, Y10, Y10        // Σimp·q·w
	SHRQ $3, CX
	JZ   wdone

wloop:
	VMOVUPS (SI), Y0
	VMOVUPS (BX), Y13
	VSUBPS Y1, Y0, Y6
	VMULPS Y2, Y6, Y6
	VMAXPS Y4, Y6, Y6
	VMINPS Y3, Y6, Y6
	VADDPS Y5, Y6, Y6
	VCVTTPS2DQ Y6, Y7
	VMOVDQU Y7, (DI)
	VCVTDQ2PS Y7, Y12
	VMULPS Y13, Y12, Y14
	VADDPS Y14, Y8, Y8
	VFMADD231PS Y12, Y14, Y9
	VFMADD231PS Y0, Y14, Y10
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  wloop

wdone:
	VEXTRACTF128 $1, Y8, X13
	VADDPS X13, X8, X8
	VHADDPS X8, X8, X8
	VHADDPS X8, X8, X8
	MOVSS X8, sq+48(FP)
	VEXTRACTF128 $1, Y9, X13
	VADDPS X13, X9, X9
	VHADDPS X9, X9, X9
	VHADDPS X9, X9, X9
	MOVSS X9, sqq+52(FP)
	VEXTRACTF128 $1, Y10, X13
	VADDPS X13, X10, X10
	VHADDPS X10, X10, X10
	VHADDPS X10, X10, X10
	VZEROUPPER
	MOVSS X10, sqw+56(FP)
	RET

// func asymCodesFactoredAVX2(w, imp, u *float32, n int, m, inv, top float32, codes *int32, proj *float32) (sq, sqq, sqw float32)
// asymCodesWeightedAVX2 over n (a multiple of 8, at most 32) weights of one
// block, also writing proj[j] = Σ u[32j+i]·q_i for the block's 4 factor
// rows (FactorRank).
TEXT ·asymCodesFactoredAVX2(SB), NOSPLIT, $0-76
	MOVQ w+0(FP), SI
	MOVQ imp+8(FP), BX
	MOVQ u+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ codes+48(FP), DI
	MOVQ proj+56(FP), DX
	VBROADCASTSS m+32(FP), Y1
	VBROADCASTSS inv+36(FP), Y2
	VBROADCASTSS top+40(FP), Y3
	VXORPS Y4, Y4, Y4
	MOVL $0x3f000000, AX        // 0.5
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	VXORPS Y7, Y7, Y7           // u₀·q
	VXORPS Y8, Y8, Y8           // Σimp·q
	VXORPS Y9, Y9, Y9           // Σimp·q²
	VXORPS Y10, Y10, Y10        // Σimp·q·w
	VXORPS Y11, Y11, Y11        // u₁·q
	VXORPS Y13, Y13, Y13        // u₂·q
	VXORPS Y15, Y15, Y15        // u₃·q
	SHRQ $3, CX
	JZ   fdone

floop:
	VMOVUPS (SI), Y0
	VSUBPS Y1, Y0, Y6
	VMULPS Y2, Y6, Y6
	VMAXPS Y4, Y6, Y6
	VMINPS Y3, Y6, Y6
	VADDPS Y5, Y6, Y6
	VCVTTPS2DQ Y6, Y6
	VMOVDQU Y6, (DI)
	VCVTDQ2PS Y6, Y12
	VMULPS (BX), Y12, Y14
	VADDPS Y14, Y8, Y8
	VFMADD231PS Y12, Y14, Y9
	VFMADD231PS Y0, Y14, Y10
	VFMADD231PS (R8), Y12, Y7
	VFMADD231PS 128(R8), Y12, Y11
	VFMADD231PS 256(R8), Y12, Y13
	VFMADD231PS 384(R8), Y12, Y15
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DI
	ADDQ $32, R8
	DECQ CX
	JNZ  floop

fdone:
	VEXTRACTF128 $1, Y8, X6
	VADDPS X6, X8, X8
	VHADDPS X8, X8, X8
	VHADDPS X8, X8, X8
	MOVSS X8, sq+64(FP)
	VEXTRACTF128 $1, Y9, X6
	VADDPS X6, X9, X9
	VHADDPS X9, X9, X9
	VHADDPS X9, X9, X9
	MOVSS X9, sqq+68(FP)
	VEXTRACTF128 $1, Y10, X6
	VADDPS X6, X10, X10
	VHADDPS X10, X10, X10
	VHADDPS X10, X10, X10
	MOVSS X10, sqw+72(FP)
	VEXTRACTF128 $1, Y7, X6
	VADDPS X6, X7, X7
	VHADDPS X7, X7, X7
	VHADDPS X7, X7, X7
	MOVSS X7, 0(DX)
	VEXTRACTF128 $1, Y11, X6
	VADDPS X6, X11, X11
	VHADDPS X11, X11, X11
	VHADDPS X11, X11, X11
	MOVSS X11, 4(DX)
	VEXTRACTF128 $1, Y13, X6
	VADDPS X6, X13, X13
	VHADDPS X13, X13, X13
	VHADDPS X13, X13, X13
	MOVSS X13, 8(DX)
	VEXTRACTF128 $1, Y15, X6
	VADDPS X6, X15, X15
	VHADDPS X15, X15, X15
	VHADDPS X15, X15, X15
	VZEROUPPER
	MOVSS X15, 12(DX)
	RET

// func factorDotsAVX2(u, w *float32, out *float32)
// out[j] = Σ u[32j+i]·w[i] over i < 32, for the 4 factor rows (FactorRank)
// of one block.
TEXT ·factorDotsAVX2(SB), NOSPLIT, $0-24
	MOVQ u+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ out+16(FP), DX
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ $4, CX

dloop:
	VMULPS (SI), Y0, Y4
	VMULPS 32(SI), Y1, Y5
	VFMADD231PS 64(SI), Y2, Y4
	VFMADD231PS 96(SI), Y3, Y5
	VADDPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	MOVSS X4, (DX)
	ADDQ $128, SI
	ADDQ $4, DX
	DECQ CX
	JNZ  dloop
	VZEROUPPER
	RET
