package gguf

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// mustKV is a metadata entry of a Go value the test knows ValueOf takes.
func mustKV(t *testing.T, key string, v any) KV {
	t.Helper()
	val, err := ValueOf(v)
	if err != nil {
		t.Fatal(err)
	}
	return KV{Key: key, Value: val}
}

// TestWriteRoundTrip writes every value type and tensors of several types,
// and reads back the same values, dims, types and bytes.
func TestWriteRoundTrip(t *testing.T) {
	inner1, _ := ValueOf([]int32{1, -2})
	inner2, _ := ValueOf([]string{"a", "bc"})
	values := map[string]any{
		"u8": uint8(200), "i8": int8(-5), "u16": uint16(60000), "i16": int16(-3000),
		"u32": uint32(1 << 31), "i32": int32(-1 << 30), "u64": uint64(1 << 60), "i64": int64(-1 << 60),
		"f32": float32(1.5), "f64": 2.25, "bool": true, "str": "héllo",
		"a.u8": []uint8{1, 2}, "a.i8": []int8{-1}, "a.u16": []uint16{7}, "a.i16": []int16{-7},
		"a.u32": []uint32{3, 4}, "a.i32": []int32{-3}, "a.u64": []uint64{9}, "a.i64": []int64{-9},
		"a.f32": []float32{0.5, -0.25}, "a.f64": []float64{1e300}, "a.bool": []bool{true, false},
		"a.str": []string{"x", "", "yz"}, "a.empty": []string{},
		"a.arr": []Value{inner1, inner2},
	}
	var kvs []KV
	for _, k := range []string{"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool", "str",
		"a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32", "a.u64", "a.i64", "a.f32", "a.f64", "a.bool", "a.str", "a.empty", "a.arr"} {
		kvs = append(kvs, mustKV(t, k, values[k]))
	}
	tensors := []TensorData{
		{Name: "a", Dims: []int64{3}, Type: F32, Data: bytes.Repeat([]byte{1}, 12)},
		{Name: "b", Dims: []int64{32, 2}, Type: Q8_0, Data: bytes.Repeat([]byte{2}, 68)},
		{Name: "c", Dims: []int64{256}, Type: TQ2_0, Data: bytes.Repeat([]byte{3}, 66)},
		{Name: "d", Dims: []int64{32, 1, 2}, Type: Q4_1, Data: bytes.Repeat([]byte{4}, 40)},
	}
	b, err := Marshal(kvs, tensors)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version() != 3 {
		t.Errorf("version %d", f.Version())
	}
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, kv.Key)
	}
	if !reflect.DeepEqual(f.Keys(), keys) {
		t.Errorf("keys %v, want %v", f.Keys(), keys)
	}
	for k, want := range values {
		v, ok := f.Value(k)
		if !ok {
			t.Errorf("key %s missing", k)
			continue
		}
		got := v.Interface()
		if k == "a.arr" {
			a := got.([]Value)
			if len(a) != 2 || !reflect.DeepEqual(a[0].Interface(), []int32{1, -2}) || !reflect.DeepEqual(a[1].Interface(), []string{"a", "bc"}) {
				t.Errorf("key %s = %v", k, a)
			}
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("key %s = %#v, want %#v", k, got, want)
		}
	}
	for _, td := range tensors {
		info, ok := f.Info(td.Name)
		if !ok || !reflect.DeepEqual(info.Dims, td.Dims) || info.Type != td.Type || info.Offset%DefaultAlignment != 0 {
			t.Errorf("tensor %s: %+v", td.Name, info)
			continue
		}
		data, err := f.TensorData(td.Name)
		if err != nil || !bytes.Equal(data, td.Data) {
			t.Errorf("tensor %s: data differs (%v)", td.Name, err)
		}
	}
}

