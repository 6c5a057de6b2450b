package gguf

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"lowbit/internal/hostile"
	"lowbit/internal/safefile"
)

func readBytes(b []byte) (*File, error) { return Read(bytes.NewReader(b), int64(len(b))) }

// TestTypeTable asserts each ggml type's number, block and bytes per block,
// each worked out from its block's fields in the comment.
func TestTypeTable(t *testing.T) {
	tests := []struct {
		typ          GGMLType
		num          uint32
		name         string
		block, bytes int64
	}{
		{F32, 0, "F32", 1, 4},
		{F16, 1, "F16", 1, 2},
		{Q4_0, 2, "Q4_0", 32, 18},    // f16 d + 16
		{Q4_1, 3, "Q4_1", 32, 20},    // f16 d, m + 16
		{Q5_0, 6, "Q5_0", 32, 22},    // f16 d + 4 high bits + 16
		{Q5_1, 7, "Q5_1", 32, 24},    // f16 d, m + 4 + 16
		{Q8_0, 8, "Q8_0", 32, 34},    // f16 d + 32
		{Q8_1, 9, "Q8_1", 32, 36},    // f16 d, s + 32
		{Q2_K, 10, "Q2_K", 256, 84},  // 16 scales + 64 quants + f16 d, dmin
		{Q3_K, 11, "Q3_K", 256, 110}, // 32 hmask + 64 quants + 12 scales + f16 d
		{Q4_K, 12, "Q4_K", 256, 144}, // f16 d, dmin + 12 scales + 128 quants
		{Q5_K, 13, "Q5_K", 256, 176}, // f16 d, dmin + 12 scales + 32 high bits + 128 quants
		{Q6_K, 14, "Q6_K", 256, 210}, // 128 low + 64 high + 16 scales + f16 d
		{Q8_K, 15, "Q8_K", 256, 292}, // f32 d + 256 quants + 16 int16 sums
		{IQ2_XXS, 16, "IQ2_XXS", 256, 66},
		{IQ2_XS, 17, "IQ2_XS", 256, 74},
		{IQ3_XXS, 18, "IQ3_XXS", 256, 98},
		{IQ1_S, 19, "IQ1_S", 256, 50},
		{IQ4_NL, 20, "IQ4_NL", 32, 18},
		{IQ3_S, 21, "IQ3_S", 256, 110},
		{IQ2_S, 22, "IQ2_S", 256, 82},
		{IQ4_XS, 23, "IQ4_XS", 256, 136},
		{I8, 24, "I8", 1, 1},
		{I16, 25, "I16", 1, 2},
		{I32, 26, "I32", 1, 4},
		{I64, 27, "I64", 1, 8},
		{F64, 28, "F64", 1, 8},
		{IQ1_M, 29, "IQ1_M", 256, 56},
		{BF16, 30, "BF16", 1, 2},
		{TQ1_0, 34, "TQ1_0", 256, 54}, // 48 five-per-byte + 4 four-per-byte + f16 d
		{TQ2_0, 35, "TQ2_0", 256, 66}, // 64 quants + f16 d
		{MXFP4, 39, "MXFP4", 32, 17},  // e8m0 exponent + 16
		{NVFP4, 40, "NVFP4", 64, 36},  // 4 e4m3 scales + 32
		{Q1_0, 41, "Q1_0", 128, 18},   // f16 d + 16 sign bytes
	}
	known := map[uint32]bool{}
	for _, tc := range tests {
		if uint32(tc.typ) != tc.num || tc.typ.String() != tc.name || tc.typ.BlockSize() != tc.block || tc.typ.TypeSize() != tc.bytes || !tc.typ.Known() {
			t.Errorf("%s: number %d, block %d, bytes %d; want %d, %d, %d", tc.typ, uint32(tc.typ), tc.typ.BlockSize(), tc.typ.TypeSize(), tc.num, tc.block, tc.bytes)
		}
		known[tc.num] = true
	}
	// Every other number, the retired ones included, is unknown.
	for n := range uint32(256) {
		if typ := GGMLType(n); typ.Known() != known[n] {
			t.Errorf("type %d (%s): Known() = %v", n, typ, typ.Known())
		}
	}
	if s := GGMLType(31).String(); s != "ggml type 31" {
		t.Errorf("String of a retired type = %q", s)
	}
}

