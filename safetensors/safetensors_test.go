package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"lowbit/internal/hostile"
	"lowbit/internal/testmodels"
)

func TestWriteOpenRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	specs := []Spec{
		{Name: "a", DType: "F32", Shape: []int64{2, 3}},
		{Name: "b", DType: "U8", Shape: []int64{5}},
		{Name: "empty", DType: "F16", Shape: []int64{0, 4}},
		{Name: "scalar", DType: "I64", Shape: nil},
		{Name: "c", DType: "BF16", Shape: []int64{3}},
	}
	w, err := Create(path, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for i, s := range specs {
		info, _ := w.Info(s.Name)
		b := make([]byte, info.End-info.Begin)
		for j := range b {
			b[j] = byte(i*31 + j)
		}
		data[s.Name] = b
	}
	// Write from several goroutines, one tensor in two pieces.
	var wg sync.WaitGroup
	errs := make(chan error, len(specs)+1)
	for _, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.Name == "a" {
				errs <- w.WriteAt("a", 12, data["a"][12:])
				errs <- w.WriteAt("a", 0, data["a"][:12])
				return
			}
			errs <- w.Write(s.Name, data[s.Name])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
		t.Errorf("header size %d leaves data unaligned", n)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata()["format"] != "pt" {
		t.Errorf("metadata = %v", f.Metadata())
	}
	for _, s := range specs {
		got, err := f.Data(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[s.Name]) {
			t.Errorf("%s: data differs", s.Name)
		}
		info, _ := f.Info(s.Name)
		if fmt.Sprint(info.Shape) != fmt.Sprint(nonNil(s.Shape)) || info.DType != s.DType {
			t.Errorf("%s: info %+v", s.Name, info)
		}
	}
	if len(f.Tensors()) != len(specs) {
		t.Errorf("%d tensors", len(f.Tensors()))
	}
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func TestWriterRefusesIncomplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	w, err := Create(path, []Spec{{Name: "a", DType: "F32", Shape: []int64{4}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("a", make([]byte, 3)); err == nil {
		t.Error("short write accepted")
	}
	if err := w.Write("zzz", nil); err == nil {
		t.Error("undeclared tensor accepted")
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "not fully written") {
		t.Errorf("Close = %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("incomplete file left behind")
	}
}

func TestWriterChecks(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		specs []Spec
		want  string
	}{
		{"unknown dtype", []Spec{{Name: "a", DType: "F12", Shape: []int64{1}}}, "unknown dtype"},
		{"negative dim", []Spec{{Name: "a", DType: "F32", Shape: []int64{-2}}}, "negative dimension"},
		{"overflow", []Spec{{Name: "a", DType: "F32", Shape: []int64{1 << 40, 1 << 40}}}, "too large"},
		{"file overflow", []Spec{{Name: "a", DType: "U8", Shape: []int64{1 << 62}}, {Name: "b", DType: "U8", Shape: []int64{1 << 62}}}, "exceed"},
		{"duplicate", []Spec{{Name: "a", DType: "U8"}, {Name: "a", DType: "U8"}}, "declared twice"},
		{"metadata name", []Spec{{Name: "__metadata__", DType: "U8"}}, "invalid tensor name"},
		{"empty name", []Spec{{Name: "", DType: "U8"}}, "invalid tensor name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.safetensors")
			_, err := Create(path, tc.specs, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files left behind: %v", left)
	}
}

func TestWriterTempAndRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	specs := []Spec{{Name: "a", DType: "U8", Shape: []int64{4}}}
	w, err := Create(path, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("file visible under its final name before Close")
	}
	if err := w.Write("a", []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write("a", []byte{1, 2, 3, 4}); err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("second write: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 || left[0].Name() != "m.safetensors" {
		t.Errorf("directory holds %v", left)
	}

	// Abort leaves an existing file at path alone and removes the temporary one.
	w, err = Create(path, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("after Abort the directory holds %v", left)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Data("a")
	if !bytes.Equal(b, []byte{1, 2, 3, 4}) {
		t.Errorf("data %v", b)
	}
	f.Close()
	if _, err := f.Data("a"); err == nil {
		t.Error("Data after Close succeeded")
	}
}

func TestConcurrentWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	const tensors, rows, cols = 64, 16, 96
	var specs []Spec
	for i := range tensors {
		specs = append(specs, Spec{Name: fmt.Sprintf("t%02d", i), DType: "U8", Shape: []int64{rows, cols}})
	}
	w, err := Create(path, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := func(i, j int) byte { return byte(i*7 + j*13) }
	// 8 workers take tensors round-robin and write each one row at a time, last row first.
	var wg sync.WaitGroup
	errs := make(chan error, tensors*rows)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < tensors; i += 8 {
				for r := rows - 1; r >= 0; r-- {
					row := make([]byte, cols)
					for c := range row {
						row[c] = want(i, r*cols+c)
					}
					errs <- w.WriteAt(specs[i].Name, int64(r*cols), row)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, s := range specs {
		b, err := f.Data(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range b {
			if v != want(i, j) {
				t.Fatalf("%s byte %d = %d, want %d", s.Name, j, v, want(i, j))
			}
		}
	}
}

func TestOpenRealStories(t *testing.T) {
	f, err := Open(testmodels.Path(t, "stories260K-hf/model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, ok := f.Info("model.embed_tokens.weight")
	if !ok || info.DType != "F32" || fmt.Sprint(info.Shape) != "[512 64]" {
		t.Fatalf("embed_tokens = %+v %v", info, ok)
	}
	var n int64
	for _, t := range f.Tensors() {
		n += t.NumElements()
	}
	if n != 260032 {
		t.Errorf("%d parameters, want 260032", n)
	}
	b, _ := f.Data("model.norm.weight")
	x := make([]float32, 64)
	if err := ToFloat32("F32", b, x); err != nil {
		t.Fatal(err)
	}
	if x[0] <= 0 || x[0] > 10 {
		t.Errorf("norm[0] = %v", x[0])
	}
}

// build assembles a file from a raw header and a data size.
func build(header string, dataLen int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

func TestOpenMalformed(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "too short"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 1000), "{}"...), "past the end"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
		{"not json", build(`{"a":`, 0), "EOF"},
		{"not object", build(`[1,2]`, 0), "not a JSON object"},
		{"unknown dtype", build(`{"a":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}}`, 4), "unknown dtype"},
		{"size mismatch", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "needs 8 bytes"},
		{"overlap", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "overlap"},
		{"hole", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "hole"},
		{"out of range", build(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8), "past the 8 bytes"},
		{"trailing bytes", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "holds 8 bytes"},
		{"duplicate key", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "twice"},
		{"negative dim", build(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "invalid dimension"},
		{"reversed offsets", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4), "end before begin"},
		{"missing dtype", build(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), "dtype is missing"},
		{"bad metadata", build(`{"__metadata__":{"k":1}}`, 0), "__metadata__"},
		{"invalid utf-8", build("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0), "UTF-8"},
		{"trailing json", build(`{} {}`, 0), "trailing data"},
		{"missing shape", build(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), "shape is missing"},
		{"one offset", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4), "data_offsets must be"},
		{"fractional dim", build(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), "invalid dimension"},
		{"tensor not object", build(`{"a":[1]}`, 0), `tensor "a"`},
		{"overflow bytes", build(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}}`, 8), "too large"},
		{"overflow", build(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.safetensors")
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.safetensors") {
				t.Fatalf("err = %v, want it to name the file and say %q", err, tc.want)
			}
		})
	}
}

func writeTensorFile(t *testing.T, path string, names ...string) {
	t.Helper()
	var specs []Spec
	for _, n := range names {
		specs = append(specs, Spec{Name: n, DType: "F32", Shape: []int64{2}})
	}
	w, err := Create(path, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := w.Write(n, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDir(t *testing.T) {
	index := func(m map[string]string) string {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 32}, "weight_map": m})
		return string(b)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string // error substring, or "" for success
		names int
	}{
		{"single", func(t *testing.T, d string) { writeTensorFile(t, filepath.Join(d, "model.safetensors"), "x", "y") }, "", 2},
		{"sharded", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "model-00001-of-00002.safetensors"), "a", "b")
			writeTensorFile(t, filepath.Join(d, "model-00002-of-00002.safetensors"), "c")
			os.WriteFile(filepath.Join(d, IndexFile), []byte(index(map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})), 0o644)
		}, "", 3},
		{"missing shard", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "model-00001-of-00002.safetensors"), "a")
			os.WriteFile(filepath.Join(d, IndexFile), []byte(index(map[string]string{"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})), 0o644)
		}, "shard model-00002-of-00002.safetensors (holding c", 0},
		{"tensor not in shard", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "s1.safetensors"), "a")
			os.WriteFile(filepath.Join(d, IndexFile), []byte(index(map[string]string{"a": "s1.safetensors", "b": "s1.safetensors"})), 0o644)
		}, "tensor b in s1.safetensors", 0},
		{"duplicate across shards", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "s1.safetensors"), "a")
			writeTensorFile(t, filepath.Join(d, "s2.safetensors"), "a", "b")
			os.WriteFile(filepath.Join(d, IndexFile), []byte(index(map[string]string{"a": "s1.safetensors", "b": "s2.safetensors"})), 0o644)
		}, "tensor a is in both s1.safetensors and s2.safetensors", 0},
		{"bad index json", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "s1.safetensors"), "a")
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":`), 0o644)
		}, IndexFile, 0},
		{"empty weight_map", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{}}`), 0o644)
		}, "weight_map is missing or empty", 0},
		{"bad shard", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "s1.safetensors"), build(`{"a":1}`, 0), 0o644)
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{"a":"s1.safetensors"}}`), 0o644)
		}, "s1.safetensors", 0},
		{"single other name", func(t *testing.T, d string) { writeTensorFile(t, filepath.Join(d, "weights.safetensors"), "x") }, "", 1},
		{"several unindexed", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "a.safetensors"), "x")
			writeTensorFile(t, filepath.Join(d, "b.safetensors"), "y")
		}, "2 .safetensors files", 0},
		{"escaping shard", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{"a":"../x.safetensors"}}`), 0o644)
		}, "not a file name", 0},
		{"absolute shard", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{"a":"/etc/passwd"}}`), 0o644)
		}, `names shard "/etc/passwd", which is not a file name`, 0},
		{"parent dir shard", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{"a":".."}}`), 0o644)
		}, `names shard "..", which is not a file name`, 0},
		{"shard is a directory", func(t *testing.T, d string) {
			hostile.Dir(t, filepath.Join(d, "s1.safetensors"))
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{"a":"s1.safetensors"}}`), 0o644)
		}, "s1.safetensors: not a regular file (directory)", 0},
		{"index is /dev/zero", func(t *testing.T, d string) { hostile.DevZero(t, filepath.Join(d, IndexFile)) }, IndexFile + ": not a regular file (character device)", 0},
		{"weights are /dev/zero", func(t *testing.T, d string) { hostile.DevZero(t, filepath.Join(d, "model.safetensors")) }, "model.safetensors: not a regular file (character device)", 0},
		{"weights are a fifo", func(t *testing.T, d string) { hostile.FIFO(t, filepath.Join(d, "model.safetensors")) }, "model.safetensors: not a regular file (named pipe)", 0},
		{"weights are a symlink", func(t *testing.T, d string) {
			writeTensorFile(t, filepath.Join(d, "blob"), "x")
			os.Symlink(filepath.Join(d, "blob"), filepath.Join(d, "model.safetensors"))
		}, "", 1},
		{"index too large", func(t *testing.T, d string) {
			hostile.Oversized(t, filepath.Join(d, IndexFile), MaxIndexSize+1)
		}, "over the 64 MiB limit", 0},
		{"pytorch only", func(t *testing.T, d string) { os.WriteFile(filepath.Join(d, "pytorch_model.bin"), []byte("x"), 0o644) }, "only PyTorch .bin", 0},
		{"empty", func(t *testing.T, d string) {}, "no model.safetensors", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			s, err := OpenDir(dir)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if len(s.Names()) != tc.names {
				t.Errorf("names = %v", s.Names())
			}
			for _, n := range s.Names() {
				if b, err := s.Data(n); err != nil || len(b) != 8 {
					t.Errorf("Data(%s) = %d bytes, %v", n, len(b), err)
				}
			}
		})
	}
}

