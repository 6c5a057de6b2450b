package convert

import (
	"context"
	"fmt"
	"math"

	"lowbit/quantize"
)

// BitNet's packed checkpoint (microsoft/bitnet-b1.58-2B-4T) stores each
// ternary linear as transformers' integrations/bitnet.py packs it: a uint8
// tensor [out/4, in] whose byte [p, c] holds the codes t+1 of output rows
// p, p+P, p+2P and p+3P (P = out/4) at column c in bits 0-1, 2-3, 4-5 and
// 6-7, beside a one-element "<name>_scale" tensor. The scale's meaning
// depends on the linear class the checkpoint's quantization_config names:
// BitLinear (linear_class "bitlinear", the default and what 2B-4T loads
// into) computes y = (t·x_q) / (weight_scale * act_scale), so a weight is
// t / weight_scale; AutoBitLinear in offline mode ("autobitlinear")
// multiplies, so a weight is t * weight_scale. unpackBitNet turns such a
// tensor into lowbit's tq2 with the same ternary codes and per-tensor scale,
// which is the model conversion of the bf16 master weights produces (the
// absmean scale S with W = S*t).

// bitnetValuesPerByte is transformers' VALUES_PER_ITEM.
const bitnetValuesPerByte = 4

// bitnetScale returns tq2's per-tensor scale S (a weight is S*t) from a
// packed checkpoint's weight_scale under linearClass.
func bitnetScale(name string, weightScale float32, linearClass string) (float32, error) {
	if !(weightScale > 0) || math.IsInf(float64(weightScale), 0) {
		return 0, fmt.Errorf("tensor %s_scale: weight scale %v is not a positive finite number", name, weightScale)
	}
	switch linearClass {
	case "", "bitlinear":
		return 1 / weightScale, nil
	case "autobitlinear":
		return weightScale, nil
	}
	return 0, fmt.Errorf("tensor %s: quantization_config linear_class %q is not bitlinear or autobitlinear", name, linearClass)
}

// unpackBitNet converts one packed BitNet linear, packed [packedRows, cols]
// bytes, into a tq2 tensor of 4*packedRows rows whose weights are S*t.
func unpackBitNet(ctx context.Context, name string, packed []byte, packedRows, cols int, weightScale float32, linearClass string) (*quantize.Tensor, error) {
	if packedRows <= 0 || cols <= 0 || len(packed) != packedRows*cols {
		return nil, fmt.Errorf("tensor %s: %d packed bytes do not make a [%d, %d] uint8 matrix", name, len(packed), packedRows, cols)
	}
	s, err := bitnetScale(name, weightScale, linearClass)
	if err != nil {
		return nil, err
	}
	rows := packedRows * bitnetValuesPerByte
	t := make([]float32, rows*cols)
	for p := 0; p < packedRows; p++ {
		for c, b := range packed[p*cols : (p+1)*cols] {
			for i := 0; i < bitnetValuesPerByte; i++ {
				code := b >> (2 * i) & 3
				if code == 3 {
					return nil, fmt.Errorf("tensor %s: byte [%d, %d] = %#02x holds code 3, not a ternary value", name, p, c, b)
				}
				t[(i*packedRows+p)*cols+c] = float32(code) - 1
			}
		}
	}
	// The codes are the values themselves at scale 1; S is set after.
	q, err := quantize.Quantize(ctx, quantize.TQ2, t, rows, cols, quantize.Options{TensorScale: 1})
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	q.Scale = s
	return q, nil
}

// packBitNet is transformers' pack_weights for a ternary matrix t [rows,
// cols] with rows a multiple of 4: the inverse of unpackBitNet's layout.
func packBitNet(t []int8, rows, cols int) ([]byte, error) {
	if rows <= 0 || rows%bitnetValuesPerByte != 0 || cols <= 0 || len(t) != rows*cols {
		return nil, fmt.Errorf("pack: %d values do not make a [%d, %d] matrix with rows a multiple of %d", len(t), rows, cols, bitnetValuesPerByte)
	}
	pr := rows / bitnetValuesPerByte
	out := make([]byte, pr*cols)
	for r := 0; r < rows; r++ {
		i, p := r/pr, r%pr
		for c := 0; c < cols; c++ {
			v := t[r*cols+c]
			if v < -1 || v > 1 {
				return nil, fmt.Errorf("pack: value %d at [%d, %d] is not ternary", v, r, c)
			}
			out[p*cols+c] |= byte(v+1) << (2 * i)
		}
	}
	return out, nil
}