func TestTypeBytes(t *testing.T) {
	tests := []struct {
		typ  GGMLType
		n    int64
		want int64
		err  string
	}{
		{F32, 10, 40, ""},
		{Q4_K, 512, 288, ""},
		{Q8_0, 0, 0, ""},
		{Q4_0, 33, 0, "not a whole number"},
		{Q4_0, -32, 0, "negative"},
		{GGMLType(4), 32, 0, "unknown"},
		{F64, math.MaxInt64 / 4, 0, "overflow"},
	}
	for _, tc := range tests {
		got, err := tc.typ.Bytes(tc.n)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s.Bytes(%d) = %d, %v; want an error saying %q", tc.typ, tc.n, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s.Bytes(%d) = %d, %v; want %d", tc.typ, tc.n, got, err, tc.want)
		}
	}
}

// every is a file holding a value of every metadata type, nested arrays
// included, and tensors of several types.
func every() ggufSpec {
	return ggufSpec{
		kvs: []kv{
			kvOf("general.architecture", "llama"),
			kvOf("u8", uint8(200)),
			kvOf("i8", int8(-100)),
			kvOf("u16", uint16(60000)),
			kvOf("i16", int16(-30000)),
			kvOf("u32", uint32(4000000000)),
			kvOf("i32", int32(-2000000000)),
			kvOf("u64", uint64(math.MaxUint64)),
			kvOf("i64", int64(math.MinInt64)),
			kvOf("f32", float32(1.5)),
			kvOf("f64", 2.25),
			kvOf("t", true),
			kvOf("f", false),
			kvOf("empty", ""),
			kvOf("tokens", []string{"<unk>", "a", "", "ü"}),
			kvOf("scores", []float32{0, -1.5, 2}),
			kvOf("scores64", []float64{0.5}),
			kvOf("types", []int32{1, 2, -3}),
			kvOf("bytes", []uint8{1, 2, 3}),
			kvOf("i8s", []int8{-1}),
			kvOf("u16s", []uint16{65535}),
			kvOf("i16s", []int16{-2}),
			kvOf("u32s", []uint32{7}),
			kvOf("u64s", []uint64{math.MaxUint64}),
			kvOf("i64s", []int64{-9}),
			kvOf("bools", []bool{true, false}),
			kvOf("none", []uint32{}),
			kvOf("nested", []any{[]uint32{1, 2}, []uint32{3}}),
			kvOf("deep", []any{[]any{[]any{[]string{"x"}}}}),
		},
		tensors: []tensorSpec{
			tensor("token_embd.weight", F32, 4, 3),
			tensor("norm", F16, 5),
			tensor("q4k", Q4_K, 512, 2),
			tensor("q8", Q8_0, 64),
			tensor("tq2", TQ2_0, 256),
			tensor("empty", F32, 0, 4),
			tensor("bf", BF16, 3),
		},
	}
}

func TestReadEveryType(t *testing.T) {
	b, datas := build(every())
	f, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version() != 3 || f.Alignment() != 32 || f.DataOffset()%32 != 0 || f.Size() != int64(len(b)) {
		t.Errorf("version %d, alignment %d, data at %d, size %d", f.Version(), f.Alignment(), f.DataOffset(), f.Size())
	}
	wantValues := map[string]any{
		"u8": uint8(200), "i8": int8(-100), "u16": uint16(60000), "i16": int16(-30000),
		"u32": uint32(4000000000), "i32": int32(-2000000000), "u64": uint64(math.MaxUint64),
		"i64": int64(math.MinInt64), "f32": float32(1.5), "f64": 2.25, "t": true, "f": false, "empty": "",
		"tokens": []string{"<unk>", "a", "", "ü"}, "scores": []float32{0, -1.5, 2}, "types": []int32{1, 2, -3},
		"bytes": []uint8{1, 2, 3}, "i8s": []int8{-1}, "u16s": []uint16{65535}, "i16s": []int16{-2},
		"u32s": []uint32{7}, "u64s": []uint64{math.MaxUint64}, "i64s": []int64{-9}, "bools": []bool{true, false},
		"none": []uint32{}, "scores64": []float64{0.5},
	}
	for key, want := range wantValues {
		v, ok := f.Value(key)
		if !ok || !reflect.DeepEqual(v.Interface(), want) {
			t.Errorf("%s = %#v, want %#v", key, v.Interface(), want)
		}
	}
	nested, _ := f.Value("nested")
	if nested.Type() != TypeArray || nested.ElemType() != TypeArray || nested.Len() != 2 {
		t.Fatalf("nested: %s of %s, %d elements", nested.Type(), nested.ElemType(), nested.Len())
	}
	inner := nested.Interface().([]Value)
	if !reflect.DeepEqual(inner[0].Interface(), []uint32{1, 2}) || !reflect.DeepEqual(inner[1].Interface(), []uint32{3}) {
		t.Errorf("nested = %v, %v", inner[0].Interface(), inner[1].Interface())
	}
	deep, _ := f.Value("deep")
	v := deep
	for range 3 {
		v = v.Interface().([]Value)[0]
	}
	if !reflect.DeepEqual(v.Interface(), []string{"x"}) {
		t.Errorf("deep = %v", v.Interface())
	}
	if keys := f.Keys(); len(keys) != len(every().kvs) || keys[0] != "general.architecture" || keys[len(keys)-1] != "deep" {
		t.Errorf("keys = %v", keys)
	}

	specs := every().tensors
	tensors := f.Tensors()
	if len(tensors) != len(specs) {
		t.Fatalf("%d tensors, want %d", len(tensors), len(specs))
	}
	for i, spec := range specs {
		ti := tensors[i]
		if ti.Name != spec.name || ti.Type != GGMLType(spec.typ) || ti.Size != spec.size() || len(ti.Dims) != len(spec.dims) {
			t.Errorf("tensor %d = %+v, want %+v", i, ti, spec)
		}
		got, err := f.TensorData(spec.name)
		if err != nil || !bytes.Equal(got, datas[spec.name]) {
			t.Errorf("data of %s: %v (%d bytes, want %d)", spec.name, err, len(got), len(datas[spec.name]))
		}
		info, sr, err := f.Tensor(spec.name)
		if err != nil || sr.Size() != info.Size || info.Name != spec.name {
			t.Errorf("Tensor(%s) = %+v, %v", spec.name, info, err)
		}
	}
	q4k, _ := f.Info("q4k")
	if q4k.Size != 2*2*144 || q4k.Elements() != 1024 || !reflect.DeepEqual(q4k.Shape(), []int64{2, 512}) {
		t.Errorf("q4k = %+v, shape %v", q4k, q4k.Shape())
	}
	if _, _, err := f.Tensor("missing"); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("Tensor(missing): %v", err)
	}
	// A copy handed out cannot change the file.
	tensors[0].Dims[0] = 99
	if ti, _ := f.Info("token_embd.weight"); ti.Dims[0] != 4 {
		t.Error("Tensors shares its dims with the file")
	}
	scores, _ := f.Float32s("scores")
	scores[0] = 42
	if again, _ := f.Float32s("scores"); again[0] != 0 {
		t.Error("Float32s shares its slice with the file")
	}
}