// TestWriteAlignment lays tensor data out at general.alignment.
func TestWriteAlignment(t *testing.T) {
	kvs := []KV{mustKV(t, AlignmentKey, uint32(64))}
	tensors := []TensorData{
		{Name: "x", Dims: []int64{1}, Type: F32, Data: []byte{1, 2, 3, 4}},
		{Name: "y", Dims: []int64{1}, Type: F32, Data: []byte{5, 6, 7, 8}},
	}
	b, err := Marshal(kvs, tensors)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if f.DataOffset()%64 != 0 {
		t.Errorf("data section at %d", f.DataOffset())
	}
	if y, _ := f.Info("y"); y.Offset != 64 {
		t.Errorf("y at offset %d, want 64", y.Offset)
	}
}

// TestWriteRefuses lists what the writer refuses before writing anything,
// each with an error naming the fault.
func TestWriteRefuses(t *testing.T) {
	f32 := func(name string, n int64) TensorData {
		return TensorData{Name: name, Dims: []int64{n}, Type: F32, Data: make([]byte, 4*n)}
	}
	bad := Value{typ: TypeArray, elem: TypeString}
	cases := []struct {
		name    string
		kvs     []KV
		tensors []TensorData
		want    string
	}{
		{"empty key", []KV{mustKV(t, "", uint8(1))}, nil, "empty metadata key"},
		{"duplicate key", []KV{mustKV(t, "k", uint8(1)), mustKV(t, "k", uint8(2))}, nil, `key "k" appears twice`},
		{"zero value", []KV{{Key: "k"}}, nil, `key "k": no value`},
		{"array without elements", []KV{{Key: "k", Value: bad}}, nil, `key "k": an array without`},
		{"alignment not a power of two", []KV{mustKV(t, AlignmentKey, uint32(48))}, nil, "power of two"},
		{"alignment of the wrong type", []KV{mustKV(t, AlignmentKey, uint64(32))}, nil, "power of two"},
		{"duplicate tensor", nil, []TensorData{f32("t", 1), f32("t", 1)}, `tensor "t" appears twice`},
		{"empty tensor name", nil, []TensorData{f32("", 1)}, "empty name"},
		{"no dims", nil, []TensorData{{Name: "t", Type: F32}}, "0 dims"},
		{"zero dim", nil, []TensorData{{Name: "t", Dims: []int64{0}, Type: F32}}, "not positive"},
		{"unknown type", nil, []TensorData{{Name: "t", Dims: []int64{1}, Type: 4}}, "unknown ggml type 4"},
		{"partial block", nil, []TensorData{{Name: "t", Dims: []int64{48}, Type: Q8_0, Data: make([]byte, 51)}}, "not a whole number of Q8_0 blocks"},
		{"short data", nil, []TensorData{{Name: "t", Dims: []int64{4}, Type: F32, Data: make([]byte, 15)}}, "15 bytes of data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Marshal(c.kvs, c.tensors)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := ValueOf(3); err == nil {
		t.Error("ValueOf(int) should say int has no fixed width")
	}
}

// failWriter fails every write after the first n bytes.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

// TestWriterOrder holds WriteTensor to the directory's order and Close to
// every tensor, and passes on the underlying writer's failure.
func TestWriterOrder(t *testing.T) {
	infos := []TensorInfo{{Name: "a", Dims: []int64{1}, Type: F32}, {Name: "b", Dims: []int64{1}, Type: F32}}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil, infos)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", make([]byte, 4)); err == nil || !strings.Contains(err.Error(), `"a" next`) {
		t.Errorf("out of order: %v", err)
	}
	if err := w.WriteTensor("a", make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "1 of 2 tensors") {
		t.Errorf("close with a tensor missing: %v", err)
	}
	w, err = NewWriter(&failWriter{n: 1 << 30}, nil, []TensorInfo{{Name: "big", Dims: []int64{1 << 19}, Type: F32}})
	if err != nil {
		t.Fatal(err)
	}
	w.w.Reset(&failWriter{n: 10})
	if err := w.WriteTensor("big", make([]byte, 4<<19)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("failing writer: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed write should fail")
	}
}
