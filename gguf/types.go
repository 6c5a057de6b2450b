package gguf

import (
	"fmt"
	"math"
)

// GGMLType is the element type of a tensor, numbered as ggml numbers it:
// the number is what a GGUF file stores, so it never changes. Numbers ggml
// has retired (4 and 5, 31 to 33, 36 to 38) are unknown here, as they are
// to llama.cpp.
type GGMLType uint32

// The ggml types. Names follow ggml's own spelling, underscores included,
// so that they read the same as in llama.cpp's messages and documentation.
const (
	F32     GGMLType = 0
	F16     GGMLType = 1
	Q4_0    GGMLType = 2
	Q4_1    GGMLType = 3
	Q5_0    GGMLType = 6
	Q5_1    GGMLType = 7
	Q8_0    GGMLType = 8
	Q8_1    GGMLType = 9
	Q2_K    GGMLType = 10
	Q3_K    GGMLType = 11
	Q4_K    GGMLType = 12
	Q5_K    GGMLType = 13
	Q6_K    GGMLType = 14
	Q8_K    GGMLType = 15
	IQ2_XXS GGMLType = 16
	IQ2_XS  GGMLType = 17
	IQ3_XXS GGMLType = 18
	IQ1_S   GGMLType = 19
	IQ4_NL  GGMLType = 20
	IQ3_S   GGMLType = 21
	IQ2_S   GGMLType = 22
	IQ4_XS  GGMLType = 23
	I8      GGMLType = 24
	I16     GGMLType = 25
	I32     GGMLType = 26
	I64     GGMLType = 27
	F64     GGMLType = 28
	IQ1_M   GGMLType = 29
	BF16    GGMLType = 30
	TQ1_0   GGMLType = 34
	TQ2_0   GGMLType = 35
	MXFP4   GGMLType = 39
	NVFP4   GGMLType = 40
	Q1_0    GGMLType = 41
)

// qkK is the super-block of the K-quants, the IQ types and the ternary
// types: 256 weights.
const qkK = 256

// info describes a type once. A switch rather than a table keeps it free
// of package state. The byte counts are written as the sum of the block's
// fields (scales, then quants), so each can be checked against the layout.
func (t GGMLType) info() (name string, block, bytes int64, ok bool) {
	switch t {
	case F32:
		return "F32", 1, 4, true
	case F16:
		return "F16", 1, 2, true
	case BF16:
		return "BF16", 1, 2, true
	case F64:
		return "F64", 1, 8, true
	case I8:
		return "I8", 1, 1, true
	case I16:
		return "I16", 1, 2, true
	case I32:
		return "I32", 1, 4, true
	case I64:
		return "I64", 1, 8, true
	case Q4_0: // f16 scale, 32 4-bit quants
		return "Q4_0", 32, 2 + 16, true
	case Q4_1: // f16 scale and min, 32 4-bit quants
		return "Q4_1", 32, 2 + 2 + 16, true
	case Q5_0: // f16 scale, 32 fifth bits, 32 4-bit quants
		return "Q5_0", 32, 2 + 4 + 16, true
	case Q5_1: // f16 scale and min, 32 fifth bits, 32 4-bit quants
		return "Q5_1", 32, 2 + 2 + 4 + 16, true
	case Q8_0: // f16 scale, 32 int8 quants
		return "Q8_0", 32, 2 + 32, true
	case Q8_1: // f16 scale and sum, 32 int8 quants (gguf-py still says f32, which ggml dropped)
		return "Q8_1", 32, 2 + 2 + 32, true
	case Q2_K: // f16 scale and min, 16 4-bit scale/min pairs, 256 2-bit quants
		return "Q2_K", qkK, 2 + 2 + qkK/16 + qkK/4, true
	case Q3_K: // f16 scale, 256 high bits, 256 2-bit quants, 12 bytes of 6-bit scales
		return "Q3_K", qkK, 2 + qkK/8 + qkK/4 + 12, true
	case Q4_K: // f16 scale and min, 12 bytes of 6-bit scales and mins, 256 4-bit quants
		return "Q4_K", qkK, 2 + 2 + 12 + qkK/2, true
	case Q5_K: // as Q4_K plus 256 fifth bits
		return "Q5_K", qkK, 2 + 2 + 12 + qkK/8 + qkK/2, true
	case Q6_K: // 256 low nibbles, 256 high 2-bit parts, 16 int8 scales, f16 scale
		return "Q6_K", qkK, qkK/2 + qkK/4 + qkK/16 + 2, true
	case Q8_K: // f32 scale, 256 int8 quants, 16 int16 block sums
		return "Q8_K", qkK, 4 + qkK + 2*qkK/16, true
	case IQ2_XXS:
		return "IQ2_XXS", qkK, 2 + qkK/4, true
	case IQ2_XS:
		return "IQ2_XS", qkK, 2 + qkK/4 + qkK/32, true
	case IQ2_S:
		return "IQ2_S", qkK, 2 + qkK/4 + qkK/16, true
	case IQ3_XXS:
		return "IQ3_XXS", qkK, 2 + qkK/4 + qkK/8, true
	case IQ3_S:
		return "IQ3_S", qkK, 2 + qkK/4 + qkK/8 + qkK/32 + 4, true
	case IQ1_S:
		return "IQ1_S", qkK, 2 + qkK/8 + qkK/16, true
	case IQ1_M: // no f16 scale of its own: it is spread over the scales
		return "IQ1_M", qkK, qkK/8 + qkK/16 + qkK/32, true
	case IQ4_NL:
		return "IQ4_NL", 32, 2 + 16, true
	case IQ4_XS:
		return "IQ4_XS", qkK, 2 + 2 + qkK/64 + qkK/2, true
	case TQ1_0: // 240 weights packed five to a byte, 16 four to a byte, f16 scale
		return "TQ1_0", qkK, (qkK-4*qkK/64)/5 + qkK/64 + 2, true
	case TQ2_0: // 256 2-bit ternary quants, f16 scale
		return "TQ2_0", qkK, qkK/4 + 2, true
	case MXFP4: // e8m0 shared exponent, 32 4-bit e2m1 values
		return "MXFP4", 32, 1 + 16, true
	case NVFP4: // four e4m3 scales, 64 4-bit e2m1 values
		return "NVFP4", 64, 4 + 32, true
	case Q1_0: // f16 scale, 128 sign bits
		return "Q1_0", 128, 2 + 16, true
	}
	return "", 0, 0, false
}

// Known reports whether the reader knows the type's block layout, and so
// can size its tensors.
func (t GGMLType) Known() bool {
	_, _, _, ok := t.info()
	return ok
}

// String is ggml's name for the type, or a number for an unknown one.
func (t GGMLType) String() string {
	if name, _, _, ok := t.info(); ok {
		return name
	}
	return fmt.Sprintf("ggml type %d", uint32(t))
}

// BlockSize is how many weights one block of the type holds (1 for the
// plain float and integer types), 0 for an unknown type. A row's length
// must be a multiple of it.
func (t GGMLType) BlockSize() int64 {
	_, b, _, _ := t.info()
	return b
}

// TypeSize is how many bytes one block of the type takes, 0 for an
// unknown type.
func (t GGMLType) TypeSize() int64 {
	_, _, n, _ := t.info()
	return n
}

// Bytes is the size of n weights of the type, an error where n is not a
// whole number of blocks, the type is unknown, or the size overflows.
func (t GGMLType) Bytes(n int64) (int64, error) {
	name, block, size, ok := t.info()
	switch {
	case !ok:
		return 0, fmt.Errorf("unknown %s", t)
	case n < 0:
		return 0, fmt.Errorf("negative count %d of %s weights", n, name)
	case n%block != 0:
		return 0, fmt.Errorf("%d weights are not a whole number of %s blocks of %d", n, name, block)
	case n/block > math.MaxInt64/size:
		return 0, fmt.Errorf("%d weights of %s overflow a 64-bit size", n, name)
	}
	return n / block * size, nil
}