func TestVersion2AndAlignment(t *testing.T) {
	s := ggufSpec{
		version: 2,
		align:   64,
		kvs:     []kv{kvOf(AlignmentKey, uint32(64))},
		tensors: []tensorSpec{tensor("a", F32, 3), tensor("b", F32, 5)},
	}
	b, datas := build(s)
	f, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version() != 2 || f.Alignment() != 64 || f.DataOffset()%64 != 0 {
		t.Fatalf("version %d, alignment %d, data at %d", f.Version(), f.Alignment(), f.DataOffset())
	}
	if bi, _ := f.Info("b"); bi.Offset != 64 {
		t.Errorf("b at %d, want 64", bi.Offset)
	}
	if got, _ := f.TensorData("b"); !bytes.Equal(got, datas["b"]) {
		t.Errorf("b = %v", got)
	}
}

func TestNoTensors(t *testing.T) {
	// A vocabulary-only file: no data section, the directory ends the file.
	b, _ := build(ggufSpec{kvs: []kv{kvOf("tokenizer.ggml.tokens", []string{"a", "b"})}})
	f, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors()) != 0 {
		t.Errorf("tensors: %v", f.Tensors())
	}
}

func TestGetters(t *testing.T) {
	b, _ := build(every())
	f, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.String("general.architecture"); s != "llama" || err != nil {
		t.Errorf("String = %q, %v", s, err)
	}
	if b, err := f.Bool("t"); !b || err != nil {
		t.Errorf("Bool = %v, %v", b, err)
	}
	for key, want := range map[string]uint64{"u8": 200, "u16": 60000, "u32": 4000000000, "u64": math.MaxUint64} {
		if n, err := f.Uint(key); n != want || err != nil {
			t.Errorf("Uint(%s) = %d, %v", key, n, err)
		}
	}
	for key, want := range map[string]int64{"i8": -100, "i16": -30000, "i32": -2000000000, "i64": math.MinInt64, "u32": 4000000000} {
		if n, err := f.Int(key); n != want || err != nil {
			t.Errorf("Int(%s) = %d, %v", key, n, err)
		}
	}
	if x, err := f.Float("f32"); x != 1.5 || err != nil {
		t.Errorf("Float(f32) = %v, %v", x, err)
	}
	if x, err := f.Float("f64"); x != 2.25 || err != nil {
		t.Errorf("Float(f64) = %v, %v", x, err)
	}
	if s, err := f.Strings("tokens"); len(s) != 4 || s[3] != "ü" || err != nil {
		t.Errorf("Strings = %q, %v", s, err)
	}
	if n, err := f.Ints("types"); !reflect.DeepEqual(n, []int64{1, 2, -3}) || err != nil {
		t.Errorf("Ints(types) = %v, %v", n, err)
	}
	if n, err := f.Ints("bytes"); !reflect.DeepEqual(n, []int64{1, 2, 3}) || err != nil {
		t.Errorf("Ints(bytes) = %v, %v", n, err)
	}
	if x, err := f.Float32s("scores64"); !reflect.DeepEqual(x, []float32{0.5}) || err != nil {
		t.Errorf("Float32s(scores64) = %v, %v", x, err)
	}

	// Errors name the key and the type found.
	errs := []struct {
		name string
		call func() error
		want string
	}{
		{"String of uint32", func() error { _, err := f.String("u32"); return err }, `key "u32" holds a uint32, not a string`},
		{"Bool of string", func() error { _, err := f.Bool("empty"); return err }, `key "empty" holds a string, not a bool`},
		{"Uint of negative", func() error { _, err := f.Uint("i32"); return err }, `key "i32" holds the int32 -2000000000, not a non-negative integer`},
		{"Uint of float", func() error { _, err := f.Uint("f32"); return err }, `key "f32" holds a float32, not an integer`},
		{"Int of huge uint64", func() error { _, err := f.Int("u64"); return err }, `key "u64" holds the uint64 18446744073709551615, too large for an int64`},
		{"Float of int", func() error { _, err := f.Float("i8"); return err }, `key "i8" holds an int8, not a float`},
		{"Strings of int32s", func() error { _, err := f.Strings("types"); return err }, `key "types" holds an array of int32, not an array of string`},
		{"Strings of string", func() error { _, err := f.Strings("empty"); return err }, `key "empty" holds a string, not an array of string`},
		{"Ints of strings", func() error { _, err := f.Ints("tokens"); return err }, `key "tokens" holds an array of string, not an array of integers`},
		{"Ints of scalar", func() error { _, err := f.Ints("u8"); return err }, `key "u8" holds a uint8, not an array of integers`},
		{"Ints of huge uint64s", func() error { _, err := f.Ints("u64s"); return err }, `key "u64s": element 0`},
		{"Float32s of ints", func() error { _, err := f.Float32s("types"); return err }, `key "types" holds an array of int32, not an array of floats`},
	}
	for _, tc := range errs {
		if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, get := range []func(string) error{
		func(k string) error { _, err := f.String(k); return err },
		func(k string) error { _, err := f.Uint(k); return err },
		func(k string) error { _, err := f.Int(k); return err },
		func(k string) error { _, err := f.Float(k); return err },
		func(k string) error { _, err := f.Bool(k); return err },
		func(k string) error { _, err := f.Strings(k); return err },
		func(k string) error { _, err := f.Ints(k); return err },
		func(k string) error { _, err := f.Float32s(k); return err },
	} {
		if err := get("absent.key"); !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), `"absent.key"`) {
			t.Errorf("absent key: %v", err)
		}
	}
}