func TestToFloat32(t *testing.T) {
	tests := []struct {
		dt   DType
		src  []byte
		want []float32
	}{
		{"F32", []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}, []float32{1, -2}},
		{"F16", []byte{0x00, 0x3c, 0x00, 0xc0}, []float32{1, -2}},
		{"BF16", []byte{0x80, 0x3f, 0x00, 0xc0}, []float32{1, -2}},
		{"F64", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, []float32{1}},
	}
	for _, tc := range tests {
		got := make([]float32, len(tc.want))
		if err := ToFloat32(tc.dt, tc.src, got); err != nil {
			t.Fatalf("%s: %v", tc.dt, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.dt, got, tc.want)
		}
	}
	if err := ToFloat32("I32", make([]byte, 4), make([]float32, 1)); err == nil {
		t.Error("I32 accepted")
	}
	if err := ToFloat32("F32", make([]byte, 5), make([]float32, 1)); err == nil {
		t.Error("length mismatch accepted")
	}
}

func TestParseIndex(t *testing.T) {
	tests := []struct {
		index string
		want  string // error substring, "" for success
	}{
		{`{"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}}`, ""},
		{`{"weight_map":{"a":"sub/s1.safetensors"}}`, "not a file name"},
		{`{"weight_map":{"a":"."}}`, "not a file name"},
		{`{"weight_map":{"a":""}}`, "not a file name"},
		{"{\"weight_map\":{\"a\":\"s\\u0000.safetensors\"}}", "not a file name"},
		{`{"weight_map":[]}`, "cannot unmarshal"},
		{`{"weight_map":null}`, "missing or empty"},
	}
	for _, tc := range tests {
		shards, err := parseIndex([]byte(tc.index))
		if tc.want == "" {
			if err != nil || len(shards) != 2 || len(shards["s1.safetensors"]) != 2 {
				t.Errorf("%s: %v, %v", tc.index, shards, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.index, err, tc.want)
		}
	}
}

func TestFromFloat32Overflow(t *testing.T) {
	tests := []struct {
		dt   DType
		src  []float32
		want string // "" for success
	}{
		{"F16", []float32{1, 65504, -65504, float32(math.Inf(1))}, ""},
		{"F16", []float32{1, 1e10}, "element 1, 1e+10, is beyond the largest F16 (65504)"},
		{"F16", []float32{-70000}, "element 0, -70000, is beyond the largest F16"},
		{"BF16", []float32{3e38, float32(math.NaN())}, ""},
		{"BF16", []float32{0, 0, math.MaxFloat32}, "element 2, 3.4028235e+38, is beyond the largest BF16"},
		{"F32", []float32{math.MaxFloat32}, ""},
	}
	for _, tc := range tests {
		b, err := FromFloat32(tc.dt, tc.src)
		if tc.want == "" {
			if err != nil || len(b) != tc.dt.Size()*len(tc.src) {
				t.Errorf("%s %v: %d bytes, %v", tc.dt, tc.src, len(b), err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: err = %v, want %q", tc.dt, tc.src, err, tc.want)
		}
	}
}

func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":32},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"/abs"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		shards, err := parseIndex(data)
		if err != nil {
			return
		}
		for s, tensors := range shards {
			if s == "" || s == "." || s == ".." || filepath.Base(s) != s || filepath.IsAbs(s) || len(tensors) == 0 {
				t.Fatalf("accepted shard %q holding %v", s, tensors)
			}
		}
	})
}

