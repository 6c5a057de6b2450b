package quantize

import "golang.org/x/sys/cpu"

// haveAVX2 gates the assembly in simd_amd64.s (AVX2 and FMA, with the
// operating system saving YMM registers); it is set once at start-up.
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func asymCodesAVX2(w *float32, n int, m, inv, top float32, codes *int32) (sq, sqq int32, sqw float32)

//go:noescape
func dotQ4KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32

//go:noescape
func dotQ6KAVX2(q *byte, x *float32, sc *float32, n int) float32

//go:noescape
func dotQ5KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32

//go:noescape
func dotQ2KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32

//go:noescape
func dotQ3KAVX2(q *byte, x *float32, sc *float32, n int) float32

//go:noescape
func asymCodesWeightedAVX2(w, imp *float32, n int, m, inv, top float32, codes *int32) (sq, sqq, sqw float32)

//go:noescape
func asymCodesFactoredAVX2(w, imp, u *float32, n int, m, inv, top float32, codes *int32, proj *float32) (sq, sqq, sqw float32)

//go:noescape
func factorDotsAVX2(u, w *float32, out *float32)