// withKV is a valid file with one more metadata entry of raw bytes.
func withKV(key string, typ uint32, val []byte) []byte {
	b, _ := build(ggufSpec{kvs: []kv{kvOf("general.architecture", "llama"), {key, typ, val}}})
	return b
}

// withTensors is a valid file but for its tensors.
func withTensors(tensors ...tensorSpec) []byte {
	b, _ := build(ggufSpec{tensors: tensors})
	return b
}

func TestHostile(t *testing.T) {
	valid, _ := build(every())
	longKey := strings.Repeat("k", MaxNameLen+1)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short", []byte("GGUF\x03\x00\x00\x00"), "too short"},
		{"magic", func() []byte { b, _ := build(ggufSpec{magic: "GGML"}); return b }(), `starts with "GGML"`},
		{"version 1", func() []byte { b, _ := build(ggufSpec{version: 1}); return b }(), "version 1 is not supported"},
		{"big-endian", func() []byte { b, _ := build(ggufSpec{version: 3 << 24}); return b }(), "big-endian GGUF (version 3)"},
		{"version 4", func() []byte { b, _ := build(ggufSpec{version: 4}); return b }(), "unknown GGUF version 4"},
		{"tensor count", func() []byte { b, _ := build(ggufSpec{nTensors: u64p(1 << 62)}); return b }(), "at byte 8: tensor count 4611686018427387904 is over the limit"},
		{"kv count", func() []byte { b, _ := build(ggufSpec{nKV: u64p(math.MaxUint64)}); return b }(), "at byte 16: metadata key count"},
		{"counts past end", func() []byte { b, _ := build(ggufSpec{nKV: u64p(1000), nTensors: u64p(1000)}); return b }(), "1000 keys and 1000 tensors needs"},
		{"kv missing", func() []byte {
			b, _ := build(ggufSpec{nKV: u64p(3), kvs: []kv{kvOf("a", uint8(1)), kvOf("b", uint8(2))}, truncate: 12})
			return b
		}(), "3 keys and 0 tensors needs 39 bytes but the 52-byte file has only 28 left"},
		{"empty key", func() []byte {
			b, _ := build(ggufSpec{nKV: u64p(3), kvs: []kv{kvOf("a", uint8(1)), kvOf("b", uint8(2))}, extraBytes: 64})
			return b
		}(), "at byte 52: empty key"},
		{"empty tensor name", withTensors(tensor("", F32, 1)), "at byte 24: empty tensor name"},
		{"key too long", withKV(longKey, uint32(TypeUint8), []byte{1}), "key of 65536 bytes is over the 65535-byte limit"},
		{"key length huge", append(append([]byte("GGUF\x03\x00\x00\x00"), append(le64(0), le64(1)...)...), append(le64(1<<63), make([]byte, 32)...)...), "at byte 24: key of 9223372036854775808 bytes is over"},
		{"key past end", append(append([]byte("GGUF\x03\x00\x00\x00"), append(le64(0), le64(1)...)...), append(le64(1000), make([]byte, 32)...)...), "key needs 1000 bytes but the 64-byte file has only 32 left"},
		{"duplicate key", func() []byte {
			b, _ := build(ggufSpec{kvs: []kv{kvOf("a", uint8(1)), kvOf("a", uint8(2))}})
			return b
		}(), `at byte 38: key "a" appears twice`},
		{"unknown value type", withKV("k", 13, []byte{1}), `at byte 78: key "k": unknown value type 13`},
		{"bool 2", withKV("k", uint32(TypeBool), []byte{2}), `key "k": at byte 82: bool is 2, not 0 or 1`},
		{"bool array 7", withKV("k", uint32(TypeArray), append(rawArray(uint32(TypeBool), 2), 1, 7)), `key "k": at byte 95: element 1 of a bool array is 7`},
		{"string too long", withKV("k", uint32(TypeString), le64(MaxStringLen+1)), `key "k": at byte 82: string of 67108865 bytes is over the 67108864-byte limit`},
		{"string past end", withKV("k", uint32(TypeString), append(le64(100), "abc"...)), `key "k": at byte 90: string needs 100 bytes but the 96-byte file has only 6 left`},
		{"array too long", withKV("k", uint32(TypeArray), rawArray(uint32(TypeUint8), MaxArrayLen+1)), `key "k": at byte 82: array of 16777217 uint8 is over the limit of 16777216 elements`},
		{"array past end", withKV("k", uint32(TypeArray), rawArray(uint32(TypeUint32), 1<<20)), `array of 1048576 uint32 needs 4194304 bytes`},
		{"string array past end", withKV("k", uint32(TypeArray), rawArray(uint32(TypeString), 1<<20)), `array of 1048576 string needs 8388608 bytes`},
		{"array of unknown", withKV("k", uint32(TypeArray), rawArray(99, 1)), "array of unknown value type 99"},
		{"array string element past end", withKV("k", uint32(TypeArray), append(rawArray(uint32(TypeString), 2), append(gstr("ab"), le64(50)...)...)), `key "k": element 1: at byte 112: string needs 50 bytes`},
		{"nested too deep", withKV("k", uint32(TypeArray), func() []byte {
			var b []byte
			for range MaxArrayDepth + 1 {
				b = append(b, rawArray(uint32(TypeArray), 1)...)
			}
			return append(b, make([]byte, 64)...)
		}()), "arrays nested more than 4 deep"},
		{"alignment type", withKV(AlignmentKey, uint32(TypeUint64), le64(32)), `key "general.alignment" holds a uint64, not a uint32`},
		{"alignment 0", withKV(AlignmentKey, uint32(TypeUint32), le32(0)), `key "general.alignment" is 0, not a power of two`},
		{"alignment 48", withKV(AlignmentKey, uint32(TypeUint32), le32(48)), `key "general.alignment" is 48, not a power of two`},
		{"duplicate tensor", withTensors(tensor("a", F32, 8), tensor("a", F32, 8)), `at byte 57: tensor "a" appears twice`},
		{"tensor name too long", withTensors(tensor(longKey, F32, 1)), "tensor name of 65536 bytes is over"},
		{"five dims", withTensors(tensor("a", F32, 1, 1, 1, 1, 1)), `tensor "a": 5 dims, more than ggml's 4`},
		{"dims overflow", withTensors(tensor("a", F32, 1<<32, 1<<32)), `tensor "a": dims [4294967296 4294967296] overflow`},
		{"negative dim", withTensors(tensor("a", F32, 1<<63)), `tensor "a": dims [-9223372036854775808] overflow`},
		{"bytes overflow", withTensors(tensor("a", F64, 1<<61)), `tensor "a": 2305843009213693952 weights of F64 overflow`},
		{"unknown ggml type", withTensors(tensor("a", GGMLType(4), 32)), `tensor "a": unknown ggml type 4`},
		{"partial block", withTensors(tensor("a", Q4_0, 33, 2)), `tensor "a": rows of 33 are not a whole number of Q4_0 blocks of 32`},
		{"misaligned", withTensors(tensorSpec{name: "a", dims: []uint64{4}, typ: uint32(F32), offset: 4}), `tensor "a": data offset 4 is not a multiple of the alignment 32`},
		{"offset past file", withTensors(tensorSpec{name: "a", dims: []uint64{4}, typ: uint32(F32), offset: 1 << 40}), `tensor "a": data offset 1099511627776 is past the end`},
		{"truncated data", func() []byte {
			b, _ := build(ggufSpec{tensors: []tensorSpec{tensor("a", F32, 16)}, truncate: 1})
			return b
		}(), `tensor "a": 64 bytes at data offset 0 (byte 64 of the file) run past the end of the 127-byte file`},
		{"data start past end", func() []byte {
			b, _ := build(ggufSpec{tensors: []tensorSpec{tensor("a", F32, 0)}})
			return b[:len(b)-1]
		}(), "data section would start at byte 64, past the end of the 63-byte file"},
		{"overlap", withTensors(tensor("a", F32, 16), tensorSpec{name: "b", dims: []uint64{8}, typ: uint32(F32), offset: 32}), `tensor "b": bytes [32, 64) of the data section overlap tensor "a" at [0, 64)`},
		{"same offset", withTensors(tensor("a", F32, 8), tensorSpec{name: "b", dims: []uint64{8}, typ: uint32(F32), offset: 0}), `overlap tensor "a"`},
		{"truncated directory", valid[:len(valid)/3], "needs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readBytes(tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("err = %v\nwant it to say %q", err, tc.want)
			}
		})
	}
}

