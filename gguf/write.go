package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// This file writes GGUF v3 files: what lowbit exports for llama.cpp and
// Ollama, and what tests build to feed the reader. The writer checks what it
// is given against the same limits the reader enforces, so that whatever it
// writes, the reader (and llama.cpp) reads back.

// Version is the GGUF version the writer writes.
const Version = 3

// KV is one metadata entry: a key and its value (ValueOf makes one).
type KV struct {
	Key   string
	Value Value
}

// ValueOf makes a metadata value of a Go value: an integer of a fixed width
// (uint8 to uint64, int8 to int64), float32, float64, bool or string; a
// slice of one of those is an array of it, and a []Value of array values an
// array of arrays. Other types (int, a map) are an error rather than a guess
// at the width a reader expects.
func ValueOf(v any) (Value, error) {
	switch x := v.(type) {
	case uint8:
		return Value{typ: TypeUint8, v: x}, nil
	case int8:
		return Value{typ: TypeInt8, v: x}, nil
	case uint16:
		return Value{typ: TypeUint16, v: x}, nil
	case int16:
		return Value{typ: TypeInt16, v: x}, nil
	case uint32:
		return Value{typ: TypeUint32, v: x}, nil
	case int32:
		return Value{typ: TypeInt32, v: x}, nil
	case uint64:
		return Value{typ: TypeUint64, v: x}, nil
	case int64:
		return Value{typ: TypeInt64, v: x}, nil
	case float32:
		return Value{typ: TypeFloat32, v: x}, nil
	case float64:
		return Value{typ: TypeFloat64, v: x}, nil
	case bool:
		return Value{typ: TypeBool, v: x}, nil
	case string:
		return Value{typ: TypeString, v: x}, nil
	case []uint8:
		return arrayOf(TypeUint8, x), nil
	case []int8:
		return arrayOf(TypeInt8, x), nil
	case []uint16:
		return arrayOf(TypeUint16, x), nil
	case []int16:
		return arrayOf(TypeInt16, x), nil
	case []uint32:
		return arrayOf(TypeUint32, x), nil
	case []int32:
		return arrayOf(TypeInt32, x), nil
	case []uint64:
		return arrayOf(TypeUint64, x), nil
	case []int64:
		return arrayOf(TypeInt64, x), nil
	case []float32:
		return arrayOf(TypeFloat32, x), nil
	case []float64:
		return arrayOf(TypeFloat64, x), nil
	case []bool:
		return arrayOf(TypeBool, x), nil
	case []string:
		return arrayOf(TypeString, x), nil
	case []Value:
		for i, e := range x {
			if e.typ != TypeArray {
				return Value{}, fmt.Errorf("gguf: element %d of an array of arrays is %s", i, article(e.describe()))
			}
		}
		return arrayOf(TypeArray, x), nil
	}
	return Value{}, fmt.Errorf("gguf: no metadata type for a Go %T", v)
}

// arrayOf is an array value holding a copy of a, so that the caller's
// slice cannot change the Value later.
func arrayOf[T any](elem ValueType, a []T) Value {
	return Value{typ: TypeArray, elem: elem, v: slices.Clone(a)}
}

// TensorData is a tensor with its data, for Marshal.
type TensorData struct {
	Name string
	// Dims are in ggml's order, the row length first (TensorInfo.Dims).
	Dims []int64
	Type GGMLType
	Data []byte
}

// Writer writes a GGUF v3 file to an io.Writer in one pass: NewWriter
// writes the header, metadata and tensor directory, WriteTensor each
// tensor's data in directory order, Close the rest. The data offsets are
// laid out from the directory's sizes up front, so nothing is seeked.
type Writer struct {
	w       *bufio.Writer
	tensors []TensorInfo
	align   int64
	next    int   // the tensor WriteTensor expects
	written int64 // bytes of the data section written so far
	err     error // sticky: a failed write spoils the file
}

