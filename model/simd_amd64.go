package model

import "golang.org/x/sys/cpu"

// haveAVX2 gates the assembly kernels (simd_amd64.s): AVX2 and FMA with the
// operating system saving the YMM registers, which x/sys/cpu checks.
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotQ4AVX2(data *byte, scales *float32, x *float32, groups, blocks int) float32

//go:noescape
func dotQ8AVX2(data *byte, scales *float32, x *float32, groups, blocks int) float32

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32