func TestMetadataBudget(t *testing.T) {
	// Declared allocations are charged before they are made: 100 uint32s
	// (400 bytes) fit a budget of 1000, a third array does not.
	s := ggufSpec{kvs: []kv{kvOf("a", make([]uint32, 100)), kvOf("b", make([]uint32, 100)), kvOf("c", make([]uint32, 100))}}
	b, _ := build(s)
	_, err := parse(bytes.NewReader(b), int64(len(b)), 1000)
	if err == nil || !strings.Contains(err.Error(), `key "c"`) || !strings.Contains(err.Error(), "over its 1000-byte memory limit") {
		t.Fatalf("err = %v", err)
	}
	if _, err := parse(bytes.NewReader(b), int64(len(b)), 10000); err != nil {
		t.Fatalf("within budget: %v", err)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	b, datas := build(every())
	path := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.TensorData("q8"); err != nil || !bytes.Equal(got, datas["q8"]) {
		t.Errorf("q8: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.TensorData("q8"); err == nil {
		t.Error("read after Close succeeded")
	}

	bad := filepath.Join(dir, "bad.gguf")
	if err := os.WriteFile(bad, b[:40], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), "bad.gguf") {
		t.Errorf("malformed file: %v, want an error naming it", err)
	}
	for _, tc := range []struct {
		name string
		make func(t testing.TB, path string)
		want error
	}{
		{"fifo", hostile.FIFO, safefile.ErrNotRegular},
		{"dev zero", hostile.DevZero, safefile.ErrNotRegular},
		{"dir", hostile.Dir, safefile.ErrNotRegular},
		{"oversized", func(t testing.TB, p string) { hostile.Oversized(t, p, MaxFileSize+1) }, safefile.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.gguf")
			tc.make(t, p)
			if _, err := Open(p); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "x.gguf") {
				t.Errorf("Open = %v, want %v naming the file", err, tc.want)
			}
		})
	}
}

