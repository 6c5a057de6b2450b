// Package ggufwrite writes small GGUF v3 files for tests: just enough of a
// writer to build the files the GGUF readers of lowbit (the model loader, the
// tokenizer) must read or refuse, and the seeds of their fuzz targets. It
// checks nothing it is given, so that tests can write hostile files too.
package ggufwrite

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Value types of GGUF metadata (gguf.ValueType; repeated here so that the
// gguf package's own tests may use this one).
const (
	typeUint8   = 0
	typeInt8    = 1
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
	typeUint64  = 10
)

// Alignment is the alignment of tensor data in the files Bytes writes.
const Alignment = 32

// KV is one metadata entry. Val is a string, bool, uint8, int8, uint32,
// int32, uint64, float32, or an array of those: []string, []float32,
// []int32, []uint32, []uint8, []int8, []bool.
type KV struct {
	Key string
	Val any
}

// Tensor is one tensor: its dims (innermost first, as ggml has them), its
// ggml type number and its data in ggml's layout.
type Tensor struct {
	Name string
	Dims []uint64
	Type uint32
	Data []byte
}

var le = binary.LittleEndian

func str(b []byte, s string) []byte { return append(le.AppendUint64(b, uint64(len(s))), s...) }

// scalar appends the value of v without its type, and returns its type.
func scalar(b []byte, v any) ([]byte, uint32, bool) {
	switch x := v.(type) {
	case uint8:
		return append(b, x), typeUint8, true
	case int8:
		return append(b, byte(x)), typeInt8, true
	case uint32:
		return le.AppendUint32(b, x), typeUint32, true
	case int32:
		return le.AppendUint32(b, uint32(x)), typeInt32, true
	case uint64:
		return le.AppendUint64(b, x), typeUint64, true
	case float32:
		return le.AppendUint32(b, math.Float32bits(x)), typeFloat32, true
	case bool:
		if x {
			return append(b, 1), typeBool, true
		}
		return append(b, 0), typeBool, true
	case string:
		return str(b, x), typeString, true
	}
	return b, 0, false
}

// array appends an array value (element type, count, elements) without its type.
func array[T any](b []byte, a []T) ([]byte, bool) {
	var zero T
	_, elem, ok := scalar(nil, zero)
	if !ok {
		return b, false
	}
	b = le.AppendUint64(le.AppendUint32(b, elem), uint64(len(a)))
	for _, x := range a {
		b, _, _ = scalar(b, x)
	}
	return b, true
}

// value appends the type and value of v.
func value(b []byte, v any) ([]byte, error) {
	if out, typ, ok := scalar(nil, v); ok {
		return append(le.AppendUint32(b, typ), out...), nil
	}
	b = le.AppendUint32(b, typeArray)
	var ok bool
	switch a := v.(type) {
	case []string:
		b, ok = array(b, a)
	case []float32:
		b, ok = array(b, a)
	case []int32:
		b, ok = array(b, a)
	case []uint32:
		b, ok = array(b, a)
	case []uint8:
		b, ok = array(b, a)
	case []int8:
		b, ok = array(b, a)
	case []bool:
		b, ok = array(b, a)
	}
	if !ok {
		return nil, fmt.Errorf("value of type %T", v)
	}
	return b, nil
}

// Bytes is a GGUF v3 file of the metadata and tensors, tensor data aligned
// to Alignment.
func Bytes(kvs []KV, tensors []Tensor) ([]byte, error) {
	b := le.AppendUint32([]byte("GGUF"), 3)
	b = le.AppendUint64(b, uint64(len(tensors)))
	b = le.AppendUint64(b, uint64(len(kvs)))
	for _, kv := range kvs {
		var err error
		if b, err = value(str(b, kv.Key), kv.Val); err != nil {
			return nil, fmt.Errorf("ggufwrite: %s: %w", kv.Key, err)
		}
	}
	align := func(n int) int { return (n + Alignment - 1) / Alignment * Alignment }
	var off int
	for _, tn := range tensors {
		b = str(b, tn.Name)
		b = le.AppendUint32(b, uint32(len(tn.Dims)))
		for _, d := range tn.Dims {
			b = le.AppendUint64(b, d)
		}
		b = le.AppendUint32(b, tn.Type)
		b = le.AppendUint64(b, uint64(off))
		off = align(off + len(tn.Data))
	}
	for _, tn := range tensors {
		b = append(b, make([]byte, align(len(b))-len(b))...)
		b = append(b, tn.Data...)
	}
	return b, nil
}