func FuzzOpen(f *testing.F) {
	f.Add(build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4))
	f.Add(build(`{"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[],"data_offsets":[4,6]}}`, 6))
	f.Add(build(`{}`, 0))
	f.Add(build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8))
	f.Add(build(`{"a":{"dtype":"I64","shape":[0,3],"data_offsets":[0,0]},"b":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}  `, 2))
	f.Add(build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8))
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := parse("fuzz.safetensors", data)
		if err != nil {
			return
		}
		// Every accepted file satisfies the invariants.
		var pos int64
		seen := map[string]bool{}
		for _, ti := range sf.Tensors() {
			if ti.Begin != pos || ti.End-ti.Begin != ti.NumElements()*int64(ti.DType.Size()) {
				t.Fatalf("accepted tensor %+v breaks the layout", ti)
			}
			if ti.DType.Size() == 0 || seen[ti.Name] || ti.Name == "__metadata__" {
				t.Fatalf("accepted tensor %+v: unknown dtype or repeated name", ti)
			}
			seen[ti.Name] = true
			for _, d := range ti.Shape {
				if d < 0 {
					t.Fatalf("accepted tensor %+v has a negative dimension", ti)
				}
			}
			pos = ti.End
			if b, err := sf.Data(ti.Name); err != nil || int64(len(b)) != ti.End-ti.Begin {
				t.Fatalf("Data(%s): %v", ti.Name, err)
			}
		}
		if sf.DataOffset()+pos != int64(len(data)) {
			t.Fatalf("tensors end at %d, file is %d bytes", sf.DataOffset()+pos, len(data))
		}
	})
}

func BenchmarkToFloat32(b *testing.B) {
	const n = 1 << 20
	dst := make([]float32, n)
	for _, dt := range []DType{"F32", "F16", "BF16"} {
		src := make([]byte, n*dt.Size())
		for i := range src {
			src[i] = byte(i*37) & 0x3f // finite values
		}
		b.Run(string(dt), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if err := ToFloat32(dt, src, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpenStories(b *testing.B) {
	path := testmodels.Path(b, "stories260K-hf/model.safetensors")
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
