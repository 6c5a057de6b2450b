package model

import (
	"fmt"
	"math"
	"strings"

	"lowbit/half"
)

// KVType is how a KV cache stores keys and values: f16 halves the memory
// f32 takes, q8 (int8 codes with a float32 scale per head row) quarters
// it, so a long context fits where it would not. Every backend keeps the
// same rounded values, so the CPU measures what a cache type costs in
// accuracy (validate). f32 stays the default: the GPU's decode attention
// is not bound by the bytes it reads, and converting each value costs it
// more than the narrower reads save (BENCHMARKS.md).
type KVType int

// The cache types; the zero value is f32, the default.
const (
	KVF32 KVType = iota
	KVF16
	KVQ8
)

// ParseKVType reads a --kv-cache value.
func ParseKVType(s string) (KVType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f16", "fp16":
		return KVF16, nil
	case "f32", "fp32", "":
		return KVF32, nil
	case "q8", "q8_0", "int8":
		return KVQ8, nil
	}
	return 0, fmt.Errorf("unknown KV cache type %q (want f16, q8 or f32)", s)
}

// String is the type's --kv-cache name.
func (t KVType) String() string {
	switch t {
	case KVF16:
		return "f16"
	case KVF32:
		return "f32"
	case KVQ8:
		return "q8"
	}
	return fmt.Sprintf("KVType(%d)", int(t))
}

// RowBytes is the memory of one cached key (or value) row of kvDim values
// in heads of headDim: q8's per-head scales included.
func (t KVType) RowBytes(kvDim, headDim int) int64 {
	switch t {
	case KVF32:
		return 4 * int64(kvDim)
	case KVQ8:
		return int64(kvDim) + 4*int64(kvDim/max(headDim, 1))
	}
	return 2 * int64(kvDim)
}

// Round replaces each value of row (a key or value row of heads of
// headDim) by the one a cache of type t keeps: f16's nearest, or q8's code
// times the head row's scale (its largest magnitude / 127), as the GPU's
// kernels round (gpu/kernels/kv.cuh).
func (t KVType) Round(row []float32, headDim int) {
	switch t {
	case KVF16:
		for i, v := range row {
			row[i] = half.FromFloat32(v).Float32()
		}
	case KVQ8:
		for h := 0; h+headDim <= len(row); h += headDim {
			r := row[h : h+headDim]
			var amax float32
			for _, v := range r {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			scale := amax / 127
			for i, v := range r {
				if scale == 0 {
					r[i] = 0
					continue
				}
				q := float32(math.RoundToEven(float64(v / scale)))
				r[i] = min(max(q, -127), 127) * scale
			}
		}
	}
}
