package validate

import (
	"encoding/binary"
	"fmt"
	"math"

	"lowbit/quantize"
)

// The reference reads the packed bytes by the layouts of ARCHITECTURE.md with
// its own code, sharing nothing with package quantize or the backends'
// kernels: a wrong unpacking or a wrong fp16 conversion in a kernel then
// shows as an error instead of being repeated on both sides.

// refWeights unpacks t into float64 rows [Rows][Cols].
func refWeights(t *quantize.Tensor) ([][]float64, error) {
	if t.Format.Spec().BlockScales {
		return refBlockWeights(t)
	}
	switch t.Format {
	case quantize.Q2S, quantize.Q3S, quantize.Q4S:
		return refSblockWeights(t)
	}
	groups, g := 1, t.GroupSize
	if t.Format != quantize.TQ2 {
		if g <= 0 || g%32 != 0 {
			return nil, fmt.Errorf("validate: %s tensor with group size %d", t.Format, g)
		}
		groups = (t.Cols + g - 1) / g
	}
	blocks := (t.Cols + 31) / 32 // 32-weight blocks per row, padded
	var rowBytes int
	switch t.Format {
	case quantize.Q8:
		rowBytes = groups * g
	case quantize.Q4:
		rowBytes = groups * g / 2
	case quantize.Q2:
		rowBytes = groups * g / 4
	case quantize.Q1:
		rowBytes = groups * g / 8
	case quantize.TQ2:
		rowBytes = blocks * 8
	default:
		return nil, fmt.Errorf("validate: no reference for format %q", t.Format)
	}
	if len(t.Data) != t.Rows*rowBytes {
		return nil, fmt.Errorf("validate: %s [%d, %d] holds %d bytes of codes, want %d", t.Format, t.Rows, t.Cols, len(t.Data), t.Rows*rowBytes)
	}
	out := make([][]float64, t.Rows)
	for r := range out {
		row := make([]float64, t.Cols)
		data := t.Data[r*rowBytes : (r+1)*rowBytes]
		for c := range row {
			var code float64
			switch t.Format {
			case quantize.Q8:
				code = float64(int8(data[c]))
			case quantize.Q4:
				blk, j := c/32, c%32
				b := data[blk*16+j%16]
				if j < 16 {
					code = float64(b & 15)
				} else {
					code = float64(b >> 4)
				}
			case quantize.Q2, quantize.TQ2:
				blk, j := c/32, c%32
				code = float64(data[blk*8+j%8] >> (2 * (j / 8)) & 3)
			case quantize.Q1:
				blk, j := c/32, c%32
				if binary.LittleEndian.Uint32(data[blk*4:])>>j&1 == 1 {
					code = 1
				} else {
					code = -1
				}
			}
			switch t.Format {
			case quantize.TQ2:
				row[c] = float64(t.Scale) * (code - 1)
			case quantize.Q4, quantize.Q2:
				i := r*groups + c/g
				row[c] = fp16(uint16(t.Scales[i]))*code + fp16(uint16(t.Mins[i]))
			default:
				row[c] = fp16(uint16(t.Scales[r*groups+c/g])) * code
			}
		}
		out[r] = row
	}
	return out, nil
}

// fp16 decodes an IEEE half-precision value.
func fp16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 31:
		if frac != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// refMatMul computes y[n, rows] = x[n, cols] · Wᵀ in float64.
func refMatMul(w [][]float64, x []float64, n int) []float64 {
	rows := len(w)
	y := make([]float64, n*rows)
	for i := 0; i < n; i++ {
		for r, wr := range w {
			var s float64
			for c, v := range wr {
				s += v * x[i*len(wr)+c]
			}
			y[i*rows+r] = s
		}
	}
	return y
}

// refBinarize is the binary activation of x the XNOR kernels use: the sign
// of each value (zero counts as +) times its group's mean absolute value.
func refBinarize(x []float64, group int) []float64 {
	out := make([]float64, len(x))
	for lo := 0; lo < len(x); lo += group {
		hi := min(lo+group, len(x))
		var beta float64
		for _, v := range x[lo:hi] {
			beta += math.Abs(v)
		}
		beta /= float64(hi - lo)
		for i := lo; i < hi; i++ {
			if x[i] >= 0 {
				out[i] = beta
			} else {
				out[i] = -beta
			}
		}
	}
	return out
}

// relL2 is ‖got − want‖ / ‖want‖ in float64; NaN anywhere gives NaN.
func relL2(want []float64, got []float32) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

// refInt8 is BitNet's per-token activation quantization of each row of x
// (cols values): scale 127/max|x| (max at least 1e-5), round half to even,
// clamp to [-128, 127], back to float.
func refInt8(x []float64, cols int) []float64 {
	out := make([]float64, len(x))
	for lo := 0; lo < len(x); lo += cols {
		row := x[lo : lo+cols]
		amax := 1e-5
		for _, v := range row {
			amax = math.Max(amax, math.Abs(v))
		}
		s := 127 / amax
		for i, v := range row {
			out[lo+i] = math.Min(math.Max(math.RoundToEven(v*s), -128), 127) / s
		}
	}
	return out
}
