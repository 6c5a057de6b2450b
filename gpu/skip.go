package gpu

// productRole names a fused decode product for LOWBIT_SKIP by its shape
// and fusion: the gated gate/up product, the residual adds (the down
// projection reads a row longer than it writes, o does not), the head (the
// vocabulary's rows, 32,000 or more in the shapes profiled), and the
// normed q/k/v.
func (b *Backend) productRole(m *Matrix, o matvecOpts, normed bool) string {
	switch {
	case o.gated:
		return "gateup"
	case o.accum && m.Cols > m.Rows:
		return "down"
	case o.accum:
		return "o"
	case m.Rows >= 32000:
		return "head"
	case normed:
		return "qkv"
	}
	return ""
}