// fuzzSeeds are the hand-built files the fuzzer starts from.
func fuzzSeeds() [][]byte {
	valid, _ := build(every())
	v2, _ := build(ggufSpec{version: 2, align: 64, kvs: []kv{kvOf(AlignmentKey, uint32(64))}, tensors: []tensorSpec{tensor("a", Q4_0, 64), tensor("b", F16, 3)}})
	none, _ := build(ggufSpec{kvs: []kv{kvOf("tokenizer.ggml.tokens", []string{"a", "b"})}})
	return [][]byte{
		valid, v2, none,
		withKV("k", uint32(TypeArray), append(rawArray(uint32(TypeString), 2), append(gstr("ab"), le64(50)...)...)),
		withTensors(tensor("a", F32, 16), tensorSpec{name: "b", dims: []uint64{8}, typ: uint32(F32), offset: 32}),
		withTensors(tensor("a", Q4_K, 256, 2), tensor("b", TQ2_0, 256), tensor("c", F32, 0)),
		withKV("nested", uint32(TypeArray), func() []byte { _, b := enc([]any{[]any{[]int8{1}}, []any{[]int8{2, 3}}}); return b }()),
	}
}

func FuzzRead(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := readBytes(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		// Every accepted file keeps the rules.
		if gf.Version() != 2 && gf.Version() != 3 {
			t.Fatalf("accepted version %d", gf.Version())
		}
		a := gf.Alignment()
		if a <= 0 || a&(a-1) != 0 || gf.DataOffset()%a != 0 {
			t.Fatalf("alignment %d, data at %d", a, gf.DataOffset())
		}
		tensors := gf.Tensors()
		seen := map[string]bool{}
		for i, ti := range tensors {
			if seen[ti.Name] {
				t.Fatalf("tensor %q twice", ti.Name)
			}
			seen[ti.Name] = true
			want, err := ti.Type.Bytes(ti.Elements())
			if err != nil || want != ti.Size || len(ti.Dims) > MaxDims {
				t.Fatalf("tensor %+v: size %d, %v", ti, want, err)
			}
			if ti.Offset%a != 0 || gf.DataOffset()+ti.Offset+ti.Size > int64(len(data)) {
				t.Fatalf("tensor %+v misplaced (data at %d, file %d bytes)", ti, gf.DataOffset(), len(data))
			}
			for _, o := range tensors[:i] {
				if ti.Size > 0 && o.Size > 0 && ti.Offset < o.Offset+o.Size && o.Offset < ti.Offset+ti.Size {
					t.Fatalf("tensors %q and %q overlap", ti.Name, o.Name)
				}
			}
			if b, err := gf.TensorData(ti.Name); err != nil || int64(len(b)) != ti.Size {
				t.Fatalf("TensorData(%s): %d bytes, %v", ti.Name, len(b), err)
			}
		}
		// No getter panics on any key.
		for _, k := range gf.Keys() {
			v, ok := gf.Value(k)
			if !ok {
				t.Fatalf("key %q listed but absent", k)
			}
			_ = v.Interface()
			_ = v.Len()
			gf.String(k)
			gf.Uint(k)
			gf.Int(k)
			gf.Float(k)
			gf.Bool(k)
			gf.Strings(k)
			gf.Ints(k)
			gf.Float32s(k)
		}
	})
}
