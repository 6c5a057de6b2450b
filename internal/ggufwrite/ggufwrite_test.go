package ggufwrite_test

import (
	"bytes"
	"slices"
	"testing"

	"lowbit/gguf"
	"lowbit/internal/ggufwrite"
)

// TestBytesRead writes every kind of value and a tensor, and the gguf reader
// gives them back.
func TestBytesRead(t *testing.T) {
	kvs := []ggufwrite.KV{
		{Key: "s", Val: "text"}, {Key: "b", Val: true}, {Key: "u32", Val: uint32(7)}, {Key: "i32", Val: int32(-3)},
		{Key: "f", Val: float32(1.5)}, {Key: "strs", Val: []string{"a", "bc"}}, {Key: "fs", Val: []float32{0.5, -1}},
		{Key: "is", Val: []int32{1, -2, 3}},
	}
	data := make([]byte, 4*8)
	b, err := ggufwrite.Bytes(kvs, []ggufwrite.Tensor{{Name: "w", Dims: []uint64{8}, Type: uint32(gguf.F32), Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.String("s"); err != nil || s != "text" {
		t.Errorf("s = %q, %v", s, err)
	}
	if v, err := f.Bool("b"); err != nil || !v {
		t.Errorf("b = %v, %v", v, err)
	}
	if v, err := f.Int("i32"); err != nil || v != -3 {
		t.Errorf("i32 = %v, %v", v, err)
	}
	if v, err := f.Strings("strs"); err != nil || !slices.Equal(v, []string{"a", "bc"}) {
		t.Errorf("strs = %v, %v", v, err)
	}
	if v, err := f.Ints("is"); err != nil || !slices.Equal(v, []int64{1, -2, 3}) {
		t.Errorf("is = %v, %v", v, err)
	}
	if v, err := f.Float32s("fs"); err != nil || !slices.Equal(v, []float32{0.5, -1}) {
		t.Errorf("fs = %v, %v", v, err)
	}
	if _, err := f.TensorData("w"); err != nil {
		t.Error(err)
	}
	if _, err := ggufwrite.Bytes([]ggufwrite.KV{{Key: "x", Val: struct{}{}}}, nil); err == nil {
		t.Error("a value of an unknown type was written")
	}
}
