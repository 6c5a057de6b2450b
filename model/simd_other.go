//go:build !amd64

package model

// haveAVX2 is false off amd64: the pure-Go kernels run.
const haveAVX2 = false

func dotQ4AVX2(data *byte, scales *float32, x *float32, groups, blocks int) float32 {
	panic("model: dotQ4AVX2 without amd64")
}

func dotQ8AVX2(data *byte, scales *float32, x *float32, groups, blocks int) float32 {
	panic("model: dotQ8AVX2 without amd64")
}

func dotF32AVX2(a, b *float32, n int) float32 { panic("model: dotF32AVX2 without amd64") }
