package gguf

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ValueType is the type of a metadata value, numbered as the GGUF
// specification numbers it.
type ValueType uint32

// The metadata value types of GGUF.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// String names the type as the specification does (uint8, string, ...).
func (t ValueType) String() string {
	switch t {
	case TypeUint8:
		return "uint8"
	case TypeInt8:
		return "int8"
	case TypeUint16:
		return "uint16"
	case TypeInt16:
		return "int16"
	case TypeUint32:
		return "uint32"
	case TypeInt32:
		return "int32"
	case TypeFloat32:
		return "float32"
	case TypeBool:
		return "bool"
	case TypeString:
		return "string"
	case TypeArray:
		return "array"
	case TypeUint64:
		return "uint64"
	case TypeInt64:
		return "int64"
	case TypeFloat64:
		return "float64"
	}
	return fmt.Sprintf("value type %d", uint32(t))
}

// fixedSize is the bytes a value of a fixed-size type takes in the file
// (and in memory), 0 for string, array and unknown types.
func (t ValueType) fixedSize() int64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. A scalar is held as the Go type of the same
// width (uint8, int32, float32, bool, string, ...); an array as a slice of
// that type, or as []Value for an array of arrays. The reader never hands
// out its own slices, so a File cannot be changed through a Value.
type Value struct {
	typ  ValueType
	elem ValueType // element type, for an array
	v    any
}

// Type is the value's type.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the type of an array's elements (meaningless for a scalar).
func (v Value) ElemType() ValueType { return v.elem }

// Len is the number of elements of an array, 0 for a scalar.
func (v Value) Len() int {
	if v.typ != TypeArray {
		return 0
	}
	switch a := v.v.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Interface is the value as a Go value: a scalar of the matching Go type or
// a fresh copy of an array's slice.
func (v Value) Interface() any {
	switch a := v.v.(type) {
	case []uint8:
		return slices.Clone(a)
	case []int8:
		return slices.Clone(a)
	case []uint16:
		return slices.Clone(a)
	case []int16:
		return slices.Clone(a)
	case []uint32:
		return slices.Clone(a)
	case []int32:
		return slices.Clone(a)
	case []float32:
		return slices.Clone(a)
	case []bool:
		return slices.Clone(a)
	case []string:
		return slices.Clone(a)
	case []uint64:
		return slices.Clone(a)
	case []int64:
		return slices.Clone(a)
	case []float64:
		return slices.Clone(a)
	case []Value:
		return slices.Clone(a)
	}
	return v.v
}

// describe names the value's type for an error: "uint32", "array of string".
func (v Value) describe() string {
	if v.typ == TypeArray {
		return "array of " + v.elem.String()
	}
	return v.typ.String()
}

// ErrNoKey is wrapped by the error of a getter asked for a key the file
// does not hold, so that a caller can tell an optional key that is absent
// from one that is malformed.
var ErrNoKey = errors.New("no such key")

// Value returns the value of a metadata key.
func (f *File) Value(key string) (Value, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// Keys lists the metadata keys in file order.
func (f *File) Keys() []string { return slices.Clone(f.keys) }

// lookup finds key or says that it is absent.
func (f *File) lookup(key string) (Value, error) {
	v, ok := f.kv[key]
	if !ok {
		return Value{}, fmt.Errorf("gguf: key %q: %w", key, ErrNoKey)
	}
	return v, nil
}

func wrongType(key string, v Value, want string) error {
	return fmt.Errorf("gguf: key %q holds %s, not %s", key, article(v.describe()), want)
}

// article puts "a" or "an" before a type name, as it is read aloud
// ("a uint32", "an int8", "an array of string").
func article(s string) string {
	if s != "" && (s[0] == 'a' || s[0] == 'e' || s[0] == 'i' || s[0] == 'o') {
		return "an " + s
	}
	return "a " + s
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return "", err
	}
	s, ok := v.v.(string)
	if !ok {
		return "", wrongType(key, v, "a string")
	}
	return s, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.lookup(key)
	if err != nil {
		return false, err
	}
	b, ok := v.v.(bool)
	if !ok {
		return false, wrongType(key, v, "a bool")
	}
	return b, nil
}

// Uint returns an integer value of any width or signedness that is not
// negative: writers differ in the integer type they give a count (uint32
// in llama.cpp's converter, int32 or uint64 elsewhere).
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	if v.typ == TypeUint64 {
		return v.v.(uint64), nil
	}
	n, ok := asInt(v.v)
	if !ok {
		return 0, wrongType(key, v, "an integer")
	}
	if n < 0 {
		return 0, fmt.Errorf("gguf: key %q holds the %s %d, not a non-negative integer", key, v.typ, n)
	}
	return uint64(n), nil
}

// Int returns an integer value of any width or signedness that fits an int64.
func (f *File) Int(key string) (int64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	n, ok := asInt(v.v)
	if !ok {
		if u, isU64 := v.v.(uint64); isU64 {
			return 0, fmt.Errorf("gguf: key %q holds the uint64 %d, too large for an int64", key, u)
		}
		return 0, wrongType(key, v, "an integer")
	}
	return n, nil
}

// Float returns a float32 or float64 value as a float64.
func (f *File) Float(key string) (float64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	switch x := v.v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, wrongType(key, v, "a float")
}

// Strings returns an array of strings (a vocabulary, a list of merges).
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	a, ok := v.v.([]string)
	if !ok {
		return nil, wrongType(key, v, "an array of string")
	}
	return slices.Clone(a), nil
}

// Ints returns an array of integers of any width as int64s (token types,
// per-layer head counts).
func (f *File) Ints(key string) ([]int64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	if v.typ != TypeArray {
		return nil, wrongType(key, v, "an array of integers")
	}
	var out []int64
	switch a := v.v.(type) {
	case []uint8:
		out = convert(a)
	case []int8:
		out = convert(a)
	case []uint16:
		out = convert(a)
	case []int16:
		out = convert(a)
	case []uint32:
		out = convert(a)
	case []int32:
		out = convert(a)
	case []int64:
		out = slices.Clone(a)
	case []uint64:
		out = make([]int64, len(a))
		for i, x := range a {
			if x > math.MaxInt64 {
				return nil, fmt.Errorf("gguf: key %q: element %d, %d, is too large for an int64", key, i, x)
			}
			out[i] = int64(x)
		}
	default:
		return nil, wrongType(key, v, "an array of integers")
	}
	return out, nil
}

// Float32s returns an array of float32 (token scores), converting float64
// elements.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	switch a := v.v.(type) {
	case []float32:
		return slices.Clone(a), nil
	case []float64:
		out := make([]float32, len(a))
		for i, x := range a {
			out[i] = float32(x)
		}
		return out, nil
	}
	return nil, wrongType(key, v, "an array of floats")
}

// asInt widens any integer scalar but uint64 to an int64.
func asInt(x any) (int64, bool) {
	switch n := x.(type) {
	case uint8:
		return int64(n), true
	case int8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), true
		}
	}
	return 0, false
}

func convert[T uint8 | int8 | uint16 | int16 | uint32 | int32](a []T) []int64 {
	out := make([]int64, len(a))
	for i, x := range a {
		out[i] = int64(x)
	}
	return out
}
