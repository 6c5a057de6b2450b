//go:build !amd64

package quantize

// haveAVX2 is false off amd64: the plain-Go loops run.
const haveAVX2 = false

func asymCodesAVX2(w *float32, n int, m, inv, top float32, codes *int32) (sq, sqq int32, sqw float32) {
	panic("quantize: asymCodesAVX2 without amd64")
}

func dotQ4KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32 {
	panic("quantize: dotQ4KAVX2 without amd64")
}

func dotQ6KAVX2(q *byte, x *float32, sc *float32, n int) float32 {
	panic("quantize: dotQ6KAVX2 without amd64")
}

func dotQ5KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32 {
	panic("quantize: dotQ5KAVX2 without amd64")
}

func dotQ2KAVX2(q *byte, x *float32, sc, mn *float32, n int) float32 {
	panic("quantize: dotQ2KAVX2 without amd64")
}

func dotQ3KAVX2(q *byte, x *float32, sc *float32, n int) float32 {
	panic("quantize: dotQ3KAVX2 without amd64")
}

func asymCodesWeightedAVX2(w, imp *float32, n int, m, inv, top float32, codes *int32) (sq, sqq, sqw float32) {
	panic("quantize: asymCodesWeightedAVX2 without amd64")
}

func asymCodesFactoredAVX2(w, imp, u *float32, n int, m, inv, top float32, codes *int32, proj *float32) (sq, sqq, sqw float32) {
	panic("quantize: asymCodesFactoredAVX2 without amd64")
}

func factorDotsAVX2(u, w *float32, out *float32) {
	panic("quantize: factorDotsAVX2 without amd64")
}
