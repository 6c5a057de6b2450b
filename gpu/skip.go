package gpu

import (
	"os"
	"strings"

	"lowbit/model"
)

// skipEnv names decode kernels to leave out of a step (comma-separated:
// qkv, attn, o, gateup, down, head), for profiling only: the time a step
// loses with one of them gone is what that kernel costs in the pipeline.
// The outputs are wrong while it is set.
const skipEnv = "LOWBIT_SKIP"

// skipSet reads LOWBIT_SKIP.
func skipSet() map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(os.Getenv(skipEnv), ",") {
		if s != "" {
			m[s] = true
		}
	}
	return m
}

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
