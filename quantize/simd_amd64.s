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