// NewWriter writes the front matter of a GGUF v3 file holding kvs (in
// their order) and tensors (in theirs; Offset and Size are worked out
// here). Tensor data is aligned to general.alignment when kvs sets it (a
// uint32 power of two), else to DefaultAlignment. Keys and tensor names
// must be unique and non-empty, each tensor's type known, its rows whole
// blocks of it, and every count, length and size within the reader's
// limits: an error names what breaks a rule, and nothing is written then.
func NewWriter(w io.Writer, kvs []KV, tensors []TensorInfo) (*Writer, error) {
	gw := &Writer{w: bufio.NewWriterSize(w, 1<<20), align: DefaultAlignment}
	if err := gw.check(kvs, tensors); err != nil {
		return nil, err
	}
	b := binary.LittleEndian.AppendUint32([]byte("GGUF"), Version)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kvs)))
	for _, kv := range kvs {
		b = appendString(b, kv.Key)
		b = binary.LittleEndian.AppendUint32(b, uint32(kv.Value.typ))
		b = appendValue(b, kv.Value)
	}
	var off int64
	for i := range gw.tensors {
		t := &gw.tensors[i]
		t.Offset = off
		b = appendString(b, t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Type))
		b = binary.LittleEndian.AppendUint64(b, uint64(off))
		off = alignUp(off+t.Size, gw.align)
	}
	b = append(b, make([]byte, alignUp(int64(len(b)), gw.align)-int64(len(b)))...)
	if _, err := gw.w.Write(b); err != nil {
		return nil, fmt.Errorf("gguf: writing the header: %w", err)
	}
	return gw, nil
}

// check validates the metadata and directory and sizes the tensors.
func (gw *Writer) check(kvs []KV, tensors []TensorInfo) error {
	if len(kvs) > MaxKV {
		return fmt.Errorf("gguf: %d metadata keys, over the limit of %d", len(kvs), MaxKV)
	}
	if len(tensors) > MaxTensors {
		return fmt.Errorf("gguf: %d tensors, over the limit of %d", len(tensors), MaxTensors)
	}
	keys := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		switch {
		case kv.Key == "":
			return errors.New("gguf: empty metadata key")
		case len(kv.Key) > MaxNameLen:
			return fmt.Errorf("gguf: key %.40q... of %d bytes is over the %d-byte limit", kv.Key, len(kv.Key), MaxNameLen)
		case keys[kv.Key]:
			return fmt.Errorf("gguf: key %q appears twice", kv.Key)
		}
		keys[kv.Key] = true
		if err := checkValue(kv.Value, 0); err != nil {
			return fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
		if kv.Key == AlignmentKey {
			a, ok := kv.Value.v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("gguf: key %q must be a uint32 power of two, is %s %v", kv.Key, article(kv.Value.describe()), kv.Value.v)
			}
			gw.align = int64(a)
		}
	}
	names := make(map[string]bool, len(tensors))
	gw.tensors = make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		switch {
		case t.Name == "":
			return fmt.Errorf("gguf: tensor %d has an empty name", i)
		case len(t.Name) > MaxNameLen:
			return fmt.Errorf("gguf: tensor name %.40q... of %d bytes is over the %d-byte limit", t.Name, len(t.Name), MaxNameLen)
		case names[t.Name]:
			return fmt.Errorf("gguf: tensor %q appears twice", t.Name)
		case len(t.Dims) == 0 || len(t.Dims) > MaxDims:
			return fmt.Errorf("gguf: tensor %q has %d dims (want 1 to %d)", t.Name, len(t.Dims), MaxDims)
		case !t.Type.Known():
			return fmt.Errorf("gguf: tensor %q: unknown %s", t.Name, t.Type)
		}
		names[t.Name] = true
		n := int64(1)
		for _, d := range t.Dims {
			if d <= 0 || n > math.MaxInt64/d {
				return fmt.Errorf("gguf: tensor %q: dims %v are not positive or overflow a 64-bit count", t.Name, t.Dims)
			}
			n *= d
		}
		if t.Dims[0]%t.Type.BlockSize() != 0 {
			return fmt.Errorf("gguf: tensor %q: rows of %d are not a whole number of %s blocks of %d", t.Name, t.Dims[0], t.Type, t.Type.BlockSize())
		}
		size, err := t.Type.Bytes(n)
		if err != nil {
			return fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		gw.tensors[i] = TensorInfo{Name: t.Name, Dims: slices.Clone(t.Dims), Type: t.Type, Size: size}
	}
	return nil
}

