package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file builds GGUF bytes by hand for the tests: a well-formed file
// from a few fields, and every field reachable so a test can break it.

// kv is one metadata entry: its key, its type and its encoded value.
type kv struct {
	key string
	typ uint32
	val []byte
}

// tensorSpec is one entry of the directory. A negative offset is filled in
// by layout (the next aligned position after the tensors laid out before);
// a tensor given its own offset adds no room to the data section, and its
// data is written only where it fits. A nil data is filled with a pattern.
type tensorSpec struct {
	name   string
	dims   []uint64
	typ    uint32
	offset int64
	data   []byte
}

// ggufSpec is a whole file. Zero values give a valid version-3 file.
type ggufSpec struct {
	magic      string // "GGUF" when empty
	version    uint32 // 3 when 0
	nTensors   *uint64
	nKV        *uint64
	kvs        []kv
	tensors    []tensorSpec
	align      int64 // the layout's alignment; 32 when 0 (general.alignment is a kv, set it too)
	truncate   int   // bytes cut from the end
	extraBytes int   // zero bytes added at the end
}

func le32(x uint32) []byte { return binary.LittleEndian.AppendUint32(nil, x) }
func le64(x uint64) []byte { return binary.LittleEndian.AppendUint64(nil, x) }

// gstr encodes a GGUF string: a uint64 length, then the bytes.
func gstr(s string) []byte { return append(le64(uint64(len(s))), s...) }

// enc encodes a Go value as a GGUF value of the matching type: integers and
// floats of each width, bool, string, slices of those, and [][]any... as
// nested arrays (any slice of slices).
func enc(v any) (uint32, []byte) {
	switch x := v.(type) {
	case uint8:
		return uint32(TypeUint8), []byte{x}
	case int8:
		return uint32(TypeInt8), []byte{byte(x)}
	case uint16:
		return uint32(TypeUint16), binary.LittleEndian.AppendUint16(nil, x)
	case int16:
		return uint32(TypeInt16), binary.LittleEndian.AppendUint16(nil, uint16(x))
	case uint32:
		return uint32(TypeUint32), le32(x)
	case int32:
		return uint32(TypeInt32), le32(uint32(x))
	case uint64:
		return uint32(TypeUint64), le64(x)
	case int64:
		return uint32(TypeInt64), le64(uint64(x))
	case float32:
		return uint32(TypeFloat32), le32(math.Float32bits(x))
	case float64:
		return uint32(TypeFloat64), le64(math.Float64bits(x))
	case bool:
		if x {
			return uint32(TypeBool), []byte{1}
		}
		return uint32(TypeBool), []byte{0}
	case string:
		return uint32(TypeString), gstr(x)
	case []uint8:
		return encArray(x)
	case []int8:
		return encArray(x)
	case []uint16:
		return encArray(x)
	case []int16:
		return encArray(x)
	case []uint32:
		return encArray(x)
	case []int32:
		return encArray(x)
	case []uint64:
		return encArray(x)
	case []int64:
		return encArray(x)
	case []float32:
		return encArray(x)
	case []float64:
		return encArray(x)
	case []bool:
		return encArray(x)
	case []string:
		return encArray(x)
	case []any: // an array of arrays
		return encArray(x)
	}
	panic(fmt.Sprintf("enc: %T", v))
}

func encArray[T any](a []T) (uint32, []byte) {
	elem := uint32(TypeArray)
	var body []byte
	for _, x := range a {
		t, b := enc(x)
		elem = t
		body = append(body, b...)
	}
	if len(a) == 0 {
		var zero T
		elem, _ = enc(zero)
	}
	out := append(le32(elem), le64(uint64(len(a)))...)
	return uint32(TypeArray), append(out, body...)
}

// kvOf is a metadata entry holding v.
func kvOf(key string, v any) kv {
	t, b := enc(v)
	return kv{key, t, b}
}

// rawArray is an array header with no elements after it, for counts that lie.
func rawArray(elem uint32, n uint64) []byte { return append(le32(elem), le64(n)...) }

// size is the bytes of a tensor's data as the reader should work them out.
func (t tensorSpec) size() int64 {
	n := int64(1)
	for _, d := range t.dims {
		n *= int64(d)
	}
	b, err := GGMLType(t.typ).Bytes(n)
	if err != nil {
		return 0
	}
	return b
}

// pattern is the data of tensor i: bytes that differ between tensors.
func pattern(i int, n int64) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*31 + j*7 + 1)
	}
	return b
}

// build lays out the file and returns its bytes and the tensors' data by name.
func build(s ggufSpec) ([]byte, map[string][]byte) {
	align := s.align
	if align == 0 {
		align = DefaultAlignment
	}
	magic, version := s.magic, s.version
	if magic == "" {
		magic = "GGUF"
	}
	if version == 0 {
		version = 3
	}
	nT, nKV := uint64(len(s.tensors)), uint64(len(s.kvs))
	if s.nTensors != nil {
		nT = *s.nTensors
	}
	if s.nKV != nil {
		nKV = *s.nKV
	}
	b := append([]byte(magic), le32(version)...)
	b = append(b, le64(nT)...)
	b = append(b, le64(nKV)...)
	for _, e := range s.kvs {
		b = append(b, gstr(e.key)...)
		b = append(b, le32(e.typ)...)
		b = append(b, e.val...)
	}
	// Lay the tensors out one after another, each aligned.
	var next int64
	offsets := make([]int64, len(s.tensors))
	datas := map[string][]byte{}
	for i, t := range s.tensors {
		offsets[i] = t.offset
		if t.offset < 0 {
			offsets[i] = (next + align - 1) / align * align
		}
		d := t.data
		if d == nil {
			d = pattern(i, t.size())
		}
		datas[t.name] = d
		if t.offset < 0 {
			next = offsets[i] + int64(len(d))
		}
	}
	for i, t := range s.tensors {
		b = append(b, gstr(t.name)...)
		b = append(b, le32(uint32(len(t.dims)))...)
		for _, d := range t.dims {
			b = append(b, le64(d)...)
		}
		b = append(b, le32(t.typ)...)
		b = append(b, le64(uint64(offsets[i]))...)
	}
	for int64(len(b))%align != 0 {
		b = append(b, 0)
	}
	start := len(b)
	if len(s.tensors) > 0 {
		b = append(b, make([]byte, next)...)
	}
	for i, t := range s.tensors {
		if offsets[i] >= 0 && offsets[i]+int64(len(datas[t.name])) <= next {
			copy(b[start+int(offsets[i]):], datas[t.name])
		}
	}
	b = append(b, make([]byte, s.extraBytes)...)
	return b[:len(b)-min(s.truncate, len(b))], datas
}

// tensor is a spec laid out automatically.
func tensor(name string, typ GGMLType, dims ...uint64) tensorSpec {
	return tensorSpec{name: name, dims: dims, typ: uint32(typ), offset: -1}
}

func u64p(x uint64) *uint64 { return &x }
