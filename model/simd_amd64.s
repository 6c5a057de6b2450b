#include "textflag.h"

// func dotQ4AVX2(data *byte, scales *float32, x *float32, groups, blocks int) float32
// Σ_g scales[g] · Σ_{32-weight blocks b of g} Σ_j code(b, j)·x[b*32+j]
// (the q4 codes without their minimums, which the caller adds).
// Block layout: byte j holds weight j (low nibble) and weight j+16 (high).
TEXT ·dotQ4AVX2(SB), NOSPLIT, $0-44
	MOVQ data+0(FP), SI
	MOVQ scales+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ groups+24(FP), CX
	MOVQ blocks+32(FP), DX
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	VXORPS Y11, Y11, Y11        // total
	TESTQ CX, CX
	JZ   q4done

q4group:
	VXORPS Y8, Y8, Y8           // this group's Σ code·x, two chains
	VXORPS Y9, Y9, Y9
	MOVQ DX, R8

q4block:
	VMOVDQU (SI), X0
	VPAND   X15, X0, X1         // low nibbles: weights 0..15
	VPSRLW  $4, X0, X2
	VPAND   X15, X2, X2         // high nibbles: weights 16..31
	VPMOVZXBD X1, Y3
	VPSRLDQ $8, X1, X1
	VPMOVZXBD X1, Y4
	VPMOVZXBD X2, Y5
	VPSRLDQ $8, X2, X2
	VPMOVZXBD X2, Y6
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VCVTDQ2PS Y6, Y6
	VFMADD231PS (DI), Y3, Y8
	VFMADD231PS 32(DI), Y4, Y9
	VFMADD231PS 64(DI), Y5, Y8
	VFMADD231PS 96(DI), Y6, Y9
	ADDQ $16, SI
	ADDQ $128, DI
	DECQ R8
	JNZ  q4block

	VADDPS Y9, Y8, Y8
	VBROADCASTSS (BX), Y10
	VFMADD231PS Y10, Y8, Y11
	ADDQ $4, BX
	DECQ CX
	JNZ  q4group

q4done:
	VEXTRACTF128 $1, Y11, X12
	VADDPS X12, X11, X11
	VHADDPS X11, X11, X11
	VHADDPS X11, X11, X11
	VZEROUPPER
	MOVSS X11, ret+40(FP)
	RET

// func dotQ8AVX2(data *byte, scales *float32, x *float32, groups, blocks int) float32
// Σ_g scales[g] · Σ_{32-weight blocks b of g} Σ_j int8(code)·x.
TEXT ·dotQ8AVX2(SB), NOSPLIT, $0-44
	MOVQ data+0(FP), SI
	MOVQ scales+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ groups+24(FP), CX
	MOVQ blocks+32(FP), DX
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JZ   q8done

q8group:
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	MOVQ DX, R8

q8block:
	VPMOVSXBD (SI), Y3
	VPMOVSXBD 8(SI), Y4
	VPMOVSXBD 16(SI), Y5
	VPMOVSXBD 24(SI), Y6
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VCVTDQ2PS Y6, Y6
	VFMADD231PS (DI), Y3, Y8
	VFMADD231PS 32(DI), Y4, Y9
	VFMADD231PS 64(DI), Y5, Y8
	VFMADD231PS 96(DI), Y6, Y9
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ R8
	JNZ  q8block

	VADDPS Y9, Y8, Y8
	VBROADCASTSS (BX), Y10
	VFMADD231PS Y10, Y8, Y11
	ADDQ $4, BX
	DECQ CX
	JNZ  q8group

q8done:
	VEXTRACTF128 $1, Y11, X12
	VADDPS X12, X11, X11
	VHADDPS X11, X11, X11
	VHADDPS X11, X11, X11
	VZEROUPPER
	MOVSS X11, ret+40(FP)
	RET

// func dotF32AVX2(a, b *float32, n int) float32
// Σ a[i]·b[i] for n a multiple of 32.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $5, CX
	JZ   f32done

f32loop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  f32loop

f32done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET
