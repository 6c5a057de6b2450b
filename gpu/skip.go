package gpu

import (
	"lowbit/model"
)

// productRole names a fused decode product of m by its fusion, its size
// (the head has the vocabulary's rows, 32,000 or more in the shapes
// profiled) and its place among the step's normed products (q/k/v and
// gate/up alternate).
func (b *Backend) productRole(m *Matrix, f model.Fusion) string {
	afterGated := b.gatedLast
	b.gatedLast = f.OutAct != ""
	switch {
	case f.OutAct != "":
		b.normed++
		return "gateup"
	case f.Act != "" || f.Add && afterGated:
		return "down"
	case f.Add:
		return "o"
	case m.Rows >= 32000:
		return "head"
	}
	b.normed++
	if b.normed%2 == 1 {
		return "qkv"
	}
	return "gateup"
}