// checkValue refuses a value the reader would refuse: an unknown type, a
// string or array over the limits, arrays nested too deep.
func checkValue(v Value, depth int) error {
	switch v.typ {
	case TypeString:
		if s, _ := v.v.(string); len(s) > MaxStringLen {
			return fmt.Errorf("a string of %d bytes is over the %d-byte limit", len(s), MaxStringLen)
		}
		return nil
	case TypeArray:
	default:
		if v.typ.fixedSize() == 0 || v.v == nil {
			return fmt.Errorf("no value of type %s", v.typ)
		}
		return nil
	}
	if depth >= MaxArrayDepth {
		return fmt.Errorf("arrays nested more than %d deep", MaxArrayDepth)
	}
	if n := v.Len(); n > MaxArrayLen {
		return fmt.Errorf("an array of %d elements is over the limit of %d", n, MaxArrayLen)
	}
	switch a := v.v.(type) {
	case []string:
		for i, s := range a {
			if len(s) > MaxStringLen {
				return fmt.Errorf("element %d: a string of %d bytes is over the %d-byte limit", i, len(s), MaxStringLen)
			}
		}
	case []Value:
		for i, e := range a {
			if e.typ != TypeArray {
				return fmt.Errorf("element %d of an array of arrays is %s", i, article(e.describe()))
			}
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	case nil:
		return errors.New("an array without elements' type")
	}
	return nil
}

// Tensors is the directory as written: each tensor's offset in the data
// section and its size.
func (gw *Writer) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(gw.tensors))
	for i, t := range gw.tensors {
		t.Dims = slices.Clone(t.Dims)
		out[i] = t
	}
	return out
}

// WriteTensor writes the data of the next tensor of the directory, which
// must be name, exactly its size.
func (gw *Writer) WriteTensor(name string, data []byte) error {
	if gw.err != nil {
		return gw.err
	}
	if gw.next >= len(gw.tensors) {
		return fmt.Errorf("gguf: tensor %q: every tensor of the directory is written", name)
	}
	t := gw.tensors[gw.next]
	if t.Name != name {
		return fmt.Errorf("gguf: tensor %q written where the directory has %q next", name, t.Name)
	}
	if int64(len(data)) != t.Size {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, the directory says %d (%s %v)", name, len(data), t.Size, t.Type, t.Dims)
	}
	pad := t.Offset - gw.written
	if _, err := gw.w.Write(make([]byte, pad)); err != nil {
		gw.err = fmt.Errorf("gguf: tensor %q: %w", name, err)
		return gw.err
	}
	if _, err := gw.w.Write(data); err != nil {
		gw.err = fmt.Errorf("gguf: tensor %q: %w", name, err)
		return gw.err
	}
	gw.written = t.Offset + t.Size
	gw.next++
	return nil
}

// Close checks that every tensor was written and flushes what is
// buffered. It does not close the underlying writer.
func (gw *Writer) Close() error {
	if gw.err != nil {
		return gw.err
	}
	if gw.next < len(gw.tensors) {
		return fmt.Errorf("gguf: %d of %d tensors written (next: %q)", gw.next, len(gw.tensors), gw.tensors[gw.next].Name)
	}
	if err := gw.w.Flush(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// Marshal is a whole GGUF v3 file in memory: small files, for tests and
// fuzz seeds. Large files go through a Writer.
func Marshal(kvs []KV, tensors []TensorData) ([]byte, error) {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type}
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, kvs, infos)
	if err != nil {
		return nil, err
	}
	for _, t := range tensors {
		if err := w.WriteTensor(t.Name, t.Data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

func appendString(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
}

// appendValue appends v's encoding without its type (which the caller
// writes before a key's value, and an array once for all its elements).
func appendValue(b []byte, v Value) []byte {
	le := binary.LittleEndian
	switch x := v.v.(type) {
	case uint8:
		return append(b, x)
	case int8:
		return append(b, byte(x))
	case uint16:
		return le.AppendUint16(b, x)
	case int16:
		return le.AppendUint16(b, uint16(x))
	case uint32:
		return le.AppendUint32(b, x)
	case int32:
		return le.AppendUint32(b, uint32(x))
	case uint64:
		return le.AppendUint64(b, x)
	case int64:
		return le.AppendUint64(b, uint64(x))
	case float32:
		return le.AppendUint32(b, math.Float32bits(x))
	case float64:
		return le.AppendUint64(b, math.Float64bits(x))
	case bool:
		if x {
			return append(b, 1)
		}
		return append(b, 0)
	case string:
		return appendString(b, x)
	}
	// An array: element type, count, elements.
	b = le.AppendUint64(le.AppendUint32(b, uint32(v.elem)), uint64(v.Len()))
	switch a := v.v.(type) {
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64, []float32, []float64, []bool:
		// Fixed-size elements, little-endian one after another.
		out, err := binary.Append(b, le, a)
		if err != nil {
			panic(err) // unreachable: every case is a slice of fixed-size values
		}
		return out
	case []string:
		for _, s := range a {
			b = appendString(b, s)
		}
	case []Value:
		for _, e := range a {
			b = appendValue(b, e)
		}
	}
	return b
}
